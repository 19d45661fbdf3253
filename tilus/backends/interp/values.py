"""Runtime values of the interpreter: pointers, global views, shared views."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tilus.dtypes import DataType

# scalar evaluation (shared with the CUDA launcher, so it lives in the IR); named here for rules.py


@dataclass(frozen=True)
class PointerValue:
    """A pointer: a flat NumPy buffer, an element offset into it and the parameter's name."""

    buf: np.ndarray
    offset: int
    name: str
    dtype: DataType
    #: the argument buffer's float32 copies of its bytes viewed as fp8 (see interp/launch.py)
    fp8_views: dict | None = None

    def __add__(self, k: int):
        return PointerValue(self.buf, self.offset + int(k), self.name, self.dtype, self.fp8_views)

    def __sub__(self, k: int):
        return PointerValue(self.buf, self.offset - int(k), self.name, self.dtype, self.fp8_views)


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
