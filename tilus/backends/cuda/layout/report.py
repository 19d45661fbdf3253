"""A readable dump of a layout plan: every register tile's layout, and where data moves."""

from __future__ import annotations

from tilus.backends.cuda.layout.plan import LayoutPlan
from tilus.ir import inst as I
from tilus.ir.expr import TensorElement
from tilus.ir.function import Function
from tilus.ir.stmt import InstStmt
from tilus.ir.visit import own_nodes, stmts


def _line(stmt) -> str:
    return f"line {stmt.loc.line}" if stmt is not None and stmt.loc is not None else "line ?"


def _describe(t, layout, group) -> str:
    threads = f"threads [{group.begin}, {group.begin + group.size})" if group else "threads ?"
    shape = ", ".join(map(str, t.shape))
    return (
        f"%{t.name} [{shape}] {t.dtype.name}: {layout.kind}, {layout.local_size} per thread, "
        f"over {threads}"
    )


def layout_report(fn: Function, plan: LayoutPlan) -> str:
    """The register layouts of ``fn`` and each place its plan moves registers through shared
    memory (conversions, cross-warp reductions, element broadcasts, gathers), by source line."""
    where: dict = {}  # instruction or element read -> its statement
    for s in stmts(fn.body):
        if isinstance(s, InstStmt):
            where[s.inst] = s
        for x in own_nodes(s):
            if isinstance(x, TensorElement):
                where.setdefault(x, s)
    out = ["register tiles:"]
    for t, layout in plan.registers.items():
        out.append("  " + _describe(t, layout, plan.owner.get(t)))
    moves = []
    copies = {copy: (inst, src) for inst, cs in plan.use_converts.items() for _, src, copy in cs}
    for key in plan.scratch:
        if key in copies:
            inst, src = copies[key]
            lo, ls = plan.registers[key], plan.registers.get(src)
            kind = ls.kind if ls is not None else "?"
            text = f"%{src.name} ({kind}) copied into {lo.kind} for this {inst.NAME}"
            moves.append((where.get(inst), text))
        elif isinstance(key, TensorElement):
            moves.append((where.get(key), f"element of %{key.tensor.name} broadcast to the group"))
        elif isinstance(key, I.Reduce):
            text = f"{key.NAME} of %{key.src.name} over dim {key.dim} across warps"
            moves.append((where.get(key), text))
        elif isinstance(key, I.PrintTensor | I.Scan):
            t = key.tensor if isinstance(key, I.PrintTensor) else key.src
            moves.append((where.get(key), f"{key.NAME} gathers %{t.name}"))
        else:
            ls, lo = plan.registers.get(key.src), plan.registers.get(key.out)
            kinds = f" ({ls.kind} -> {lo.kind})" if ls is not None and lo is not None else ""
            text = f"{key.NAME}: %{key.src.name} -> %{key.out.name}{kinds}"
            moves.append((where.get(key), text))
    out.append("through shared memory:" if moves else "through shared memory: nothing")
    moves.sort(key=lambda m: m[0].loc.line if m[0] is not None and m[0].loc else 0)
    for stmt, text in moves:
        out.append(f"  {_line(stmt)}: {text}")
    return "\n".join(out)
