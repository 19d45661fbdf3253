"""CUDA code of layout annotations (none: inference honoured them) and repeat (register copies)."""

from __future__ import annotations

from tilus.backends.cuda.codegen.registers import declare, elem, layout_of
from tilus.backends.cuda.tables import CODEGEN_RULES
from tilus.ir import inst_layout as LY
from tilus.ir.inst_layout import repeat_source_index

rule = CODEGEN_RULES.rule


@rule(LY.AnnotateLayout)
def _annotate_layout(ctx, inst, expr):
    ctx.emit(f"// %{inst.tensor.name}: layout given by annotate_layout")


@rule(LY.Repeat)
def _repeat(ctx, inst, expr):
    # layout inference put every copy in the thread that holds its source element
    # (inst_layout.repeat_layout), so each output register copies one source register
    src, out = layout_of(ctx, inst.src), layout_of(ctx, inst.out)
    declare(ctx, inst.out)
    if inst.out is inst.src:  # every repeat 1 into itself
        return
    ctx.emit(f"// %{inst.out.name} = repeat of %{inst.src.name} {list(inst.repeats)}")
    for i in range(out.local_size):
        j = repeat_source_index(inst, src.local_size, i)
        ctx.emit(f"{elem(ctx, inst.out, i)} = {elem(ctx, inst.src, j)};")
