"""Pass: verify a function's well-formedness (definitions before uses, scoping, field types)."""

from __future__ import annotations

from tilus.errors import TilusCompileError
from tilus.ir.effects import EFFECTS
from tilus.ir.enums import VarKind
from tilus.ir.expr import Expr, Var
from tilus.ir.function import Function
from tilus.ir.stmt import InstStmt, Stmt
from tilus.ir.tensor import TensorVar
from tilus.ir.visit import fields, nodes_in, walk


def _not_tensor(n) -> bool:
    return not isinstance(n, TensorVar)  # a tile's runtime shape was checked where it was made


class _Verifier:
    def __init__(self, fn: Function):
        self.scopes: list[set] = [set(fn.params)]
        self.loc = None

    def defined(self, v) -> bool:
        return any(v in s for s in self.scopes)

    def use(self, value):
        """Check every variable and tile that a field value reads."""
        for e in walk(value, _not_tensor):
            if isinstance(e, TensorVar):
                if not self.defined(e):
                    raise TilusCompileError(
                        f"tile `{e.name}` is used outside the block that defined it", self.loc
                    )
            elif isinstance(e, Var):
                if e.kind == VarKind.LOCAL and not self.defined(e):
                    raise TilusCompileError(
                        f"variable `{e.name}` is used outside the block that declared it "
                        f"(declare it before the loop/if/thread group to use it afterwards)",
                        self.loc,
                    )
            elif not isinstance(e, Expr):
                raise TilusCompileError(f"{type(e).__name__} where a value belongs", self.loc)

    def block(self, s, extra=()):
        self.scopes.append(set(extra))
        self.stmt(s)
        self.scopes.pop()

    def stmt(self, s):
        if not isinstance(s, Stmt):
            raise TilusCompileError(f"unknown statement {type(s).__name__}", self.loc)
        if s.loc is not None:
            self.loc = s.loc
        if type(s) is InstStmt:
            self.inst(s.inst)
            return
        # reads first (a for loop's bounds, an if's condition), then the sub-statements
        bound, subs = [], []
        for name, value in fields(s):
            if name == "loc":
                continue
            if name in s.BINDS:
                bound.append(value)
            elif isinstance(value, Stmt) or (
                isinstance(value, tuple) and value and isinstance(value[0], Stmt)
            ):
                subs.extend(nodes_in(value))
            else:
                self.use(value)
        if not subs:
            self.scopes[-1].update(bound)
        for x in subs:
            if s.SCOPED:
                self.block(x, bound)
            else:
                self.stmt(x)

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
