"""``dot`` on register tiles with warp-level mma.sync m16n8k16 (f16/bf16 in, f32 accumulate)."""

from __future__ import annotations

from tilus.backends.cuda.codegen import registers as R
from tilus.backends.cuda.tables import CODEGEN_RULES
from tilus.ir import inst as I

rule = CODEGEN_RULES.rule


def _pack(lo: str, hi: str) -> str:
    return f"((uint32_t){lo} | ((uint32_t){hi} << 16))"


@rule(I.Dot)
def dot(ctx, inst, expr):
    """``out = a @ b + c``: one mma.sync per (m16 atom, n8 atom, k16 step) of each warp."""
    out, a, b, c = inst.out, inst.a, inst.b, inst.c
    lc, la, lb = (R.layout_of(ctx, t) for t in (out, a, b))
    if (lc.kind, la.kind, lb.kind) != ("mma_c", "mma_a", "mma_b"):
        raise ctx.error("dot operands do not have the mma.sync fragment layouts")
    if c is None or c is not out:
        if c is not None and c is not out:
            if R.layout_of(ctx, c) != lc:
                raise ctx.error(f"dot accumulator %{c.name} has a different layout")
        if inst.out is not c:
            R.declare(ctx, out)
        i = R.unrolled(ctx, lc.local_size)
        ctx.emit(f"{R.elem(ctx, out, i)} = {R.elem(ctx, c, i) if c is not None else '0.0f'};")
        ctx.close()
    fn = "tl_mma_m16n8k16_f32_" + ("f16" if a.dtype.name == "float16" else "bf16")
    rm, rn = lc.locals[0].extent, lc.locals[1].extent
    ks = la.locals[1].extent
    for im in range(rm):
        for jn in range(rn):
            base = (im * rn + jn) * 4
            d = [R.elem(ctx, out, base + r) for r in range(4)]
            ctx.open("")
            ctx.emit(f"float tl_d[4] = {{{', '.join(d)}}};")
            for kk in range(ks):
                ia = (im * ks + kk) * 8
                ib = (jn * ks + kk) * 4
                fa = [
                    _pack(R.elem(ctx, a, ia + 2 * q), R.elem(ctx, a, ia + 2 * q + 1))
                    for q in range(4)
                ]
                fb = [
                    _pack(R.elem(ctx, b, ib + 2 * q), R.elem(ctx, b, ib + 2 * q + 1))
                    for q in range(2)
                ]
                ctx.emit(f"const uint32_t tl_fa{kk}[4] = {{{', '.join(fa)}}};")
                ctx.emit(f"const uint32_t tl_fb{kk}[2] = {{{', '.join(fb)}}};")
                ctx.emit(f"{fn}(tl_d, tl_fa{kk}, tl_fb{kk});")
            for r in range(4):
                ctx.emit(f"{d[r]} = tl_d[{r}];")
            ctx.close()
