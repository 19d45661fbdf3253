"""Pass: verify a function's well-formedness (definitions before uses, scoping, field types)."""

from __future__ import annotations

from tilus.errors import TilusCompileError
from tilus.ir.effects import EFFECTS
from tilus.ir.expr import Binary, Call, Cast, Const, Expr, Select, TensorElement, Unary, Var
from tilus.ir.function import Function
from tilus.ir.stmt import (
    AssignStmt,
    BreakStmt,
    DeclareStmt,
    ForStmt,
    IfStmt,
    InstStmt,
    ReturnStmt,
    SeqStmt,
    ThreadGroupStmt,
    WhileStmt,
)
from tilus.ir.tensor import TensorVar


class _Verifier:
    def __init__(self, fn: Function):
        self.scopes: list[set] = [set(fn.params)]
        self.loc = None

    def defined(self, v) -> bool:
        return any(v in s for s in self.scopes)

    def use(self, e):
        if isinstance(e, (list, tuple)):
            for x in e:
                self.use(x)
        elif isinstance(e, TensorVar):
            if not self.defined(e):
                raise TilusCompileError(
                    f"tile `{e.name}` is used outside the block that defined it", self.loc
                )
        elif isinstance(e, Var):
            if e.kind == "local" and not self.defined(e):
                raise TilusCompileError(
                    f"variable `{e.name}` is used outside the block that declared it (declare it "
                    f"before the loop/if/thread group to use it afterwards)",
                    self.loc,
                )
        elif isinstance(e, Binary):
            self.use(e.a)
            self.use(e.b)
        elif isinstance(e, (Unary, Cast)):
            self.use(e.a)
        elif isinstance(e, Select):
            self.use((e.cond, e.a, e.b))
        elif isinstance(e, Call):
            self.use(e.args)
        elif isinstance(e, TensorElement):
            self.use(e.tensor)
            self.use(e.indices)
        elif e is None or isinstance(e, (Const, int, float, str, bool)):
            pass
        elif isinstance(e, Expr):
            raise TilusCompileError(f"unknown expression {type(e).__name__}", self.loc)

    def block(self, s, extra=()):
        self.scopes.append(set(extra))
        self.stmt(s)
        self.scopes.pop()

    def stmt(self, s):
        if s.loc is not None:
            self.loc = s.loc
        if isinstance(s, SeqStmt):
            for x in s.stmts:
                self.stmt(x)
        elif isinstance(s, DeclareStmt):
            self.use(s.init)
            self.scopes[-1].add(s.var)
        elif isinstance(s, AssignStmt):
            self.use(s.var)
            self.use(s.value)
        elif isinstance(s, InstStmt):
            self.inst(s.inst)
        elif isinstance(s, ForStmt):
            self.use((s.start, s.stop))
            self.block(s.body, (s.var,))
        elif isinstance(s, WhileStmt):
            self.use(s.cond)
            self.block(s.body)
        elif isinstance(s, IfStmt):
            self.use(s.cond)
            self.block(s.then_body)
            if s.else_body is not None:
                self.block(s.else_body)
        elif isinstance(s, ThreadGroupStmt):
            self.block(s.body)
        elif isinstance(s, (BreakStmt, ReturnStmt)):
            pass
        else:
            raise TilusCompileError(f"unknown statement {type(s).__name__}", self.loc)

    def inst(self, inst):
        fx = EFFECTS.lookup(inst)
        out = inst.output()
        # an instruction that defines ``out`` may also be given an existing tile to overwrite
        defines = not fx.overwrites and out is not None and not self.defined(out)
        for name, value in inst.items():
            if name == "out" and defines:
                continue
            if name in fx.binders:
                continue
            if name == fx.scoped:
                self.scopes.append({v for b in fx.binders for v in getattr(inst, b)})
                self.use(value)
                self.scopes.pop()
                continue
            self.use(value)
        if defines:
            self.scopes[-1].add(out)


def verify(fn: Function) -> Function:
    """Check ``fn``; raises a located TilusCompileError on the first problem."""
    _Verifier(fn).stmt(fn.body)
    for b in fn.blocks:
        if isinstance(b, Expr):
            _Verifier(fn).use(b)
    return fn
