"""``dot`` on register tiles with warp-level mma.sync: m16n8k16 (f16/bf16 into f32 or f16),
m16n8k32 (int8/uint8 into int32), m16n8k8 (tf32 into f32)."""

from __future__ import annotations

from tilus.backends.cuda.codegen import registers as R
from tilus.backends.cuda.ptx.mma import mma_sync
from tilus.backends.cuda.tables import CODEGEN_RULES
from tilus.ir import inst as I
from tilus.ir.layout.mma import mma_atom

rule = CODEGEN_RULES.rule


def _pack(elems: list[str], pack: int) -> str:
    """One 32-bit register of ``pack`` elements, the first in the low bits."""
    if pack == 1:  # tf32: the float's bits (already rounded to tf32)
        return f"__float_as_uint({elems[0]})"
    if pack == 2:  # 16-bit elements are stored as their uint16_t bits
        return f"((uint32_t){elems[0]} | ((uint32_t){elems[1]} << 16))"
    bits = 32 // pack
    parts = [
        f"((uint32_t)(uint{bits}_t){e} << {bits * i})" if i else f"(uint32_t)(uint{bits}_t){e}"
        for i, e in enumerate(elems)
    ]
    return "(" + " | ".join(parts) + ")"


@rule(I.Dot)
def dot(ctx, inst, expr):
    """``out = a @ b + c``: one mma.sync per (m16 atom, n8 atom, k step) of each warp."""
    out, a, b, c = inst.out, inst.a, inst.b, inst.c
    lc, la, lb = (R.layout_of(ctx, t) for t in (out, a, b))
    atom = mma_atom(a.dtype, out.dtype)
    if atom is None or (lc.kind, la.kind, lb.kind) != ("mma_c", "mma_a", "mma_b"):
        raise ctx.error("dot operands do not have the mma.sync fragment layouts")
    if c is None or c is not out:
        if c is not None and c is not out:
            if R.layout_of(ctx, c) != lc:
                raise ctx.error(f"dot accumulator %{c.name} has a different layout")
        if inst.out is not c:
            R.declare(ctx, out)
        i = R.unrolled(ctx, lc.local_size)
        zero = "0" if out.dtype.is_integer() or out.dtype.name == "float16" else "0.0f"
        ctx.emit(f"{R.elem(ctx, out, i)} = {R.elem(ctx, c, i) if c is not None else zero};")
        ctx.close()
    frag = mma_sync(atom.k, atom.ab, atom.cd)
    if frag.name not in {f.name for f in ctx.fragments}:
        ctx.fragments.append(frag)
    p = atom.pack
    rm, rn = lc.locals[0].extent, lc.locals[1].extent
    ks = la.locals[1].extent
    for im in range(rm):
        for jn in range(rn):
            base = (im * rn + jn) * 4
            d = [R.elem(ctx, out, base + r) for r in range(4)]
            ctx.open("")
            if atom.cd == "f16":  # two f16x2 registers
                ctx.emit(f"uint32_t tl_d[2] = {{{_pack(d[:2], 2)}, {_pack(d[2:], 2)}}};")
            else:
                ct = "int" if atom.cd == "s32" else "float"
                ctx.emit(f"{ct} tl_d[4] = {{{', '.join(d)}}};")
            for kk in range(ks):
                ia = (im * ks + kk) * 4 * p
                ib = (jn * ks + kk) * 2 * p
                fa = [
                    _pack([R.elem(ctx, a, ia + q * p + e) for e in range(p)], p) for q in range(4)
                ]
                fb = [
                    _pack([R.elem(ctx, b, ib + q * p + e) for e in range(p)], p) for q in range(2)
                ]
                ctx.emit(f"const uint32_t tl_fa{kk}[4] = {{{', '.join(fa)}}};")
                ctx.emit(f"const uint32_t tl_fb{kk}[2] = {{{', '.join(fb)}}};")
                ctx.emit(f"{frag.name}(tl_d, tl_fa{kk}, tl_fb{kk});")
            if atom.cd == "f16":
                for r in range(4):
                    shift = " >> 16" if r % 2 else " & 0xffffu"
                    ctx.emit(f"{d[r]} = (uint16_t)(tl_d[{r // 2}]{shift});")
            else:
                for r in range(4):
                    ctx.emit(f"{d[r]} = tl_d[{r}];")
            ctx.close()
