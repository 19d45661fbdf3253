"""Bit-packed global views of sub-byte dtypes in the interpreter (element i at bit i * nbits)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tilus.backends.interp.values import GlobalViewValue
from tilus.errors import TilusRuntimeError
from tilus.packing import decode, encode


def is_packed(dtype) -> bool:
    """Whether values of ``dtype`` are bit-packed in memory (a width that is not whole bytes)."""
    return dtype.nbits % 8 != 0


@dataclass(frozen=True)
class PackedGlobalView(GlobalViewValue):
    """A global view of a sub-byte dtype over a byte buffer.

    ``arr`` holds element numbers (a strided view of one index array per buffer, so slices,
    permutations, bounds and the race checks work on it as on a plain view); element ``k`` of
    the buffer sits at bit ``k * nbits`` of ``raw``, least significant bit first, and may
    straddle two bytes.
    """

    raw: np.ndarray = None  # the caller's bytes (uint8), from the pointer's position on

    def read(self, idx: np.ndarray) -> np.ndarray:
        """The values (in the dtype's interpreter storage) of the elements numbered ``idx``."""
        nb = self.dtype.nbits
        bit = np.asarray(idx, dtype=np.int64) * nb
        byte, sh = bit >> 3, (bit & 7).astype(np.uint32)
        lo = self.raw[byte].astype(np.uint32)
        nxt = np.minimum(byte + 1, self.raw.size - 1)
        hi = np.where(byte + 1 < self.raw.size, self.raw[nxt], 0).astype(np.uint32)
        codes = ((lo | (hi << 8)) >> sh) & ((1 << nb) - 1)
        return decode(codes, self.dtype)

    def write(self, idx: np.ndarray, values: np.ndarray) -> None:
        """Store ``values`` (already converted to the dtype) into the elements numbered ``idx``:
        a read-modify-write of the one or two bytes each element touches."""
        nb = self.dtype.nbits
        idx = np.asarray(idx, dtype=np.int64).reshape(-1)
        codes = encode(np.asarray(values).reshape(-1), self.dtype).astype(np.uint32)
        bit = idx * nb
        byte, sh = bit >> 3, (bit & 7).astype(np.uint32)
        mask = np.uint32((1 << nb) - 1) << sh
        word = codes << sh
        for part, b in ((0, byte), (8, byte + 1)):
            keep = b < self.raw.size
            m = ((mask >> part) & 0xFF).astype(np.uint8)
            w = ((word >> part) & 0xFF).astype(np.uint8)
            sel = keep & (m != 0)
            np.bitwise_and.at(self.raw, b[sel], ~m[sel])
            np.bitwise_or.at(self.raw, b[sel], w[sel])


def packed_view(cta_cache: dict, ptr, dtype, shape, strides, name, loc) -> PackedGlobalView:
    """The packed view of ``dtype`` with ``shape``/``strides`` (in elements) at ``ptr``.

    Raises:
        TilusRuntimeError: the pointer's array is not byte storage, or the view reaches past
            its end (naming the parameter and the bytes needed).
    """
    buf = ptr.buf
    if ptr.dtype.nbits % 8 == 0:
        start_bit = ptr.offset * ptr.dtype.nbits
    elif ptr.dtype == dtype:  # a tilus.Tensor of this dtype: the offset counts its elements
        start_bit = ptr.offset * dtype.nbits
    else:
        raise TilusRuntimeError(
            f"global_view of dtype {dtype} over `{name}` ({ptr.dtype} storage): pass the bytes "
            "(a uint8/int8 array or a tilus.Tensor of this dtype)",
            loc,
        )
    raw = buf.view(np.uint8).reshape(-1)
    if start_bit % 8:
        raise TilusRuntimeError(
            f"global_view of dtype {dtype} at `{name}` + {ptr.offset} starts inside a byte",
            loc,
        )
    raw = raw[start_bit // 8 :]
    if all(shape):
        lo = sum((n - 1) * s for n, s in zip(shape, strides) if s < 0)
        hi = sum((n - 1) * s for n, s in zip(shape, strides) if s > 0)
        need = ((hi + 1) * dtype.nbits + 7) // 8
        if lo < 0 or need > raw.size:
            raise TilusRuntimeError(
                f"global_view of {dtype} with shape {shape} (strides {strides}) over `{name}` "
                f"needs {need} bytes of storage, but the array passed as `{name}` has "
                f"{raw.size} bytes from there",
                loc,
            )
    count = raw.size * 8 // dtype.nbits
    key = (id(buf), start_bit, dtype.nbits)
    hit = cta_cache.get(key)
    if hit is None or hit[0] is not buf:  # one index array per buffer: races compare them
        hit = cta_cache[key] = (buf, np.arange(count, dtype=np.int64))
    arr = np.lib.stride_tricks.as_strided(
        hit[1], shape=shape, strides=[s * 8 for s in strides], writeable=raw.flags.writeable
    )
    return PackedGlobalView(arr, dtype, name, raw)


def read_region(g, part_idx):
    """Values of a global view at the (fancy) index ``part_idx``: packed or plain."""
    if isinstance(g, PackedGlobalView):
        return g.read(g.arr[part_idx])
    return g.arr[part_idx]
