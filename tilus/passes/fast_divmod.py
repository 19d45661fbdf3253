"""Pass: give ``fast_divmod`` calls with launch-invariant divisors host-computed magic numbers.

``self.fast_divmod(a, b)`` builds ``fastdiv(a, b)`` and ``fastmod(a, b)``. Division by a runtime
``int`` is a long instruction sequence on the GPU (a float reciprocal and corrections), yet the
divisors of tile rasterization (``num_m * swizzle``...) only depend on the kernel's integer
parameters. For each such divisor this pass reserves a hidden kernel parameter: the launcher
computes the divisor and its magic numbers once per set of integer arguments
(``magic_numbers``) and the generated code divides with a multiply-high, an add and a shift.

Which divisors qualify: the divisor, with every local variable replaced by its definition, may
only read int/bool kernel parameters and constants. A local qualifies when it is declared once
with an initial value and never assigned; loop variables, thread/block indices, tile elements and
float parameters do not. The call must be on ``int32`` values. Everything else is left alone:
constant divisors (the C compiler strength-reduces them) and divisors that vary inside the
kernel, which keep plain ``/`` and ``%``.

Because the host computes every hidden divisor before launching, a divisor must be positive
whenever the kernel launches, even when its ``fast_divmod`` sits in a branch that the launch does
not take; the launcher raises ``TilusArgumentError`` otherwise.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from tilus import source_cache
from tilus.dtypes import PointerType
from tilus.errors import SourceLoc
from tilus.ir.enums import VarKind
from tilus.ir.expr import Call, Const, Expr, TensorElement, Var
from tilus.ir.function import Function
from tilus.ir.printer import Printer
from tilus.ir.stmt import AssignStmt, DeclareStmt
from tilus.ir.visit import fields, own_nodes, rewrite, stmts, walk

#: Names the device-side scheme; part of the program text, so a change rebuilds cached kernels.
FASTDIV_SCHEME = "umulhi-add-shift-v1"
#: Divisors the device code handles: 1 <= d <= MAX_DIVISOR (dividends in [0, 2**31)).
MAX_DIVISOR = 2**31 - 1


def magic_numbers(d: int) -> tuple[int, int]:
    """``(magic, shift)`` with ``n // d == (umulhi(n, magic) + n) >> shift`` for 0 <= n < 2**31.

    The round-up method with an implicit 33rd multiplier bit: ``shift = ceil(log2(d))`` and
    ``magic = ceil(2**(32 + shift) / d) - 2**32``. Proof: write ``2**(32 + shift) = M*d - e``
    with ``M = magic + 2**32`` and ``0 <= e < d <= 2**shift``. Then
    ``n*M / 2**(32 + shift) = n/d + n*e / (d * 2**(32 + shift))`` and, with ``n = q*d + r``,
    the floor is ``q`` because ``r/d + n*e/(d * 2**(32 + shift)) < (d - 1)/d + 1/d = 1``
    (``n*e < 2**31 * 2**shift``). ``d > 2**(shift - 1)`` keeps ``M < 2**33`` so ``magic`` fits
    in 32 bits, and ``floor(n*M / 2**32) = umulhi(n, magic) + n`` stays below ``2 * n < 2**32``
    (no overflow) for ``n < 2**31``. ``d == 1`` gives ``shift = magic = 0``: ``q = n``.

    Raises:
        ValueError: ``d`` is not in [1, 2**31 - 1].
    """
    d = int(d)
    if not 1 <= d <= MAX_DIVISOR:
        raise ValueError(f"fast_divmod divisor {d} is not in [1, {MAX_DIVISOR}]")
    shift = (d - 1).bit_length()  # ceil(log2 d)
    magic = -(-(1 << (32 + shift)) // d) - (1 << 32)
    return magic, shift


@dataclass(frozen=True)
class HostDivisor:
    """One hidden divisor parameter of a kernel.

    Attributes:
        index: its position among the hidden divisors (kernel parameter ``tl_div{index}``).
        expr: the divisor over int/bool parameters and constants (locals substituted).
        text: the divisor as the kernel wrote it, for error messages.
        loc: the first ``fast_divmod`` that divides by it.
    """

    index: int
    expr: Expr
    text: str
    loc: SourceLoc | None

    def where(self) -> str:
        """``file.py:LINE `source``` of the ``fast_divmod`` call (or an empty string)."""
        if self.loc is None:
            return ""
        line = source_cache.line(self.loc.file, self.loc.line).strip()
        return f"{os.path.basename(self.loc.file)}:{self.loc.line}" + (f" `{line}`" if line else "")


@dataclass(frozen=True)
class FastDivPlan:
    """The hidden divisors of a kernel and which ``fastdiv``/``fastmod`` calls use them."""

    divisors: tuple[HostDivisor, ...] = ()
    calls: dict = field(default_factory=dict)  # id(Call) -> HostDivisor

    def divisor_of(self, call: Call) -> HostDivisor | None:
        """The hidden divisor a call divides by, or None (plain ``/`` and ``%``)."""
        return self.calls.get(id(call))

    def describe(self) -> str:
        """Lines for the program text (the compile-cache key): the hidden parameters and how
        many calls use each; empty when there are none, so other kernels' text is unchanged."""
        lines = []
        for d in self.divisors:
            uses = sum(1 for x in self.calls.values() if x is d)
            lines.append(
                f"hidden tl_div{d.index} = {Printer().expr(d.expr)} "
                f"({FASTDIV_SCHEME}, {uses} calls)\n"
            )
        return "".join(lines)


