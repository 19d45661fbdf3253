"""Counter-based random numbers: Philox-4x32 per register of the offset tile."""

from __future__ import annotations

from tilus.backends.cuda.codegen.registers import declare, elem, layout_of, unrolled
from tilus.backends.cuda.ptx.random import PHILOX
from tilus.backends.cuda.tables import CODEGEN_RULES
from tilus.ir import inst_random as RN


@CODEGEN_RULES.rule(RN.Random)
def random(ctx, inst, expr):
    """Each register: Philox over its offset, then the word, uniform or normal it asks for."""
    out, off = inst.out, inst.offset
    layout = layout_of(ctx, out)
    if layout_of(ctx, off) != layout:
        raise ctx.error(f"tiles %{out.name} and %{off.name} have different layouts")
    if PHILOX not in ctx.fragments:
        ctx.fragments.append(PHILOX)
    declare(ctx, out)
    seed = ctx.fresh("seed")
    ctx.emit(f"const uint64_t {seed} = (uint64_t)({expr(inst.seed)});")
    i = unrolled(ctx, layout.local_size)
    ctx.emit("uint32_t tl_w[4];")
    ctx.emit(f"tl_philox({seed}, (uint32_t)({elem(ctx, off, i)}), {inst.rounds}, tl_w);")
    kind = inst.kind
    if kind is RN.RandomKind.UNIFORM:
        code = "tl_uniform24(tl_w[0])"
    elif kind is RN.RandomKind.NORMAL:
        # u1 in (0, 1] (never log 0), as the interpreter computes it
        code = (
            "sqrtf(-2.0f * logf(tl_uniform24(tl_w[0]) + 5.9604644775390625e-08f)) * "
            "cospif(2.0f * tl_uniform24(tl_w[1]))"
        )
    else:
        code = f"tl_w[{kind.value}]"
    ctx.emit(f"{elem(ctx, out, i)} = {code};")
    ctx.close()
