"""Which tiles a function reads: decides whether an atomic's old values are needed."""

from __future__ import annotations

import dataclasses

from tilus.ir import inst_memory as M
from tilus.ir.tensor import TensorVar

_cache: dict = {}  # id(fn) -> (fn, tiles read)


def _tiles_in(x, out: set):
    if isinstance(x, TensorVar):
        out.add(x)
    elif isinstance(x, (tuple, list)):
        for y in x:
            _tiles_in(y, out)
    elif dataclasses.is_dataclass(x) and not isinstance(x, type):
        for f in dataclasses.fields(x):
            if not (isinstance(x, M.Atomic) and f.name == "out"):
                _tiles_in(getattr(x, f.name), out)


def tiles_read(fn) -> set:
    """Every tile some statement of ``fn`` names, except as the ``out`` of an atomic (other
    instructions' outputs count too: conservative, an atomic then keeps its result)."""
    hit = _cache.get(id(fn))
    if hit is None or hit[0] is not fn:
        tiles: set = set()
        _tiles_in(fn.body, tiles)
        if len(_cache) > 64:
            _cache.clear()
        hit = _cache[id(fn)] = (fn, tiles)
    return hit[1]


def result_used(fn, inst) -> bool:
    """Whether an atomic's old values are read anywhere (else the GPU can use ``red``)."""
    return inst.out in tiles_read(fn)
