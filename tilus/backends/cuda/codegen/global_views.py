"""Global views derived from others: integer-indexed slices and permutations (no data moves)."""

from __future__ import annotations

import math

from tilus.backends.cuda.codegen.scalar import ctype
from tilus.backends.cuda.codegen.vector import static_int


def slice_global(ctx, inst, expr):
    """``g[i, :, j]``: the pointer moves to the indexed element; the kept dims keep their
    extents and strides. An index outside its dim empties the view (loads read zeros, stores
    are skipped), where the interpreter reports it."""
    src, out = inst.src, inst.out
    name, shape, strides = ctx.gview_info[src]
    ct = ctype(out.dtype)
    offs, oks, keep = [], [], []
    for d, i in enumerate(inst.indices):
        if i is None:
            keep.append(d)
            continue
        v = ctx.fresh("gi")
        ctx.emit(f"const int64_t {v} = (int64_t)({expr(i)});")
        offs.append(f"{v} * {strides[d]}" if strides[d] != "1" else v)
        oks.append(f"(uint64_t){v} < (uint64_t)({shape[d]})")
    new = ctx.name(out)
    ctx.emit(f"{ct}* const {new} = {name} + ({' + '.join(offs) or '0'});")
    if name in ctx.aligned_bases:  # the base moves by multiples of the indexed dims' strides
        align = ctx.aligned_bases[name]
        for d, i in enumerate(inst.indices):
            s = static_int(strides[d]) if i is not None else 0
            align = math.gcd(align, s * out.dtype.nbits // 8) if s is not None else 1
        if align > 1:
            ctx.aligned_bases[new] = align
    kshape = [shape[d] for d in keep]
    if kshape and oks:
        ok = ctx.fresh("gok")
        ctx.emit(f"const bool {ok} = {' && '.join(oks)};")
        kshape[0] = f"({ok} ? (int64_t)({kshape[0]}) : (int64_t)0)"
    ctx.gview_info[out] = (new, kshape, [strides[d] for d in keep])


def permute_global(ctx, inst):
    """The same pointer with its shape and strides permuted."""
    name, shape, strides = ctx.gview_info[inst.src]
    ctx.gview_info[inst.out] = (
        name,
        [shape[d] for d in inst.dims],
        [strides[d] for d in inst.dims],
    )
