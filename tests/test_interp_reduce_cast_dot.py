"""Interpreter numerics: reductions, casts (round to nearest even), dot with float32 accumulation."""

from __future__ import annotations

import numpy as np
import pytest
from helpers_numerics import (  # noqa: F401
    BM,
    BN,
    assert_close,
    nan_like,
    rand_f32,
    rand_i32,
    rng,
)

import tilus
from tilus import bfloat16, float16, float32, int32
from tilus.utils import cdiv

# --------------------------------------------------------------------------------------------
# reductions


class Reduce(tilus.Script):
    def __init__(self, op, dim, keepdim):
        super().__init__()
        self.op, self.dim, self.keepdim = op, dim, keepdim

    def __call__(self, a_ptr: ~float32, out: ~float32):
        self.attrs.blocks = 1
        self.attrs.warps = 4
        ga = self.global_view(a_ptr, dtype=float32, shape=[12, 20])
        a = self.load_global(ga, offsets=[0, 0], shape=[12, 20])
        if self.op == "sum":
            r = self.sum(a, dim=self.dim, keepdim=self.keepdim)
        elif self.op == "max":
            r = self.max(a, dim=self.dim, keepdim=self.keepdim)
        else:
            r = self.min(a, dim=self.dim, keepdim=self.keepdim)
        shape = r.shape
        if len(shape) == 0:
            one = self.register_tensor(dtype=float32, shape=[1], init=0.0)
            one[0] = r
            go = self.global_view(out, dtype=float32, shape=[1])
            self.store_global(go, one, offsets=[0])
        else:
            go = self.global_view(out, dtype=float32, shape=list(shape))
            self.store_global(go, r, offsets=[0 for _ in shape])


@pytest.mark.parametrize("op", ["sum", "max", "min"])
@pytest.mark.parametrize(
    "dim, keepdim", [(0, False), (1, False), (0, True), (1, True), (-1, False), (None, False)]
)
def test_reductions(op, dim, keepdim):
    a = rand_f32((12, 20))
    ref = {"sum": np.sum, "max": np.max, "min": np.min}[op](
        a.astype(np.float64), axis=dim, keepdims=keepdim
    )
    out = nan_like(max(np.size(ref), 1) + 3)
    Reduce(op, dim, keepdim)(a, out)
    scale = np.sum(np.abs(a.astype(np.float64)), axis=dim, keepdims=keepdim)
    atol = 1e-6 * float(np.max(scale)) if op == "sum" else 0.0  # sums may cancel
    assert_close(out[: np.size(ref)], np.ravel(ref), rtol=1e-6, atol=atol)
    assert np.isnan(out[np.size(ref) :]).all()  # nothing written past the result


def test_reduction_result_shapes():
    k = Reduce("sum", 0, True)
    text = k.program(k.configs[0], {}).text
    assert "register[float32; 1, 20]" in text
    k = Reduce("max", 1, False)
    assert "register[float32; 12]" in k.program(k.configs[0], {}).text


