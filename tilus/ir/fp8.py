"""fp8 e4m3/e5m2 numerics: bit codes <-> float32, rounding like the GPU's ``cvt.rn.satfinite``.

Both directions are exact NumPy (no float8 dtype needed). Encoding rounds to nearest even and
saturates like PTX ``cvt.rn.satfinite.{e4m3x2,e5m2x2}`` (the only fp8 conversions sm_89/sm_90
have, so every tilus backend saturates): a finite value beyond the largest code becomes that
code (±448 for e4m3, ±57344 for e5m2), ±Inf too, and NaN becomes the canonical NaN ``0x7F``.
Decoding is exact (every fp8 value is a float32).
"""

from __future__ import annotations

import numpy as np

from tilus.dtypes import DataType

FP8_NAMES = ("float8_e4m3", "float8_e5m2")

#: The NaN code ``cvt.rn.satfinite`` writes for a NaN input (both formats).
CANONICAL_NAN = 0x7F

# a decoded NaN carries its code in the low 7 mantissa bits under this tag, so that an fp8
# buffer decoded for the interpreter and encoded back keeps its bytes (NaN payloads included)
_NAN_TAG = 0x7FE00000


def is_fp8(dt) -> bool:
    """True for ``float8_e4m3`` and ``float8_e5m2``."""
    return isinstance(dt, DataType) and dt.name in FP8_NAMES


def _params(dt: DataType):
    if not is_fp8(dt):
        raise TypeError(f"{dt} is not an fp8 type")
    e, m = dt.exponent_bits, dt.mantissa_bits
    return e, m, (1 << (e - 1)) - 1


def _magnitudes(dt: DataType) -> np.ndarray:
    """float64 value of each code 0..127 (NaN for the NaN codes, inf for e5m2's infinity)."""
    e, m, bias = _params(dt)
    codes = np.arange(128)
    ef, mf = codes >> m, codes & ((1 << m) - 1)
    val = np.where(
        ef == 0,
        np.ldexp(mf.astype(np.float64), 1 - bias - m),
        np.ldexp((mf + (1 << m)).astype(np.float64), ef - bias - m),
    )
    top = ef == (1 << e) - 1
    if dt.name == "float8_e4m3":  # only S.1111.111 is NaN; no infinities
        val = np.where(codes == 0x7F, np.nan, val)
    else:  # IEEE-like: the all-ones exponent is Inf (mantissa 0) or NaN
        val = np.where(top & (mf == 0), np.inf, np.where(top, np.nan, val))
    return val


_TABLES: dict[str, np.ndarray] = {}


def decode_table(dt: DataType) -> np.ndarray:
    """float32 value of each of the 256 codes (NaN codes tagged with their code)."""
    t = _TABLES.get(dt.name)
    if t is None:
        mag = _magnitudes(dt)
        vals = np.concatenate([mag, -mag]).astype(np.float32)
        bits = vals.view(np.uint32).copy()
        codes = np.arange(256, dtype=np.uint32)
        nan = np.isnan(vals)
        bits[nan] = ((codes[nan] & 0x80) << 24) | _NAN_TAG | (codes[nan] & 0x7F)
        t = bits.view(np.float32)
        t.setflags(write=False)
        _TABLES[dt.name] = t
    return t


def decode(codes, dt: DataType) -> np.ndarray:
    """The float32 values of fp8 codes (a uint8/int8 array of bytes)."""
    c = np.asarray(codes)
    return decode_table(dt)[c.view(np.uint8) if c.dtype.itemsize == 1 else c.astype(np.uint8)]


def round_fp8(x, dt: DataType) -> np.ndarray:
    """Values rounded to ``dt`` (nearest even, satfinite; NaN stays NaN), as float64."""
    e, m, bias = _params(dt)
    fmax = 448.0 if dt.name == "float8_e4m3" else 57344.0
    with np.errstate(all="ignore"):
        x = np.asarray(x, dtype=np.float64)
        _, ex = np.frexp(x)  # x = f * 2**ex, 0.5 <= |f| < 1
        ex = np.maximum(ex - 1, 1 - bias)  # unbiased exponent, clamped for subnormals
        quantum = np.ldexp(1.0, (ex - m).astype(np.int64))
        r = np.rint(x / quantum) * quantum  # exact: a power-of-two scale, then round-half-even
        r = np.where(np.isinf(x), x, r)
        r = np.clip(r, -fmax, fmax)  # satfinite, Inf included
        return np.where(np.isnan(x), np.nan, r)


def encode(x, dt: DataType) -> np.ndarray:
    """fp8 codes (uint8) of float values: the bytes a store of them writes.

    Values are rounded like ``cvt.rn.satfinite``, except that an infinity is kept where the
    format has one (e5m2: a loaded Inf is stored back as Inf; conversions saturate it before,
    in :func:`round_fp8`). A tagged NaN (one :func:`decode` made) keeps its code; any other NaN
    becomes ``0x7F``.
    """
    x = np.asarray(x)
    r = round_fp8(x, dt)
    mag = _magnitudes(dt)
    if dt.name == "float8_e5m2":
        r = np.where(np.isinf(x), x, r)
    finite = np.where(np.isnan(mag), np.inf, mag)  # non-decreasing over the codes 0..127
    idx = np.searchsorted(finite, np.abs(np.where(np.isnan(r), 0.0, r)))
    neg = np.signbit(r) & ~np.isnan(r)
    out = (idx | np.where(neg, 0x80, 0)).astype(np.uint8)
    nan = np.isnan(r)
    if np.any(nan):
        code = np.full(x.shape, CANONICAL_NAN, dtype=np.uint8)
        if x.dtype == np.float32:
            bits = x.view(np.uint32)
            tagged = (bits & 0x7FFFFF80) == _NAN_TAG
            code = np.where(tagged, ((bits >> 24) & 0x80) | (bits & 0x7F), code).astype(np.uint8)
        out = np.where(nan, code, out).astype(np.uint8)
    return out
