"""Numerics of the interpreter: storage arrays, GPU-like conversions, scalar arithmetic."""

from __future__ import annotations

import math

import numpy as np

from tilus.dtypes import DataType, PointerType

POISON_INT = 0x5A  # byte pattern for uninitialized integer storage


def storage(dt: DataType) -> np.dtype:
    """NumPy dtype holding values of ``dt`` (bf16/fp8/sub-byte floats live in float32)."""
    return dt.np_storage


def round_float_format(x: np.ndarray, dt: DataType) -> np.ndarray:
    """Round float32/64 values to the nearest value of a narrow float format (ties to even)."""
    x = np.asarray(x, dtype=np.float64)
    e, m = dt.exponent_bits, dt.mantissa_bits
    bias = (1 << (e - 1)) - 1
    min_exp = 1 - bias  # exponent of the smallest normal
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        _, exp = np.frexp(x)  # x = f * 2**exp, 0.5 <= |f| < 1
        exp = np.maximum(exp - 1, min_exp)  # unbiased exponent, clamped for subnormals
        quantum = np.ldexp(1.0, (exp - m).astype(np.int64))
        r = np.rint(x / quantum) * quantum
        fmax = _fmax(dt)
        ieee_like = dt.nbits >= 16 or e == 5
        big = np.abs(r) > fmax
        if ieee_like:
            r = np.where(big, np.copysign(np.inf, r), r)
        else:
            r = np.where(big, np.copysign(fmax, r), r)
        r = np.where(np.isnan(x), np.nan, r)
        r = np.where(np.isinf(x), x if ieee_like else np.copysign(fmax, x), r)
    return r.astype(np.float32)


def _fmax(dt: DataType) -> float:
    from tilus.dtypes import float_max

    return float_max(dt)


def convert(x, dt: DataType) -> np.ndarray:
    """Convert an array to ``dt``'s storage like a GPU conversion does.

    Floats round to nearest even; float -> int truncates toward zero and saturates (NaN -> 0);
    int -> int wraps; anything -> bool tests against zero.
    """
    x = np.asarray(x)
    st = storage(dt)
    if dt.kind == "bool":
        return x != 0
    if dt.is_float():
        if dt.nbits in (16, 32, 64) and dt.name not in ("bfloat16", "tfloat32"):
            with np.errstate(over="ignore", invalid="ignore"):
                return x.astype(st)
        return round_float_format(x.astype(np.float64), dt)
    # integer targets
    if x.dtype.kind == "f":
        lo, hi = dt.min_value(), dt.max_value()
        with np.errstate(invalid="ignore"):
            t = np.trunc(x.astype(np.float64))
            t = np.where(np.isnan(t), 0, np.clip(t, lo, hi))
        return t.astype(st)
    if x.dtype.kind == "b":
        return x.astype(st)
    out = x.astype(np.int64 if x.dtype.kind in "iu" and x.dtype.itemsize <= 8 else x.dtype)
    if dt.nbits < 8:  # sub-byte: wrap into the small range
        mask = (1 << dt.nbits) - 1
        out = out & mask
        if dt.kind == "int":
            out = np.where(out >= 1 << (dt.nbits - 1), out - (1 << dt.nbits), out)
    return out.astype(st)


def poison(shape, dt: DataType) -> np.ndarray:
    """Storage for undefined contents: NaN for floats, a byte pattern for integers."""
    st = storage(dt)
    if dt.is_float():
        return np.full(shape, np.nan, dtype=st)
    if dt.kind == "bool":
        return np.zeros(shape, dtype=st)
    a = np.empty(shape, dtype=st)
    a.view(np.uint8)[...] = POISON_INT
    return a


# --- scalars ---------------------------------------------------------------------------------


def wrap_int(v: int, dt: DataType) -> int:
    """Wrap a Python int into the range of an integer type (two's complement)."""
    n = dt.nbits
    v &= (1 << n) - 1
    if dt.kind == "int" and v >= 1 << (n - 1):
        v -= 1 << n
    return v


def scalar_convert(v, dt):
    """Convert a Python scalar to the value a variable of type ``dt`` holds."""
    if isinstance(dt, PointerType):
        return v
    if dt.kind == "bool":
        return bool(v)
    if dt.is_integer():
        if isinstance(v, float):
            if math.isnan(v):
                return 0
            v = (
                max(min(math.trunc(v), dt.max_value()), dt.min_value())
                if math.isfinite(v)
                else (dt.max_value() if v > 0 else dt.min_value())
            )
        return wrap_int(int(v), dt)
    v = float(v)
    if dt.nbits == 64:
        return v
    if dt.nbits == 32 and dt.name == "float32":
        return float(np.float32(v))
    if dt.name == "float16":
        return float(np.float16(v))
    return float(round_float_format(np.array([v]), dt)[0])
