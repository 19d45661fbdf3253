"""Stable text form of the tile IR (also the content part of the compile-cache key)."""

from __future__ import annotations

from tilus.ir.enums import StrEnum
from tilus.ir.expr import Binary, Call, Cast, Const, Expr, Select, TensorElement, Unary, Var
from tilus.ir.function import POINTER_ALIGN, Function
from tilus.ir.inst import Inst
from tilus.ir.stmt import (
    AssignStmt,
    BreakStmt,
    DeclareStmt,
    ForStmt,
    IfStmt,
    InstStmt,
    ReturnStmt,
    SeqStmt,
    Stmt,
    ThreadGroupStmt,
    WhileStmt,
)
from tilus.ir.tensor import TensorVar


class Printer:
    """Prints a function; names are made unique deterministically in order of appearance."""

    def __init__(self):
        self.names: dict[int, str] = {}
        self.used: set[str] = set()

    def name(self, v) -> str:
        key = id(v)
        if key not in self.names:
            base = v.name.replace(".", "_") or "v"
            name, i = base, 0
            while name in self.used:
                i += 1
                name = f"{base}_{i}"
            self.used.add(name)
            self.names[key] = name
        return self.names[key]

    # --- expressions ---------------------------------------------------------------------------
    def expr(self, e) -> str:
        if isinstance(e, Const):
            if e.dtype.kind == "bool":
                return "true" if e.value else "false"
            if e.dtype.is_float():
                return f"{e.value!r}:{e.dtype.short_name}"
            return str(e.value) if e.dtype.name == "int32" else f"{e.value}:{e.dtype.short_name}"
        if isinstance(e, Var):
            return self.name(e)
        if isinstance(e, Binary):
            return f"({self.expr(e.a)} {e.op} {self.expr(e.b)})"
        if isinstance(e, Unary):
            return f"{e.op}{self.expr(e.a)}"
        if isinstance(e, Select):
            return f"({self.expr(e.cond)} ? {self.expr(e.a)} : {self.expr(e.b)})"
        if isinstance(e, Cast):
            return f"{e.dtype.name}({self.expr(e.a)})"
        if isinstance(e, Call):
            return f"{e.func}({', '.join(self.expr(a) for a in e.args)})"
        if isinstance(e, TensorElement):
            return f"{self.name(e.tensor)}[{', '.join(self.expr(i) for i in e.indices)}]"
        if isinstance(e, TensorVar):
            return "%" + self.name(e)
        if isinstance(e, (tuple, list)):
            return "[" + ", ".join(self.expr(x) for x in e) + "]"
        if e is None:
            return "_"
        if isinstance(e, StrEnum):  # printed as the plain string it replaced (cache keys stay put)
            return repr(e.value)
        return repr(e)

    def type_str(self, t) -> str:
        """``global[float16; m_size, 256]``: runtime dims printed as expressions, so the text
        (a compile-cache key) tells views of different shapes apart."""
        dims = ", ".join(str(d) if isinstance(d, int) else self.expr(d) for d in t.shape)
        return f"{t.kind}[{t.dtype.name}; {dims}]"

    def inst(self, inst: Inst) -> str:
        out = inst.output()
        parts = []
        for k, v in inst.items():
            if k == "out" or v is None and k in getattr(inst, "QUIET_NONE", ()):
                continue
            parts.append(f"{k}={self.expr(v)}")
        text = f"{inst.NAME}({', '.join(parts)})"
        if out is not None:
            return f"%{self.name(out)}: {self.type_str(out)} = {text}"
        return text

    # --- statements ----------------------------------------------------------------------------
    def stmt(self, s: Stmt, ind: int, lines: list[str]):
        pad = "  " * ind
        loc = f"  # line {s.loc.line}" if s.loc is not None else ""
        if isinstance(s, SeqStmt):
            for x in s.stmts:
                self.stmt(x, ind, lines)
        elif isinstance(s, DeclareStmt):
            init = f" = {self.expr(s.init)}" if s.init is not None else ""
            lines.append(f"{pad}let {self.name(s.var)}: {s.var.dtype}{init}{loc}")
        elif isinstance(s, AssignStmt):
            lines.append(f"{pad}{self.name(s.var)} = {self.expr(s.value)}{loc}")
        elif isinstance(s, InstStmt):
            lines.append(f"{pad}{self.inst(s.inst)}{loc}")
        elif isinstance(s, ForStmt):
            unroll = f" unroll={s.unroll}" if s.unroll is not None else ""
            lines.append(
                f"{pad}for {self.name(s.var)} in range({self.expr(s.start)}, "
                f"{self.expr(s.stop)}, {s.step}){unroll}:{loc}"
            )
            self.stmt(s.body, ind + 1, lines)
        elif isinstance(s, WhileStmt):
            lines.append(f"{pad}while {self.expr(s.cond)}:{loc}")
            self.stmt(s.body, ind + 1, lines)
        elif isinstance(s, IfStmt):
            lines.append(f"{pad}if {self.expr(s.cond)}:{loc}")
            self.stmt(s.then_body, ind + 1, lines)
            if s.else_body is not None:
                lines.append(f"{pad}else:")
                self.stmt(s.else_body, ind + 1, lines)
        elif isinstance(s, BreakStmt):
            lines.append(f"{pad}break{loc}")
        elif isinstance(s, ReturnStmt):
            lines.append(f"{pad}return{loc}")
        elif isinstance(s, ThreadGroupStmt):
            who = (
                "single_thread" if s.begin < 0 else f"threads[{s.begin}:{s.begin + s.num_threads}]"
            )
            lines.append(f"{pad}with {who}:{loc}")
            self.stmt(s.body, ind + 1, lines)
        else:
            raise TypeError(f"cannot print {type(s).__name__}")

    def function(self, fn: Function) -> str:
        params = ", ".join(f"{self.name(p)}: {p.dtype!r}" for p in fn.params)
        lines = [f"kernel {fn.name}({params})"]
        lines.append(f"  const_args {dict(fn.const_args)!r}")
        lines.append(f"  config {dict(fn.config)!r}")
        lines.append(f"  blocks [{', '.join(self.expr(b) for b in fn.blocks)}] warps {fn.warps}")
        if fn.cluster_size > 1:  # printed only when set, so other kernels keep their text
            lines.append(f"  cluster_blocks [{', '.join(map(str, fn.cluster))}]")
        if fn.min_blocks > 1:
            lines.append(f"  min_blocks {fn.min_blocks}")
        if fn.pointer_align != POINTER_ALIGN:  # the usual assumption is not printed
            lines.append(f"  pointer_align {fn.pointer_align}")
        for cond, loc in fn.assumes:
            where = f"  # line {loc.line}" if loc is not None else ""
            lines.append(f"  assume {self.expr(cond)}{where}")
        lines.append("body:")
        self.stmt(fn.body, 1, lines)
        return "\n".join(lines) + "\n"


def print_ir(node) -> str:
    """Text of a function, statement, instruction or expression."""
    p = Printer()
    if isinstance(node, Function):
        return p.function(node)
    if isinstance(node, Stmt):
        lines: list[str] = []
        p.stmt(node, 0, lines)
        return "\n".join(lines)
    if isinstance(node, Inst):
        return p.inst(node)
    if isinstance(node, Expr):
        return p.expr(node)
    raise TypeError(f"cannot print {type(node).__name__}")
