"""Register reshapes: when a reshaped tile keeps every element in its thread and register."""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache

from tilus.errors import LayoutOperationError
from tilus.ir import inst as I
from tilus.ir.layout import RegisterLayout, replicated
from tilus.ir.layout.derived import insert_dims
from tilus.ir.layout.ops import reshape as reshape_layout


def moves_in_place(inst, src_layout: RegisterLayout, out_layout: RegisterLayout) -> bool:
    """Whether a cast or reshape keeps every element in the register it is in (else its
    registers go through shared memory)."""
    if isinstance(inst, I.ReshapeTensor):
        shape = tuple(inst.out.shape)
        if reshaped_layout(src_layout, shape) == out_layout:
            return True
        # any reshape whose modes split at the new dims' boundaries keeps the registers too
        # (a loaded tile seen as an mma fragment): compare where each element sits
        try:
            moved = reshape_layout(src_layout, shape)
        except LayoutOperationError:
            return False
        return replace(moved.canonical(), kind="") == replace(out_layout.canonical(), kind="")
    return src_layout == out_layout


def reshaped_layout(layout: RegisterLayout, shape) -> RegisterLayout | None:
    """``layout`` with the new ``shape``: size-1 dims added or dropped, a tile every thread
    holds whole in row-major registers, or modes split at the new dims' boundaries; None
    otherwise (the registers would have to move)."""
    out = insert_dims(layout, shape)
    if out is not None:
        return out
    if layout.replicated and layout == replicated(layout.shape, layout.num_threads):
        return replicated(shape, layout.num_threads)
    try:  # modes that split at the new dims' boundaries: the same registers, renumbered
        return reshape_layout(layout, shape)
    except LayoutOperationError:
        return None


def register_permutation(inst, src_layout: RegisterLayout, out_layout: RegisterLayout):
    """For a register reshape whose every element stays in its thread but not in its
    register (a tile permuted to an mma fragment whose register order differs): the tuple
    ``perm`` with output register ``j`` = source register ``perm[j]`` in every thread, a
    renaming that costs no instruction; None when an element changes threads, or for
    sub-byte tiles (their registers are packed words)."""
    if not isinstance(inst, I.ReshapeTensor) or inst.src.dtype.nbits < 8:
        return None
    if src_layout.num_threads != out_layout.num_threads:
        return None
    if src_layout.local_size != out_layout.local_size:
        return None
    return _permutation(src_layout, out_layout)


@lru_cache(maxsize=256)
def _permutation(src: RegisterLayout, out: RegisterLayout):
    """``register_permutation`` of two layouts of the same elements, row-major order (cached:
    a kernel's unrolled steps reshape the same layouts again)."""
    src_strides = _row_major_strides(src.shape)
    out_strides = _row_major_strides(out.shape)
    perm = None
    for t in range(src.num_threads):
        held = {}
        for i in range(src.local_size):
            held[sum(c * s for c, s in zip(src.coords(t, i), src_strides))] = i
        mine = []
        for j in range(out.local_size):
            i = held.get(sum(c * s for c, s in zip(out.coords(t, j), out_strides)))
            if i is None:
                return None
            mine.append(i)
        if perm is None:
            perm = tuple(mine)
        elif perm != tuple(mine):
            return None
    return perm


def _row_major_strides(shape) -> tuple[int, ...]:
    out, acc = [], 1
    for n in reversed(shape):
        out.append(acc)
        acc *= n
    return tuple(reversed(out))
