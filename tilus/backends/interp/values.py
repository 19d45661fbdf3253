"""Runtime values of the interpreter: pointers, global views, shared views; scalar evaluation."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from tilus.dtypes import DataType, PointerType
from tilus.errors import SourceLoc, TilusRuntimeError
from tilus.ir.cscalar import ARITH, COMPARE, convert, intdiv, intmod, wrap
from tilus.ir.expr import Binary, Call, Cast, Const, Select, TensorElement, Unary, Var


@dataclass(frozen=True)
class PointerValue:
    """A pointer: a flat NumPy buffer, an element offset into it and the parameter's name."""

    buf: np.ndarray
    offset: int
    name: str
    dtype: DataType

    def __add__(self, k: int):
        return PointerValue(self.buf, self.offset + int(k), self.name, self.dtype)

    def __sub__(self, k: int):
        return PointerValue(self.buf, self.offset - int(k), self.name, self.dtype)


@dataclass(frozen=True)
class GlobalViewValue:
    """A global tensor: a strided view over a pointer's buffer, with its logical shape."""

    arr: np.ndarray  # the view (shape == logical shape)
    dtype: DataType
    name: str


@dataclass
class SharedAlloc:
    """One shared tile allocation: its storage and its byte range in shared memory."""

    array: np.ndarray
    offset: int  # byte offset in the block's shared memory
    nbits: int
    name: str
    freed: bool = False
    acc: list = field(default_factory=list)  # races.Access records of its bytes


@dataclass(frozen=True)
class SharedView:
    """A view (slice/permutation) of a shared allocation with its byte range."""

    arr: np.ndarray
    alloc: SharedAlloc
    lo: int  # byte range [lo, hi) in shared memory covered by this view
    hi: int
    dtype: DataType
    name: str

    @staticmethod
    def of(alloc: SharedAlloc, arr: np.ndarray, dtype: DataType, name: str) -> SharedView:
        base = alloc.array
        item = base.itemsize
        start = (arr.__array_interface__["data"][0] - base.__array_interface__["data"][0]) // item
        lo_e = start + sum(min(0, (n - 1) * s) for n, s in zip(arr.shape, arr.strides)) // item
        hi_e = start + sum(max(0, (n - 1) * s) for n, s in zip(arr.shape, arr.strides)) // item + 1
        lo = alloc.offset + lo_e * alloc.nbits // 8
        hi = alloc.offset + (hi_e * alloc.nbits + 7) // 8
        return SharedView(arr, alloc, lo, hi, dtype, name)

    def overlaps(self, lo: int, hi: int) -> bool:
        return self.lo < hi and lo < self.hi


# --- scalar evaluation -----------------------------------------------------------------------


_CALLS = {
    "abs": abs,
    "exp": math.exp,
    "log": math.log,
    "log2": math.log2,
    "sqrt": math.sqrt,
    "rsqrt": lambda x: 1 / math.sqrt(x),
    "sin": math.sin,
    "cos": math.cos,
    "tan": math.tan,
    "tanh": math.tanh,
    "floor": math.floor,
    "ceil": math.ceil,
    "round": round,
    "trunc": math.trunc,
    "exp2": lambda x: 2.0**x,
    "isnan": math.isnan,
    "isinf": math.isinf,
}


def eval_scalar(e, env: dict, loc: SourceLoc | None = None):
    """Evaluate a scalar expression with C semantics; ``env`` maps variables to values."""
    t = type(e)
    if t is Const:
        return e.value
    if t is Var:
        try:
            return env[e]
        except KeyError:
            raise TilusRuntimeError(
                f"variable `{e.name}` is read before it has a value", loc
            ) from None
    if t is Binary:
        a = eval_scalar(e.a, env, loc)
        b = eval_scalar(e.b, env, loc)
        op = e.op
        f = COMPARE.get(op)
        if f is not None:
            return f(a, b)
        if isinstance(a, PointerValue):
            return a + b if op == "+" else a - b
        dt = e.dtype
        if dt.is_integer():
            try:
                return wrap(ARITH[op](int(a), int(b), dt), dt)
            except ZeroDivisionError as ex:
                raise TilusRuntimeError(str(ex), loc) from None
        try:
            r = ARITH[op](a, b, dt)
        except OverflowError:
            r = math.inf
        return convert(r, dt)
    if t is Unary:
        a = eval_scalar(e.a, env, loc)
        if e.op == "!":
            return not a
        if e.op == "-":
            return wrap(-a, e.dtype) if e.dtype.is_integer() else convert(-a, e.dtype)
        return wrap(~int(a), e.dtype)
    if t is Select:
        c = eval_scalar(e.cond, env, loc)
        return eval_scalar(e.a, env, loc) if c else eval_scalar(e.b, env, loc)
    if t is Cast:
        a = eval_scalar(e.a, env, loc)
        if isinstance(e.dtype, PointerType):
            return a
        return convert(a, e.dtype)
    if t is Call:
        args = [eval_scalar(a, env, loc) for a in e.args]
        f = e.func
        if f == "min":
            return min(args)
        if f == "max":
            return max(args)
        if f == "fastdiv" or f == "fastmod":
            n, d = int(args[0]), int(args[1])
            if d == 0:
                raise TilusRuntimeError(f"fast_divmod by zero in kernel code (dividend {n})", loc)
            return wrap(intdiv(n, d) if f == "fastdiv" else intmod(n, d), e.dtype)
        try:
            r = _CALLS[f](*args)
        except (ValueError, OverflowError):
            r = math.nan
        return convert(r, e.dtype)
    if t is TensorElement:
        arr = env[e.tensor]
        idx = tuple(int(eval_scalar(i, env, loc)) for i in e.indices)
        for d, (i, n) in enumerate(zip(idx, arr.shape)):
            if not 0 <= i < n:
                raise TilusRuntimeError(
                    f"index {i} is out of range for dim {d} (size {n}) of tile `{e.tensor.name}`",
                    loc,
                )
        v = arr[idx]
        return v.item() if hasattr(v, "item") else v
    raise TilusRuntimeError(f"cannot evaluate {type(e).__name__}", loc)
