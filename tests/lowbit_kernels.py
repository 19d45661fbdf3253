"""Kernels over bit-packed sub-byte data, shared by the interpreter, emulator and GPU tests."""

from __future__ import annotations

import numpy as np

import tilus
from tilus import int32, uint8, void_p
from tilus.tensor import pack
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


class Both(tilus.Script):
    """One kernel, both directions: packed ``dt`` -> f32 (``w_ptr`` -> ``out_ptr``) and f32 ->
    packed ``dt`` (``a_ptr`` -> ``q_ptr``)."""

    def __init__(self, dt):
        super().__init__()
        self.dt = dt

    def __call__(
        self, m: int32, n: int32, w_ptr: ~uint8, out_ptr: ~tilus.float32,
        a_ptr: ~tilus.float32, q_ptr: ~uint8,
    ):  # fmt: skip
        self.attrs.blocks = [cdiv(m, BM), cdiv(n, BN)]
        self.attrs.warps = 2
        om, on = self.blockIdx.x * BM, self.blockIdx.y * BN
        gw = self.global_view(w_ptr, dtype=self.dt, shape=[m, n])
        go = self.global_view(out_ptr, dtype=tilus.float32, shape=[m, n])
        t = self.load_global(gw, offsets=[om, on], shape=[BM, BN])
        self.store_global(go, self.cast(t, tilus.float32), offsets=[om, on])
        ga = self.global_view(a_ptr, dtype=tilus.float32, shape=[m, n])
        gq = self.global_view(q_ptr, dtype=self.dt, shape=[m, n])
        x = self.load_global(ga, offsets=[om, on], shape=[BM, BN])
        self.store_global(gq, self.cast(x, self.dt), offsets=[om, on])


def both_inputs(rng, dt, m: int, n: int):
    """Arguments of :class:`Both`: every code, and every f16 value (then random ones) with
    NaN/inf/ties in front; outputs poisoned (NaN) or sentinel bytes."""
    w = pack(codes(rng, dt, (m, n)), dt.nbits)
    f16 = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    a = rng.standard_normal(m * n) * float(dt.max_value()) / 2
    with np.errstate(invalid="ignore", over="ignore"):
        a[: min(a.size, f16.size)] = f16[: a.size]
        a = specials(a.astype(np.float32), dt).reshape(m, n)
    out = np.full((m, n), np.nan, np.float32)
    q = np.full((m * n * dt.nbits + 7) // 8 + 4, 0xA5, np.uint8)
    return m, n, w, out, a, q
