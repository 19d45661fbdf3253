"""Layout rules of annotations (seeds of inference) and repeat (copies in the same thread)."""

from __future__ import annotations

from tilus.backends.cuda.layout.inference import err
from tilus.backends.cuda.layout.plan import Group
from tilus.backends.cuda.tables import LAYOUT_RULES
from tilus.errors import at
from tilus.ir import inst_layout as LY
from tilus.ir.enums import TensorKind
from tilus.ir.inst_layout import repeat_layout

rule = LAYOUT_RULES.rule


@rule(LY.AnnotateLayout)
def _annotate(inf, stmt, inst, g: Group):
    t = inst.tensor
    if t.kind == TensorKind.SHARED:
        # applied where the tile is allocated (Inference.user_shared, collected before the
        # walk); here only a view of an annotated tile is refused
        v = inf.plan.shared.get(t)
        if v is None or v.root is not t:
            raise err(
                stmt,
                f"annotate_layout of the shared view %{t.name}: annotate the tile that "
                "shared_tensor allocated",
            )
        return
    inf.use(t, g, stmt)
    dg = inf.defs.get(inf.base(t)[0])
    if dg is not None and dg[0].size != inst.layout.num_threads:
        raise err(
            stmt,
            f"the layout given to %{t.name} spans {inst.layout.num_threads} threads but the "
            f"tile is created by a group of {dg[0].size} (at {at(dg[1].loc)})",
        )
    inf.set_anchor(t, inst.layout, stmt, user=True)


@rule(LY.Repeat)
def _repeat(inf, stmt, inst, g: Group):
    inf.no_perm(stmt, inst.src)
    inf.use(inst.src, g, stmt)
    inf.define(inst.out, g, stmt)
    inf.derive(inst.out, inst.src, lambda lo, i=inst: repeat_layout(i, lo), stmt, "repeat")
