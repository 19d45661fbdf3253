"""Generic traversal helpers over tile-IR statements and expressions."""

from __future__ import annotations

from tilus.ir.expr import Binary, Call, Cast, Select, TensorElement, Unary
from tilus.ir.stmt import ForStmt, IfStmt, InstStmt, SeqStmt, Stmt, ThreadGroupStmt, WhileStmt


def children(s: Stmt) -> list[Stmt]:
    """The direct sub-statements of ``s``."""
    if isinstance(s, SeqStmt):
        return list(s.stmts)
    if isinstance(s, (ForStmt, WhileStmt, ThreadGroupStmt)):
        return [s.body]
    if isinstance(s, IfStmt):
        return [s.then_body] + ([s.else_body] if s.else_body is not None else [])
    return []


def walk(s: Stmt):
    """Every statement in program order (pre-order)."""
    yield s
    for c in children(s):
        yield from walk(c)


def instructions(s: Stmt):
    """(statement, instruction) pairs in program order."""
    for x in walk(s):
        if isinstance(x, InstStmt):
            yield x, x.inst


def operands(e) -> tuple:
    """The direct scalar sub-expressions of expression ``e`` (a tile element's indices, not its
    tile); empty for leaves (constants, variables)."""
    t = type(e)
    if t is Binary:
        return (e.a, e.b)
    if t is Unary or t is Cast:
        return (e.a,)
    if t is Select:
        return (e.cond, e.a, e.b)
    if t is Call:
        return tuple(e.args)
    if t is TensorElement:
        return tuple(e.indices)
    return ()
