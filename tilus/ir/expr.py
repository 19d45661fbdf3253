"""Scalar expressions of the tile IR: constants, variables, operators, casts and calls.

Expressions overload Python's operators so that host code (``cdiv(m_size, 128)``) builds IR
without knowing it. Constants fold eagerly, so compile-time arithmetic never reaches the IR.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tilus import dtypes
from tilus.dtypes import DataType, PointerType, boolean, float32, int32, promote
from tilus.ir import cscalar
from tilus.ir.enums import VarKind

ARITH_OPS = ("+", "-", "*", "/", "%")
BIT_OPS = ("&", "|", "^", "<<", ">>")
CMP_OPS = ("==", "!=", "<", "<=", ">", ">=")
LOGIC_OPS = ("&&", "||")
CALL_FUNCS = {
    # name: (arity, result rule) -- "same": dtype of the first argument; "float": float type
    "min": 2,
    "max": 2,
    "abs": 1,
    "exp": 1,
    "exp2": 1,
    "log": 1,
    "log2": 1,
    "sqrt": 1,
    "rsqrt": 1,
    "sin": 1,
    "cos": 1,
    "tan": 1,
    "tanh": 1,
    "floor": 1,
    "ceil": 1,
    "round": 1,
    "trunc": 1,
    "fastdiv": 2,
    "fastmod": 2,
    "isnan": 1,
    "isinf": 1,
}


class IRValueAsBoolError(TypeError):
    """Raised when a runtime IR value is used where Python needs a concrete bool."""


class Expr:
    """Base class of scalar expressions. Every expression has a ``dtype``."""

    __slots__ = ()
    dtype: DataType | PointerType

    # --- operators build IR ------------------------------------------------------------------
    def __add__(self, o):
        return binary("+", self, o)

    def __radd__(self, o):
        return binary("+", o, self)

    def __sub__(self, o):
        return binary("-", self, o)

    def __rsub__(self, o):
        return binary("-", o, self)

    def __mul__(self, o):
        return binary("*", self, o)

    def __rmul__(self, o):
        return binary("*", o, self)

    def __truediv__(self, o):
        return binary("/", self, o)

    def __rtruediv__(self, o):
        return binary("/", o, self)

    def __floordiv__(self, o):
        return floordiv(self, o)

    def __rfloordiv__(self, o):
        return floordiv(o, self)

    def __mod__(self, o):
        return binary("%", self, o)

    def __rmod__(self, o):
        return binary("%", o, self)

    def __and__(self, o):
        return binary("&", self, o)

    def __rand__(self, o):
        return binary("&", o, self)

    def __or__(self, o):
        return binary("|", self, o)

    def __ror__(self, o):
        return binary("|", o, self)

    def __xor__(self, o):
        return binary("^", self, o)

    def __rxor__(self, o):
        return binary("^", o, self)

    def __lshift__(self, o):
        return binary("<<", self, o)

    def __rlshift__(self, o):
        return binary("<<", o, self)

    def __rshift__(self, o):
        return binary(">>", self, o)

    def __rrshift__(self, o):
        return binary(">>", o, self)

    def __eq__(self, o):  # type: ignore[override]
        return binary("==", self, o)

    def __ne__(self, o):  # type: ignore[override]
        return binary("!=", self, o)

    def __lt__(self, o):
        return binary("<", self, o)

    def __le__(self, o):
        return binary("<=", self, o)

    def __gt__(self, o):
        return binary(">", self, o)

    def __ge__(self, o):
        return binary(">=", self, o)

    def __neg__(self):
        return unary("-", self)

    def __pos__(self):
        return self

    def __invert__(self):
        return unary("~", self)

    __hash__ = object.__hash__

    def __bool__(self):
        raise IRValueAsBoolError(
            "a runtime value is used where Python needs a concrete bool (e.g. `and`/`or`, "
            "`if` inside a host expression, or a builtin like min/max on host code)"
        )

    def __index__(self):
        raise IRValueAsBoolError(
            "a runtime value is used where a compile-time int is required (or a Python number: "
            "`math` functions in a lambda, such as an `init=` function, run on the host; build "
            "the tile first and apply the tile function, e.g. `self.exp(tile)`)"
        )

    def __float__(self):
        raise IRValueAsBoolError(
            "a runtime value is used where a Python float is required (`math` functions in a "
            "lambda, such as an `init=` function, run on the host; build the tile first and "
            "apply the tile function, e.g. `self.exp(tile)`)"
        )


@dataclass(frozen=True, eq=False, slots=True)
class Const(Expr):
    """A typed constant."""

    value: Any
    dtype: DataType

    @staticmethod
    def of(value, dtype: DataType) -> Const:
        """A constant of ``dtype`` holding ``value`` converted like a C cast would."""
        return Const(cscalar.convert(value, dtype), dtype)

    __hash__ = object.__hash__


@dataclass(frozen=True, eq=False, slots=True)
class Var(Expr):
    """A named scalar variable; ``kind`` (a :class:`VarKind`) says what binds it."""

    name: str
    dtype: DataType | PointerType
    kind: VarKind = VarKind.LOCAL

    __hash__ = object.__hash__

    def __post_init__(self):
        # strings are accepted at the boundary; the node always holds the enum member
        if type(self.kind) is not VarKind:
            object.__setattr__(self, "kind", VarKind(self.kind))


@dataclass(frozen=True, eq=False, slots=True)
class Binary(Expr):
    """``a op b`` with C semantics (integer ``/`` and ``%`` truncate toward zero)."""

    op: str
    a: Expr
    b: Expr
    dtype: DataType

    __hash__ = object.__hash__


@dataclass(frozen=True, eq=False, slots=True)
class Unary(Expr):
    """``-a``, ``~a`` (bitwise not) or ``!a`` (logical not)."""

    op: str
    a: Expr
    dtype: DataType

    __hash__ = object.__hash__


@dataclass(frozen=True, eq=False, slots=True)
class Select(Expr):
    """``cond ? a : b`` (the Python ternary ``a if cond else b``)."""

    cond: Expr
    a: Expr
    b: Expr
    dtype: DataType

    __hash__ = object.__hash__


@dataclass(frozen=True, eq=False, slots=True)
class Cast(Expr):
    """A conversion of ``a`` to ``dtype`` (floats round to nearest even)."""

    a: Expr
    dtype: DataType

    __hash__ = object.__hash__


@dataclass(frozen=True, eq=False, slots=True)
class Call(Expr):
    """A call of a built-in scalar function (``min``, ``exp``, ``fastdiv``...)."""

    func: str
    args: tuple[Expr, ...]
    dtype: DataType

    __hash__ = object.__hash__


@dataclass(frozen=True, eq=False, slots=True)
class TensorElement(Expr):
    """One element of a register tensor, read as a scalar: ``phase[stage]``."""

    tensor: Any  # tilus.ir.tensor.TensorVar (register)
    indices: tuple[Expr, ...]
    dtype: DataType

    __hash__ = object.__hash__


# ---------------------------------------------------------------------------------------------
# construction helpers with constant folding


def as_expr(v, like: DataType | None = None) -> Expr:
    """Turn a Python number into a constant (typed like ``like`` where that makes sense)."""
    if isinstance(v, Expr):
        return v
    if isinstance(v, bool):
        return Const(v, boolean)
    if isinstance(v, int):
        if like is not None and not isinstance(like, PointerType) and like.kind != "bool":
            return Const.of(v, like)
        return Const.of(v, int32 if -(2**31) <= v < 2**31 else dtypes.int64)
    if isinstance(v, float):
        if like is not None and isinstance(like, DataType) and like.is_float():
            return Const(v, like)
        return Const(v, float32)
    raise TypeError(f"cannot use {type(v).__name__} {v!r} as a scalar value")


def _operand_types(a, b) -> tuple[Expr, Expr]:
    if isinstance(a, Expr) and not isinstance(b, Expr):
        return a, as_expr(b, a.dtype)
    if isinstance(b, Expr) and not isinstance(a, Expr):
        return as_expr(a, b.dtype), b
    return as_expr(a), as_expr(b)


def _fold(op: str, a: Const, b: Const, operand_t: DataType, rtype: DataType) -> Const | None:
    """``a op b`` of two constants (None: division by zero, left to run time)."""
    x = cscalar.convert(a.value, operand_t)
    y = cscalar.convert(b.value, operand_t)
    try:
        return Const.of(cscalar.binary(op, x, y, operand_t, rtype), rtype)
    except (ZeroDivisionError, KeyError):
        return None


def _is(e: Expr, value) -> bool:
    return type(e) is Const and e.value == value and not isinstance(e.value, bool)


def _identity(op: str, a: Expr, b: Expr, rtype: DataType) -> Expr | None:
    """``a op b`` without the operation when a constant operand makes it a no-op.

    Only rewrites that hold for every value: ``x * 1``, ``x / 1`` and ``x - 0`` also for floats
    (IEEE gives ``x`` exactly, NaN and -0.0 included); ``x + 0`` (``-0.0 + 0.0`` is ``+0.0``),
    ``x * 0`` (NaN, inf) and ``x % 1`` only for integers.
    """
    integer = rtype.is_integer()
    if op == "*":
        if _is(b, 1):
            return cast(a, rtype)
        if _is(a, 1):
            return cast(b, rtype)
        if integer and (_is(a, 0) or _is(b, 0)):
            return Const.of(0, rtype)
    elif op == "/" and _is(b, 1):
        return cast(a, rtype)
    elif op == "%" and integer and _is(b, 1):
        return Const.of(0, rtype)
    elif op == "-" and _is(b, 0):
        return cast(a, rtype)
    elif op == "+" and integer:
        if _is(b, 0):
            return cast(a, rtype)
        if _is(a, 0):
            return cast(b, rtype)
    return None


def binary(op: str, a, b) -> Expr:
    """Build ``a op b`` with C-like type promotion and constant folding."""
    a, b = _operand_types(a, b)
    if isinstance(a.dtype, PointerType) or isinstance(b.dtype, PointerType):
        if op in ("+", "-") and isinstance(a.dtype, PointerType) and b.dtype.is_integer():
            return Binary(op, a, b, a.dtype)  # pointer arithmetic, in elements
        if op in CMP_OPS:
            return Binary(op, a, b, boolean)
        raise TypeError(f"operator {op} is not defined on pointers")
    if op in CMP_OPS or op in LOGIC_OPS:
        operand_t = promote(a.dtype, b.dtype)
        rtype = boolean
    elif op in BIT_OPS:
        if a.dtype.is_float() or b.dtype.is_float():
            raise TypeError(
                f"bitwise operator {op} needs integer operands, got {a.dtype} and {b.dtype}"
            )
        operand_t = rtype = a.dtype if op in ("<<", ">>") else promote(a.dtype, b.dtype)
        if rtype.kind == "bool" and op in ("<<", ">>"):
            operand_t = rtype = int32
    else:
        operand_t = rtype = promote(a.dtype, b.dtype)
        if rtype.kind == "bool":
            operand_t = rtype = int32
    if isinstance(a, Const) and isinstance(b, Const):
        folded = _fold(op, a, b, operand_t, rtype)
        if folded is not None:
            return folded
    if op in ARITH_OPS and rtype.kind != "bool":
        same = _identity(op, a, b, rtype)
        if same is not None:
            return same
    return Binary(op, a, b, rtype)


def floordiv(a, b) -> Expr:
    """Python's ``//`` on IR values: truncating division for integers (C semantics)."""
    a, b = _operand_types(a, b)
    if promote(a.dtype, b.dtype).is_float():
        return call("floor", binary("/", a, b))
    return binary("/", a, b)


