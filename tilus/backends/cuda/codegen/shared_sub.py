"""``store_shared``: a register tile into a shared tile, whole or in part (``offsets=``)."""

from __future__ import annotations

from tilus.backends.cuda.codegen import registers as R
from tilus.backends.cuda.codegen.memory import (
    _global_index,
    _in_bounds,
    _shared_elem,
    _tile_base,
    shared_offset,
    store_whole_shared,
    swizzled,
)
from tilus.backends.cuda.codegen.scalar import ctype
from tilus.backends.cuda.tables import CODEGEN_RULES
from tilus.ir import inst as I
from tilus.ir.expr import Const


@CODEGEN_RULES.rule(I.StoreShared)
def store_shared(ctx, inst, expr):
    """Copy a register tile into a whole shared tile, or into part of one (``offsets``)."""
    if inst.offsets is None:
        store_whole_shared(ctx, inst)
    else:
        store_sub_tile(ctx, inst, expr)


def _inside(inst) -> bool:
    """Whether constant offsets keep the whole register tile inside the shared tile."""
    if not all(isinstance(o, Const) for o in inst.offsets):
        return False
    shape, tile = inst.dst.shape, inst.src.shape
    for d, o in enumerate(int(o.value) for o in inst.offsets):
        n = tile[inst.dims.index(d)] if d in inst.dims else 1
        if o < 0 or o + n > shape[d]:
            return False
    return True


def store_sub_tile(ctx, inst, expr) -> None:
    """Each thread stores its registers at the offsets (the register tile's dims along the
    shared dims ``inst.dims``, the others at their offset); an element outside the shared tile
    is skipped, by a compare a dim unless the offsets are constants that keep it inside."""
    tile, reg = inst.dst, inst.src
    view = ctx.plan.shared[tile]
    layout = R.layout_of(ctx, reg)
    ct, w = ctype(reg.dtype), view.layout.swizzle
    off = shared_offset(ctx, tile)
    inside = _inside(inst)
    shape = [str(n) for n in tile.shape]
    ctx.open("")
    base, offs = _tile_base(ctx, layout, inst.offsets, expr)
    for i in range(layout.local_size):
        idx = _global_index(offs, base, inst.dims, layout.local_coords(i))
        addr = f"tl_smem_ptr + {swizzled(ctx, w, tile, off, _shared_elem(view, idx))}"
        store = f"*(({ct}*)({addr})) = {R.elem(ctx, reg, i)};"
        ctx.emit(store if inside else f"if ({_in_bounds(idx, shape)}) {store}")
    ctx.close()
