"""Statement-level traversal helpers of the passes, over the generic ``tilus.ir.visit``."""

from __future__ import annotations

from tilus.ir import visit
from tilus.ir.stmt import InstStmt, Stmt


def children(s: Stmt) -> list[Stmt]:
    """The direct sub-statements of ``s``."""
    return list(visit.sub_stmts(s))


def walk(s: Stmt):
    """Every statement in program order (pre-order)."""
    return visit.stmts(s)


def instructions(s: Stmt):
    """(statement, instruction) pairs in program order."""
    for x in visit.stmts(s):
        if type(x) is InstStmt:
            yield x, x.inst


def operands(e) -> tuple:
    """The direct scalar sub-expressions of expression ``e`` (a tile element's indices, not its
    tile); empty for leaves (constants, variables)."""
    return visit.exprs(e)