def unary(op: str, a) -> Expr:
    """Build ``-a``, ``~a`` or ``!a`` with folding."""
    a = as_expr(a)
    if op == "!":
        if isinstance(a, Const):
            return Const(not a.value, boolean)
        return Unary("!", a, boolean)
    dtype = a.dtype
    if op == "~" and dtype.is_float():
        raise TypeError(f"bitwise not needs an integer operand, got {dtype}")
    if op == "~" and dtype.kind == "bool":
        return unary("!", a)
    if isinstance(a, Const):
        return Const.of(-a.value if op == "-" else ~int(a.value), dtype)
    return Unary(op, a, dtype)


def select(cond, a, b) -> Expr:
    """``a if cond else b`` with folding on a constant condition."""
    cond = as_expr(cond)
    a, b = _operand_types(a, b)
    if isinstance(cond, Const):
        return a if cond.value else b
    t = promote(a.dtype, b.dtype)
    return Select(cond, cast(a, t), cast(b, t), t)


def cast(a, dtype: DataType) -> Expr:
    """Convert ``a`` to ``dtype`` (no-op if it already has it)."""
    a = as_expr(a, dtype)
    if a.dtype == dtype:
        return a
    if isinstance(a, Const):
        return Const.of(a.value, dtype)
    return Cast(a, dtype)