class BoolReduce(tilus.Script):
    def __call__(self, a_ptr: ~int32, out: ~int32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        ga = self.global_view(a_ptr, dtype=int32, shape=[4, 8])
        go = self.global_view(out, dtype=int32, shape=[2, 4])
        a = self.load_global(ga, offsets=[0, 0], shape=[4, 8])
        pos = a > 0
        self.store_global(
            go, self.cast(self.any(pos, dim=1), dtype=int32), offsets=[0, 0], dims=[1]
        )
        self.store_global(
            go, self.cast(self.all(pos, dim=1), dtype=int32), offsets=[1, 0], dims=[1]
        )


def test_any_all():
    a = rand_i32((4, 8), 1, 100)
    a[1, 3] = -5
    a[2] = -rand_i32(8, 1, 100)
    a[3, :] = -1
    a[3, 6] = 2
    out = np.full((2, 4), -7, dtype=np.int32)
    BoolReduce()(a, out)
    assert out.tolist() == [
        (a > 0).any(1).astype(int).tolist(),
        (a > 0).all(1).astype(int).tolist(),
    ]


# --------------------------------------------------------------------------------------------
# casts


class Cast(tilus.Script):
    def __init__(self, dtype):
        super().__init__()
        self.dtype = dtype

    def __call__(self, n: int32, a_ptr: ~float32, out: ~float32):
        self.attrs.blocks = cdiv(n, 64)
        self.attrs.warps = 1
        off = self.blockIdx.x * 64
        ga = self.global_view(a_ptr, dtype=float32, shape=[n])
        go = self.global_view(out, dtype=float32, shape=[n])
        a = self.load_global(ga, offsets=[off], shape=[64])
        back = self.cast(self.cast(a, dtype=self.dtype), dtype=float32)
        self.store_global(go, back, offsets=[off])


class CastToF16(tilus.Script):
    def __call__(self, n: int32, a_ptr: ~float32, out: ~float16):
        self.attrs.blocks = cdiv(n, 64)
        self.attrs.warps = 1
        off = self.blockIdx.x * 64
        ga = self.global_view(a_ptr, dtype=float32, shape=[n])
        go = self.global_view(out, dtype=float16, shape=[n])
        a = self.load_global(ga, offsets=[off], shape=[64])
        self.store_global(go, a.to(float16), offsets=[off])


class CastToI32(tilus.Script):
    def __call__(self, n: int32, a_ptr: ~float32, out: ~int32):
        self.attrs.blocks = cdiv(n, 64)
        self.attrs.warps = 1
        off = self.blockIdx.x * 64
        ga = self.global_view(a_ptr, dtype=float32, shape=[n])
        go = self.global_view(out, dtype=int32, shape=[n])
        a = self.load_global(ga, offsets=[off], shape=[64])
        self.store_global(go, self.cast(a, dtype=int32), offsets=[off])


def _bf16_rne(x: np.ndarray) -> np.ndarray:
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    r = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    return r.astype(np.uint32).view(np.float32)


F16_TIES = [
    (1 + 2**-11, 1.0),
    (1 + 3 * 2**-11, 1 + 2**-9),
    (-(1 + 2**-11), -1.0),
    (2048 + 1, 2048.0),
    (2048 + 3, 2052.0),
    (65520.0, np.inf),  # rounds up past the largest finite half
    (65519.0, 65504.0),
    (2**-25, 0.0),  # half the smallest subnormal: a tie to even (zero)
    (3 * 2**-25, 2**-23),  # 1.5 subnormal quanta: a tie rounds up to the even one
]


def test_cast_f32_to_f16_rounds_to_nearest_even():
    ties = np.array([t for t, _ in F16_TIES], dtype=np.float32)
    a = np.concatenate([ties, rand_f32(100, -70000, 70000), rand_f32(50, -1e-4, 1e-4)])
    out = nan_like(a.size, np.float16)
    CastToF16()(a.size, a, out)
    want = np.array([w for _, w in F16_TIES])
    np.testing.assert_array_equal(out[: len(F16_TIES)].astype(np.float64), want)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(out, a.astype(np.float16))


def test_cast_round_trip_through_f16_tile():
    a = rand_f32(130, -100, 100)
    out = nan_like(a.size)
    Cast(float16)(a.size, a, out)
    np.testing.assert_array_equal(out, a.astype(np.float16).astype(np.float32))


BF16_TIES = [
    (1 + 2**-8, 1.0),
    (1 + 3 * 2**-8, 1 + 2**-6),
    (-(1 + 2**-8), -1.0),
    (256 + 1, 256.0),
    (256 + 3, 260.0),
    (1 + 2**-8 + 2**-20, 1 + 2**-7),  # just above a tie rounds up
]


def test_cast_f32_to_bf16_rounds_to_nearest_even():
    ties = np.array([t for t, _ in BF16_TIES], dtype=np.float32)
    a = np.concatenate([ties, rand_f32(200, -1e6, 1e6), rand_f32(60, -1e-3, 1e-3)])
    out = nan_like(a.size)
    Cast(bfloat16)(a.size, a, out)
    want = np.array([w for _, w in BF16_TIES], dtype=np.float32)
    np.testing.assert_array_equal(out[: len(BF16_TIES)], want)
    np.testing.assert_array_equal(out, _bf16_rne(a))


def test_cast_f32_to_int32_truncates_toward_zero():
    special = np.array([2.7, -2.7, 0.5, -0.5, 3.0, -3.99, 1e10, -1e10, np.nan], np.float32)
    a = np.concatenate([special, rand_f32(100, -1e6, 1e6)])
    out = np.full(a.size, -123, dtype=np.int32)
    CastToI32()(a.size, a, out)
    assert list(out[:9]) == [2, -2, 0, 0, 3, -3, 2**31 - 1, -(2**31), 0]
    np.testing.assert_array_equal(out[9:], np.trunc(a[9:]).astype(np.int32))


# --------------------------------------------------------------------------------------------
# dot


class Dot(tilus.Script):
    def __init__(self, with_c, transposed_b):
        super().__init__()
        self.with_c = with_c
        self.transposed_b = transposed_b

    def __call__(
        self,
        m: int32,
        n: int,
        k: int,
        a_ptr: ~float16,
        b_ptr: ~float16,
        c_ptr: ~float32,
        d_ptr: ~float32,
    ):
        self.attrs.blocks = [cdiv(m, 32), cdiv(n, 16)]
        self.attrs.warps = 4
        om = self.blockIdx.x * 32
        on = self.blockIdx.y * 16
        ga = self.global_view(a_ptr, dtype=float16, shape=[m, k])
        gd = self.global_view(d_ptr, dtype=float32, shape=[m, n])
        acc = self.register_tensor(dtype=float32, shape=[32, 16], init=0.0)
        if self.with_c:
            gc = self.global_view(c_ptr, dtype=float32, shape=[m, n])
            acc = self.load_global(gc, offsets=[om, on], shape=[32, 16])
        for ok in range(0, k, 16):
            a = self.load_global(ga, offsets=[om, ok], shape=[32, 16])
            if self.transposed_b:
                gb = self.global_view(b_ptr, dtype=float16, shape=[n, k])
                b = self.load_global(gb, offsets=[on, ok], shape=[16, 16]).transpose()
            else:
                gb = self.global_view(b_ptr, dtype=float16, shape=[k, n])
                b = self.load_global(gb, offsets=[ok, on], shape=[16, 16])
            acc = self.dot(a, b, acc)
        self.store_global(gd, acc, offsets=[om, on])


@pytest.mark.parametrize("with_c, transposed_b", [(False, False), (True, False), (False, True)])
def test_dot_accumulates_fp16_inputs_in_float32(with_c, transposed_b):
    m, n, k = 45, 40, 72
    a = rand_f32((m, k), -2, 2).astype(np.float16)
    b = rand_f32((n, k) if transposed_b else (k, n), -2, 2).astype(np.float16)
    c = rand_f32((m, n), -50, 50)
    d = nan_like((m, n))
    Dot(with_c, transposed_b)(m, n, k, a, b, c, d)
    bb = b.astype(np.float64).T if transposed_b else b.astype(np.float64)
    ref = a.astype(np.float64) @ bb + (c if with_c else 0)
    # float32 accumulation: far tighter than a float16 accumulator could reach
    assert_close(d, ref, rtol=0, atol=1e-4 * np.abs(ref).max())


class DotF16Out(tilus.Script):
    def __call__(self, a_ptr: ~float16, b_ptr: ~float16, d_ptr: ~float32):
        self.attrs.blocks = 1
        self.attrs.warps = 4
        ga = self.global_view(a_ptr, dtype=float16, shape=[16, 64])
        gb = self.global_view(b_ptr, dtype=float16, shape=[64, 16])
        gd = self.global_view(d_ptr, dtype=float32, shape=[16, 16])
        a = self.load_global(ga, offsets=[0, 0], shape=[16, 64])
        b = self.load_global(gb, offsets=[0, 0], shape=[64, 16])
        acc = self.dot(a, b, acc_dtype=float32)
        self.store_global(gd, acc, offsets=[0, 0])


def test_dot_with_acc_dtype_keeps_small_terms():
    a = np.full((16, 64), 1.0, dtype=np.float16)
    a[:, 0] = 2048.0  # a float16 accumulator would drop the following +1 terms
    b = np.ones((64, 16), dtype=np.float16)
    b[1:] = rand_f32((63, 16), 0.5, 1.0).astype(np.float16)
    d = nan_like((16, 16))
    DotF16Out()(a, b, d)
    assert_close(d, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-6)