# --- traversal -------------------------------------------------------------------------------
def _is_fast_call(n) -> bool:
    return type(n) is Call and n.func in ("fastdiv", "fastmod")


class _Varies(Exception):
    """The expression varies inside the kernel (raised out of a rewrite)."""


class _HostExprs:
    """Rewrites expressions into ones over int/bool parameters and constants, or None."""

    def __init__(self, fn: Function):
        self.defs: dict = {}  # local Var -> list of definitions (init expr or None)
        for s in stmts(fn.body):
            if isinstance(s, DeclareStmt):
                self.defs.setdefault(s.var, []).append(s.init)
            elif isinstance(s, AssignStmt):
                self.defs.setdefault(s.var, []).append(None)
        self.memo: dict = {}
        self.visiting: set = set()

    def __call__(self, e):
        try:
            return rewrite(e, self._leaf)
        except _Varies:
            return None

    def _leaf(self, e):
        if type(e) is Var:
            r = self.var(e)
            if r is None:
                raise _Varies
            return r
        if type(e) is TensorElement:
            raise _Varies  # a tile element varies
        return None  # operators: rewrite the operands

    def var(self, v: Var):
        if v.kind == VarKind.PARAM:
            dt = v.dtype
            return v if not isinstance(dt, PointerType) and not dt.is_float() else None
        if v.kind != VarKind.LOCAL or v in self.visiting:
            return None
        if v not in self.memo:
            defs = self.defs.get(v, [])
            self.visiting.add(v)
            self.memo[v] = self(defs[0]) if len(defs) == 1 and defs[0] is not None else None
            self.visiting.discard(v)
        return self.memo[v]


def _key(e):
    """A structural key: equal keys compute equal values (variables by identity)."""
    if isinstance(e, Var):
        return ("var", id(e))
    if isinstance(e, Expr):
        return (type(e).__name__, *(_key(v) for _, v in fields(e)))
    if isinstance(e, tuple):
        return tuple(_key(x) for x in e)
    return e  # operator names, dtypes, constant values


def _reads_param(e) -> bool:
    return any(type(n) is Var for n in walk(e))


def plan_fast_divmod(fn: Function) -> FastDivPlan:
    """Find the ``fastdiv``/``fastmod`` calls whose divisor is fixed for a launch."""
    host = _HostExprs(fn)
    by_key: dict = {}
    calls: dict = {}
    for s in stmts(fn.body):
        for c in filter(_is_fast_call, own_nodes(s)):
            b = c.args[1]
            if id(c) in calls or c.dtype.name != "int32" or isinstance(b, Const):
                continue
            sub = host(b)
            if sub is None or not _reads_param(sub):
                continue  # varies inside the kernel, or constant after all
            k = _key(sub)
            if k not in by_key:
                by_key[k] = HostDivisor(len(by_key), sub, Printer().expr(b), s.loc)
            calls[id(c)] = by_key[k]
    return FastDivPlan(tuple(by_key.values()), calls)
