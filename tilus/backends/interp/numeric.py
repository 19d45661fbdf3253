"""Numerics of the interpreter: storage arrays and GPU-like conversions of whole tiles.

Scalar semantics (and the narrow-float rounding both share) live in ``tilus.ir.cscalar``.
"""

from __future__ import annotations

import numpy as np

from tilus.dtypes import DataType
from tilus.ir.cscalar import round_float_format

POISON_INT = 0x5A  # byte pattern for uninitialized integer storage


def storage(dt: DataType) -> np.dtype:
    """NumPy dtype holding values of ``dt`` (bf16/fp8/sub-byte floats live in float32)."""
    return dt.np_storage


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
        with np.errstate(invalid="ignore"):  # signalling NaNs quieten on the way
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


def _pairwise(a, dtype):
    """Sum along the last axis in a pairwise tree (2i with 2i + 1 level by level, an odd last
    one carried up), each partial sum rounded to ``dtype``."""
    while a.shape[-1] > 1:
        n = a.shape[-1]
        s = convert(a[..., 0 : n - 1 : 2] + a[..., 1::2], dtype)
        a = np.concatenate([s, a[..., -1:]], axis=-1) if n % 2 else s
    return a[..., 0]


def rounded_tree_sum(a, axis: int, dtype):
    """Sum along ``axis`` rounded to ``dtype`` at every step, in the order the CUDA backend
    adds a thread's registers: the even and the odd elements as the two halves of pairs (each
    a pairwise tree), then the halves, then an odd last element."""
    a = np.moveaxis(convert(a, dtype), axis, -1)
    n = a.shape[-1]
    if n == 1:
        return a[..., 0]
    even, odd = a[..., 0 : n - 1 : 2], a[..., 1::2]
    r = convert(_pairwise(even, dtype) + _pairwise(odd, dtype), dtype)
    return convert(r + a[..., -1], dtype) if n % 2 else r