def call(func: str, *args) -> Expr:
    """A call of a built-in scalar function with folding on constants."""
    if func not in CALL_FUNCS:
        raise TypeError(f"unknown scalar function {func}")
    if func in ("min", "max", "fastdiv", "fastmod"):
        a, b = _operand_types(*args)
        t = promote(a.dtype, b.dtype)
        a, b = cast(a, t), cast(b, t)
        if isinstance(a, Const) and isinstance(b, Const):
            if func == "min":
                return Const.of(min(a.value, b.value), t)
            if func == "max":
                return Const.of(max(a.value, b.value), t)
            folded = _fold("/" if func == "fastdiv" else "%", a, b, t, t)
            if folded is not None:
                return folded
        if func in ("fastdiv", "fastmod") and t.is_integer() and _is(b, 1):
            return a if func == "fastdiv" else Const.of(0, t)
        return Call(func, (a, b), t)
    (a,) = args
    a = as_expr(a)
    if func in ("isnan", "isinf"):
        return Call(func, (a,), boolean)
    t = a.dtype if func in ("abs",) or a.dtype.is_float() else float32
    if func in ("floor", "ceil", "round", "trunc") and a.dtype.is_integer():
        return a
    a = cast(a, t)
    return Call(func, (a,), t)


# ``float16(1.0)`` and the like make constants of this module
dtypes.set_constant_factory(Const.of)
