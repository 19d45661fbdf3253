"""Which shared allocations may be stored as 128-byte column blocks (``SharedLayout``)."""

from __future__ import annotations

from tilus.ir import inst as I
from tilus.ir import inst_prefetch as PF
from tilus.ir.function import Function
from tilus.ir.tensor import TensorVar
from tilus.passes.walk import instructions

#: What may use a shared tile stored in column blocks: element-wise copies and TMA, which
#: address it through ``SharedLayout`` (a prefetch only takes its boxes), and wgmma, whose descriptors step over the blocks
#: (a K row of 256 bytes is two 128-byte blocks); permuted views only as wgmma operands.
_BLOCKABLE_USES = (
    I.WgmmaMma,
    I.AllocShared,
    I.SliceTensor,
    I.LoadShared,
    I.StoreShared,
    I.TmaGlobalToShared,
    I.TmaSharedToGlobal,
    PF.TmaPrefetch,
    I.FreeShared,
    I.PrintTensor,
)


def blockable_tiles(fn: Function) -> set:
    """Shared allocations whose every use (through leading-dim slices) is in
    ``_BLOCKABLE_USES``: those with rows wider than 128 bytes get column blocks."""
    root: dict = {}
    bad: set = set()
    permuted: set = set()  # transposed views: blockable as wgmma operands only
    for _, inst in instructions(fn.body):
        if isinstance(inst, I.AllocShared):
            root[inst.out] = inst.out
            continue
        used = [v for _, value in inst.items() for v in _tensor_vars(value) if v in root]
        if isinstance(inst, I.SliceTensor) and inst.src in root:
            root[inst.out] = root[inst.src]
            if inst.src in permuted:
                permuted.add(inst.out)
        elif isinstance(inst, I.PermuteTensor) and inst.src in root:
            root[inst.out] = root[inst.src]
            permuted.add(inst.out)
        elif isinstance(inst, I.WgmmaMma):
            continue
        elif not isinstance(inst, _BLOCKABLE_USES) or any(v in permuted for v in used):
            bad.update(root[v] for v in used)
    return {t for t in root.values() if t not in bad}


def _tensor_vars(x):
    if isinstance(x, TensorVar):
        yield x
    elif isinstance(x, tuple | list):
        for y in x:
            yield from _tensor_vars(y)
