"""C scalar semantics shared by IR constant folding, the interpreter and code generation.

One definition of what a scalar operation computes on the GPU: integer ``/`` and ``%`` truncate
toward zero (the remainder takes the dividend's sign), integers wrap around (two's complement),
shift amounts outside ``[0, nbits)`` clamp like PTX ``shl``/``shr`` (all bits shifted out, or
the sign filled in), float -> int conversions truncate and saturate (NaN -> 0) like PTX ``cvt``
(``.rzi``), and float results round to nearest even in their format. The integer division and
remainder work on Python ints and on NumPy integer arrays alike.
"""

from __future__ import annotations

import math

import numpy as np

from tilus.dtypes import DataType, PointerType, float_max
from tilus.ir.fp8 import FP8_NAMES, round_fp8


def wrap(v: int, dt: DataType) -> int:
    """Wrap a Python int into the range of integer type ``dt`` (two's complement)."""
    n = dt.nbits
    v &= (1 << n) - 1
    if dt.kind == "int" and v >= 1 << (n - 1):
        v -= 1 << n
    return v


def intdiv(a, b):
    """C integer quotient ``a / b`` (truncates toward zero); ints or integer arrays.

    Raises:
        ZeroDivisionError: for Python ints with ``b == 0`` (arrays: the caller masks zeros).
    """
    q = abs(a) // abs(b)
    return q * (1 - 2 * ((a < 0) ^ (b < 0)))


def intmod(a, b):
    """C integer remainder ``a % b`` (the sign follows the dividend); ints or integer arrays."""
    r = abs(a) % abs(b)
    return r * (1 - 2 * (a < 0))


def div(a, b, dt: DataType):
    """``a / b`` of type ``dt``: truncating for integers, IEEE for floats (x/0 is inf or NaN)."""
    if dt.is_float():
        if b == 0:
            return math.copysign(math.inf, a) * math.copysign(1.0, b) if a != 0 else math.nan
        return a / b
    if b == 0:
        raise ZeroDivisionError("integer division by zero in kernel code")
    return intdiv(a, b)


def mod(a, b, dt: DataType):
    """``a % b`` of type ``dt``: C remainder for integers, ``fmod`` for floats."""
    if dt.is_float():
        return math.fmod(a, b) if b != 0 and math.isfinite(a) else math.nan
    if b == 0:
        raise ZeroDivisionError("integer modulo by zero in kernel code")
    return intmod(a, b)


def shl(a: int, b: int, dt: DataType) -> int:
    """``a << b``: an amount outside ``[0, nbits)`` shifts every bit out (PTX ``shl`` clamps)."""
    return a << b if 0 <= b < dt.nbits else 0


def shr(a: int, b: int, dt: DataType) -> int:
    """``a >> b`` (arithmetic for signed ``a``); an amount outside ``[0, nbits)`` leaves only the
    sign (PTX ``shr`` clamps)."""
    return a >> b if 0 <= b < dt.nbits else (0 if a >= 0 else -1)


def shift_array(op: str, a: np.ndarray, b: np.ndarray, nbits: int) -> np.ndarray:
    """``a << b`` or ``a >> b`` on int64 arrays with the clamping of ``shl``/``shr``."""
    inside = (b >= 0) & (b < nbits)
    amount = np.where(inside, b, 0)
    if op == "<<":
        return np.where(inside, np.left_shift(a, amount), 0)
    return np.where(inside, np.right_shift(a, amount), np.where(a < 0, -1, 0))


#: ``op -> f(a, b, dt)`` on Python values already of the operand type; results are not yet
#: converted to the result type (``convert`` does that).
ARITH = {
    "+": lambda a, b, t: a + b,
    "-": lambda a, b, t: a - b,
    "*": lambda a, b, t: a * b,
    "/": div,
    "%": mod,
    "&": lambda a, b, t: a & b,
    "|": lambda a, b, t: a | b,
    "^": lambda a, b, t: a ^ b,
    "<<": shl,
    ">>": shr,
}
#: comparisons and logical operators: ``op -> f(a, b)`` giving a bool
COMPARE = {
    "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
    "&&": lambda a, b: bool(a) and bool(b),
    "||": lambda a, b: bool(a) or bool(b),
}


def binary(op: str, a, b, operand_t: DataType, result_t: DataType):
    """``a op b`` on Python scalars of ``operand_t`` with the result converted to ``result_t``.

    Raises:
        ZeroDivisionError: integer ``/`` or ``%`` by zero.
        KeyError: an unknown operator.
    """
    f = COMPARE.get(op)
    if f is not None:
        return f(a, b)
    if operand_t.is_integer():
        a, b = int(a), int(b)
    try:
        r = ARITH[op](a, b, operand_t)
    except OverflowError:  # a float result too large for a Python float
        r = math.inf
    return convert(r, result_t)


def convert(v, dt):
    """The value a variable of type ``dt`` holds after a C cast of Python scalar ``v``.

    Integers wrap; float -> int truncates toward zero and saturates (NaN -> 0); anything ->
    bool tests against zero; floats round to nearest even in ``dt``'s format.
    """
    if isinstance(dt, PointerType):
        return v if not isinstance(v, (int, float)) else int(v)
    if dt.kind == "bool":
        return bool(v)
    if dt.kind != "float":
        if isinstance(v, float):
            if math.isnan(v):
                return 0
            if not math.isfinite(v):
                return dt.max_value() if v > 0 else dt.min_value()
            return max(min(math.trunc(v), dt.max_value()), dt.min_value())
        return wrap(int(v), dt)
    v = float(v)
    if dt.nbits == 64:
        return v
    if dt.name == "float32":
        return float(np.float32(v))
    if dt.name == "float16":
        with np.errstate(over="ignore"):
            return float(np.float16(v))
    return float(round_float_format(np.array([v]), dt)[0])


def round_float_format(x, dt: DataType) -> np.ndarray:
    """Round values to the nearest value of a narrow float format (ties to even), as float32.

    Formats without infinities (the fp8 e4m3 and sub-byte families) saturate to their largest
    finite value; both fp8 formats saturate like the GPU's ``cvt.rn.satfinite`` (``ir/fp8.py``);
    the sub-byte ones other than X=5 have no NaN either, and NaN becomes +max.
    """
    if dt.name in FP8_NAMES:
        return round_fp8(x, dt).astype(np.float32)
    x = np.asarray(x, dtype=np.float64)
    e, m = dt.exponent_bits, dt.mantissa_bits
    bias = (1 << (e - 1)) - 1
    min_exp = 1 - bias  # exponent of the smallest normal
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        _, exp = np.frexp(x)  # x = f * 2**exp, 0.5 <= |f| < 1
        exp = np.maximum(exp - 1, min_exp)  # unbiased exponent, clamped for subnormals
        quantum = np.ldexp(1.0, (exp - m).astype(np.int64))
        r = np.rint(x / quantum) * quantum
        fmax = float_max(dt)
        ieee_like = dt.nbits >= 16 or e == 5
        big = np.abs(r) > fmax
        if ieee_like:
            r = np.where(big, np.copysign(np.inf, r), r)
        else:
            r = np.where(big, np.copysign(fmax, r), r)
        # sub-byte floats without NaN codes (all but X=5) take NaN to +max, as cvt .satfinite
        nan_to = fmax if dt.nbits < 8 and not ieee_like else np.nan
        r = np.where(np.isnan(x), nan_to, r)
        r = np.where(np.isinf(x), x if ieee_like else np.copysign(fmax, x), r)
    return r.astype(np.float32)
