"""Generic traversal helpers over tile-IR statements."""

from __future__ import annotations

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
