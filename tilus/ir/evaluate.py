"""Evaluating scalar IR expressions with C semantics (the interpreter and the CUDA launcher)."""

from __future__ import annotations

import math

from tilus.dtypes import PointerType
from tilus.errors import SourceLoc, TilusRuntimeError
from tilus.ir.cscalar import ARITH, COMPARE, convert, intdiv, intmod, wrap
from tilus.ir.expr import Binary, Call, Cast, Const, Select, TensorElement, Unary, Var

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
        dt = e.dtype
        if isinstance(dt, PointerType):  # pointer arithmetic, in elements
            return a + b if op == "+" else a - b
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
