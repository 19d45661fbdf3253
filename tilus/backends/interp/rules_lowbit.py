"""Interpreter rules of the low-bit instructions: ``view`` as a per-row bit reinterpretation."""

from __future__ import annotations

import numpy as np

from tilus.backends.interp.rules import reg, rule
from tilus.dtypes import DataType
from tilus.errors import TilusRuntimeError
from tilus.ir import inst_lowbit as L
from tilus.packing import decode, encode


def to_codes(values: np.ndarray, dtype: DataType) -> np.ndarray:
    """The bit patterns (uint64, low ``nbits`` bits) of interpreter values of ``dtype``."""
    nb = dtype.nbits
    if nb % 8 or dtype.name in ("float8_e4m3", "float8_e5m2"):
        return encode(values, dtype)
    st = dtype.np_storage
    if dtype.name == "bfloat16":
        return (np.asarray(values, np.float32).view(np.uint32) >> 16).astype(np.uint64)
    raw = np.ascontiguousarray(values, dtype=st).view(f"u{st.itemsize}")
    return raw.astype(np.uint64)


def from_codes(codes: np.ndarray, dtype: DataType) -> np.ndarray:
    """Interpreter values of ``dtype`` whose bit patterns are ``codes``."""
    nb = dtype.nbits
    if nb % 8 or dtype.name in ("float8_e4m3", "float8_e5m2"):
        return decode(codes, dtype)
    if dtype.name == "bfloat16":
        return (codes.astype(np.uint32) << 16).view(np.float32)
    st = dtype.np_storage
    return codes.astype(f"u{st.itemsize}").view(st)


def reinterpret_rows(values: np.ndarray, src: DataType, dst: DataType) -> np.ndarray:
    """``values`` (rows along the last dim) with each row's bits regrouped into ``dst``."""
    codes = to_codes(values, src)
    bits = (codes[..., None] >> np.arange(src.nbits, dtype=np.uint64)) & np.uint64(1)
    lead = values.shape[:-1]
    bits = bits.reshape(*lead, -1, dst.nbits)
    out = (bits << np.arange(dst.nbits, dtype=np.uint64)).sum(axis=-1, dtype=np.uint64)
    return from_codes(out, dst)


@rule(L.ViewTensor)
def _view(task, inst, loc):
    if inst.layout is not None and inst.layout.num_threads != task.size:
        raise TilusRuntimeError(
            f"the register layout given to the view `{inst.out.name}` spans "
            f"{inst.layout.num_threads} threads but the group running it has {task.size}",
            loc,
        )
    src = reg(task, inst.src, loc)
    task.env[inst.out] = reinterpret_rows(src, inst.src.dtype, inst.out.dtype)
