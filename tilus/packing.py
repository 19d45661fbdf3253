"""Dense bit packing of sub-byte values (element i at bit i * nbits, least significant first)
and the codes of sub-byte integers and floats."""

from __future__ import annotations

import numpy as np

from tilus.dtypes import DataType


def pack(codes: np.ndarray, nbits: int) -> np.ndarray:
    """uint8 bytes holding ``codes`` (the low ``nbits`` bits of each), element i at bit
    ``i * nbits``, least significant bit first."""
    codes = np.asarray(codes, dtype=np.uint64).reshape(-1)
    bits = (codes[:, None] >> np.arange(nbits, dtype=np.uint64)) & np.uint64(1)
    return np.packbits(bits.astype(np.uint8).reshape(-1), bitorder="little")


def unpack(data: np.ndarray, nbits: int, numel: int) -> np.ndarray:
    """The ``numel`` codes (uint64) of ``nbits`` bits each packed in ``data`` by :func:`pack`."""
    bits = np.unpackbits(np.asarray(data, dtype=np.uint8), bitorder="little")
    bits = bits[: numel * nbits].reshape(numel, nbits).astype(np.uint64)
    return (bits << np.arange(nbits, dtype=np.uint64)).sum(axis=1, dtype=np.uint64)


def _float_table(dtype: DataType) -> np.ndarray:
    """The value of every code of a sub-byte float (1 sign, e exponent, m mantissa bits, bias
    ``2^(e-1) - 1``, subnormals; an exponent of 5 bits reserves all ones for inf/nan)."""
    e, m = dtype.exponent_bits, dtype.mantissa_bits
    bias = (1 << (e - 1)) - 1
    out = np.empty(1 << dtype.nbits, dtype=np.float64)
    for code in range(1 << dtype.nbits):
        sign = -1.0 if code >> (e + m) else 1.0
        ex, man = (code >> m) & ((1 << e) - 1), code & ((1 << m) - 1)
        if dtype.name == "float8_e4m3" and code & 0x7F == 0x7F:  # e4m3's only NaN codes
            v = np.nan
        elif e == 5 and ex == (1 << e) - 1:
            v = np.inf if man == 0 else np.nan
        elif ex == 0:
            v = man / (1 << m) * 2.0 ** (1 - bias)
        else:
            v = (1 + man / (1 << m)) * 2.0 ** (ex - bias)
        out[code] = sign * v
    return out


def decode(codes: np.ndarray, dtype: DataType) -> np.ndarray:
    """Values of sub-byte ``codes``: integers extended, floats decoded (float32)."""
    codes = np.asarray(codes, dtype=np.uint64)
    if dtype.kind == "float":
        return _float_table(dtype)[codes.astype(np.int64)].astype(np.float32)
    v = codes.astype(np.int64)
    if dtype.kind == "int":
        v = np.where(v >= 1 << (dtype.nbits - 1), v - (1 << dtype.nbits), v)
    return v.astype(dtype.np_storage)


def encode(values, dtype: DataType) -> np.ndarray:
    """Codes of ``values`` in a sub-byte dtype: integers wrapped to ``nbits`` bits, floats
    rounded to nearest even as a kernel's cast does (``tilus.ir.cscalar.round_float_format``:
    saturating, NaN to +max where the format has no NaN; X=5 keeps inf and NaN)."""
    from tilus.ir.cscalar import round_float_format

    values = np.asarray(values)
    if dtype.kind != "float":
        return (values.astype(np.int64) & ((1 << dtype.nbits) - 1)).astype(np.uint64)
    e, m = dtype.exponent_bits, dtype.mantissa_bits
    bias = (1 << (e - 1)) - 1
    r = round_float_format(values, dtype).astype(np.float64)
    sign = np.signbit(r).astype(np.int64) << (e + m)
    a = np.abs(r)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        _, ex = np.frexp(a)
        ex = ex.astype(np.int64) - 1  # a = 1.f * 2**ex
        normal = ex >= 1 - bias
        man_n = np.ldexp(a, (m - ex)) - (1 << m)
        man_s = np.ldexp(a, m - (1 - bias))
        man = np.where(normal, man_n, man_s)
        fld = np.where(normal, ex + bias, 0)
        top = (1 << e) - 1
        fld = np.where(np.isinf(a) | np.isnan(a), top, fld)
        man = np.where(np.isinf(a), 0, np.where(np.isnan(a), (1 << m) - 1, man))
        man = np.where(a == 0, 0, man)
        fld = np.where(a == 0, 0, fld)
    code = sign | (fld.astype(np.int64) << m) | np.nan_to_num(man).astype(np.int64)
    return code.astype(np.uint64)
