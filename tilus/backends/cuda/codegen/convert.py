"""Register layout conversion through shared memory (casts into a fixed layout, reshapes that
move elements between threads, register slices)."""

# Every thread writes the elements it holds to a row-major copy of the tile in the block's
# scratch area (copies of a replicated tile write the same values), the group waits, and
# every thread reads the elements its destination layout gives it. The group also waits
# before writing, so one scratch area serves every conversion and reduction of the group.

from __future__ import annotations

import math

from tilus.backends.cuda.codegen import registers as R
from tilus.backends.cuda.codegen.scalar import ctype
from tilus.backends.cuda.tables import CODEGEN_RULES
from tilus.ir import inst as I


def row_major(coords, shape) -> str:
    """C code of the row-major linear index of ``coords`` (C expressions) in ``shape``."""
    parts = []
    for k, c in enumerate(coords):
        stride = math.prod(shape[k + 1 :])
        if shape[k] == 1:
            continue
        parts.append(f"({c}) * {stride}" if stride != 1 else f"({c})")
    return " + ".join(parts) or "0"


def through_shared(ctx, inst, src, out, read_index, convert=lambda v: v):
    """Move ``src``'s elements into ``out``'s layout: register ``j`` of ``out`` (coordinates
    ``c``, C expressions) gets ``convert(src[read_index(c)])``, the index row-major in src."""
    off = ctx.plan.scratch.get(inst)
    if off is None:
        raise ctx.error("internal: no shared scratch was planned for this layout conversion")
    sync = CODEGEN_RULES.lookup(I.Sync)
    ls, lo = R.layout_of(ctx, src), R.layout_of(ctx, out)
    g = ctx.group
    ct = ctype(src.dtype)
    R.declare(ctx, out)
    ctx.emit(f"// %{src.name} ({ls.kind}) -> %{out.name} ({lo.kind}) through shared memory")
    ctx.open("")
    buf = ctx.fresh("cv")
    ctx.emit(f"{ct}* const {buf} = ({ct}*)(tl_smem_ptr + {ctx.reduce_base + off}u);")
    sync(ctx, None, None)  # earlier readers of the scratch are done
    base = R.emit_thread_coords(ctx, ls, g)
    for i in range(ls.local_size):
        c = [R.coord(b, k) for b, k in zip(base, ls.local_coords(i))]
        ctx.emit(f"{buf}[{row_major(c, src.shape)}] = {R.elem(ctx, src, i)};")
    sync(ctx, None, None)
    base = R.emit_thread_coords(ctx, lo, g)
    for j in range(lo.local_size):
        c = [R.coord(b, k) for b, k in zip(base, lo.local_coords(j))]
        ctx.emit(f"{R.elem(ctx, out, j)} = {convert(f'{buf}[{read_index(c)}]')};")
    ctx.close()


def slice_register(ctx, inst, expr):
    """``x[i]``, ``x[:, j]`` of a register tile (any layouts, indices may be dynamic)."""
    src, out = inst.src, inst.out
    idx = [None if i is None else f"({expr(i)})" for i in inst.indices]

    def read(c):
        it = iter(c)
        full = [next(it) if i is None else i for i in idx]
        return row_major(full, src.shape)

    through_shared(ctx, inst, src, out, read)
