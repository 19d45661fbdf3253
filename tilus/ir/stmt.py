"""Statements of the tile IR: structured control flow, declarations and instructions."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from tilus.errors import SourceLoc
from tilus.ir.enums import Unroll
from tilus.ir.expr import Expr, Var


@dataclass(frozen=True, eq=False, slots=True)
class Stmt:
    """Base of all statements; ``loc`` is the user's source position it came from.

    What the generic passes need to know of a statement class beyond its fields (see
    ``tilus.ir.visit``): ``BINDS`` names the fields that declare a new variable (visible in the
    statement's sub-statements, or after the statement when it has none), ``WRITES`` the fields
    that assign an existing one, and ``SCOPED`` whether sub-statements open a scope of their
    own. Every other expression field is read.
    """

    loc: SourceLoc | None
    BINDS: ClassVar[tuple[str, ...]] = ()
    WRITES: ClassVar[tuple[str, ...]] = ()
    SCOPED: ClassVar[bool] = True


@dataclass(frozen=True, eq=False, slots=True)
class SeqStmt(Stmt):
    """Statements run in order."""

    stmts: tuple[Stmt, ...]
    SCOPED: ClassVar[bool] = False


@dataclass(frozen=True, eq=False, slots=True)
class DeclareStmt(Stmt):
    """Declare a scalar variable, optionally initialised."""

    var: Var
    init: Expr | None
    BINDS: ClassVar[tuple[str, ...]] = ("var",)


@dataclass(frozen=True, eq=False, slots=True)
class AssignStmt(Stmt):
    """Assign a new value to a declared scalar variable."""

    var: Var
    value: Expr
    WRITES: ClassVar[tuple[str, ...]] = ("var",)


@dataclass(frozen=True, eq=False, slots=True)
class InstStmt(Stmt):
    """Run one tile instruction."""

    inst: object  # tilus.ir.inst.Inst


@dataclass(frozen=True, eq=False, slots=True)
class ForStmt(Stmt):
    """``for var in range(start, stop, step)``; ``unroll`` is None, an int or ``Unroll.ALL``."""

    var: Var
    start: Expr
    stop: Expr
    step: int
    body: Stmt
    unroll: int | Unroll | None
    BINDS: ClassVar[tuple[str, ...]] = ("var",)

    def __post_init__(self):
        # the string "all" is accepted at the boundary; the node holds the enum member
        if isinstance(self.unroll, str):
            object.__setattr__(self, "unroll", Unroll(self.unroll))


@dataclass(frozen=True, eq=False, slots=True)
class WhileStmt(Stmt):
    """``while cond: body``."""

    cond: Expr
    body: Stmt


@dataclass(frozen=True, eq=False, slots=True)
class IfStmt(Stmt):
    """``if cond: then_body else: else_body`` on a runtime condition."""

    cond: Expr
    then_body: Stmt
    else_body: Stmt | None


@dataclass(frozen=True, eq=False, slots=True)
class BreakStmt(Stmt):
    """Leave the innermost loop."""


@dataclass(frozen=True, eq=False, slots=True)
class ReturnStmt(Stmt):
    """Leave the kernel (only valid outside thread groups)."""


@dataclass(frozen=True, eq=False, slots=True)
class ThreadGroupStmt(Stmt):
    """Run ``body`` on threads [begin, begin + num_threads) of the enclosing group.

    ``begin == -1`` with ``num_threads == 1`` is ``single_thread()``: any one elected thread.
    Sibling groups run concurrently.
    """

    begin: int
    num_threads: int
    body: Stmt


def seq(stmts) -> Stmt:
    """A statement sequence, flattening nested sequences."""
    flat: list[Stmt] = []
    for s in stmts:
        if isinstance(s, SeqStmt):
            flat.extend(s.stmts)
        elif s is not None:
            flat.append(s)
    if len(flat) == 1:
        return flat[0]
    return SeqStmt(None, tuple(flat))
