"""Kernels over bit-packed sub-byte data, shared by the interpreter, emulator and GPU tests."""

from __future__ import annotations

import numpy as np

import tilus
from tilus import int32, uint8, void_p
from tilus.utils import cdiv

#: every sub-byte dtype: int1b..int7b, uint1b..uint7b and the float families
SUBBYTE = [d for d in tilus.dtypes.ALL_DTYPES.values() if d.nbits < 8]
BM, BN = 16, 32


class Dequant(tilus.Script):
    """Packed ``dt`` [m, n] (bytes at w_ptr) -> ``odt`` [m, n]: load, cast, store."""

    def __init__(self, dt, odt, warps: int = 1):
        super().__init__()
        self.dt, self.odt, self.warps = dt, odt, warps

    def __call__(self, m: int32, n: int32, w_ptr: ~uint8, out_ptr: void_p):
        self.attrs.blocks = [cdiv(m, BM), cdiv(n, BN)]
        self.attrs.warps = self.warps
        gw = self.global_view(w_ptr, dtype=self.dt, shape=[m, n])
        go = self.global_view(out_ptr, dtype=self.odt, shape=[m, n])
        om, on = self.blockIdx.x * BM, self.blockIdx.y * BN
        t = self.load_global(gw, offsets=[om, on], shape=[BM, BN])
        self.store_global(go, self.cast(t, self.odt), offsets=[om, on])


class Quant(tilus.Script):
    """``sdt`` [m, n] -> packed ``dt`` (bytes at w_ptr): load, cast, store."""

    def __init__(self, sdt, dt, warps: int = 2):
        super().__init__()
        self.sdt, self.dt, self.warps = sdt, dt, warps

    def __call__(self, m: int32, n: int32, a_ptr: void_p, w_ptr: void_p):
        self.attrs.blocks = [cdiv(m, BM), cdiv(n, BN)]
        self.attrs.warps = self.warps
        ga = self.global_view(a_ptr, dtype=self.sdt, shape=[m, n])
        gw = self.global_view(w_ptr, dtype=self.dt, shape=[m, n])
        om, on = self.blockIdx.x * BM, self.blockIdx.y * BN
        t = self.load_global(ga, offsets=[om, on], shape=[BM, BN])
        self.store_global(gw, self.cast(t, self.dt), offsets=[om, on])


class Repack(tilus.Script):
    """Packed ``dt`` [m, n] copied into a view with a padded row stride ``ld`` (elements):
    global -> registers -> global with no cast, rows starting at any bit."""

    def __init__(self, dt):
        super().__init__()
        self.dt = dt

    def __call__(self, m: int32, n: int32, ld: int32, a_ptr: ~uint8, b_ptr: ~uint8):
        self.attrs.blocks = [cdiv(m, BM), cdiv(n, BN)]
        self.attrs.warps = 2
        ga = self.global_view(a_ptr, dtype=self.dt, shape=[m, n])
        gb = self.global_view(b_ptr, dtype=self.dt, shape=[m, n], strides=[ld, 1])
        om, on = self.blockIdx.x * BM, self.blockIdx.y * BN
        t = self.load_global(ga, offsets=[om, on], shape=[BM, BN])
        self.store_global(gb, t, offsets=[om, on])


class ViewBytes(tilus.Script):
    """uint8 [m, n / per] tiles viewed as ``dt`` [m, n] (per = 8 / nbits) and cast to f16."""

    def __init__(self, dt):
        super().__init__()
        self.dt = dt

    def __call__(self, m: int32, n: int32, w_ptr: ~uint8, out_ptr: void_p):
        per = 8 // self.dt.nbits
        self.attrs.blocks = [cdiv(m, BM), cdiv(n, BN)]
        self.attrs.warps = 1
        gw = self.global_view(w_ptr, dtype=uint8, shape=[m, n // per])
        go = self.global_view(out_ptr, dtype=tilus.float16, shape=[m, n])
        om, on = self.blockIdx.x * BM, self.blockIdx.y * BN
        raw = self.load_global(gw, offsets=[om, on // per], shape=[BM, BN // per])
        q = self.view(raw, dtype=self.dt)
        self.store_global(go, self.cast(q, tilus.float16), offsets=[om, on])


def grid(m: int, n: int) -> list[int]:
    """The grid of the kernels above for an [m, n] problem."""
    return [-(-m // BM), -(-n // BN)]


def codes(rng, dt, shape) -> np.ndarray:
    """Random codes of ``dt`` covering every code (uint64)."""
    n = int(np.prod(shape))
    c = np.concatenate([np.arange(1 << dt.nbits), rng.integers(0, 1 << dt.nbits, n)])[:n]
    return rng.permutation(c).reshape(shape).astype(np.uint64)


def specials(a: np.ndarray, dt) -> np.ndarray:
    """``a`` with NaN, +-inf, a huge value, -0 and ties of ``dt``'s grid written in front."""
    a = a.copy().reshape(-1)
    big = 60000.0 if a.dtype == np.float16 else 1e30
    tie = float(dt.max_value()) / 2 ** (dt.mantissa_bits + 2) if dt.is_float() else 2.5
    vals = [np.nan, np.inf, -np.inf, big, -big, -0.0, tie * 3, -tie * 5, 0.5, -1.5]
    a[: len(vals)] = np.asarray(vals, dtype=np.float64).astype(a.dtype)
    return a
