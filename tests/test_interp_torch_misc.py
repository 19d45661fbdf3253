"""Interpreter numerics: CPU torch tensors and further tile semantics."""

from __future__ import annotations

import math

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
from test_interp_elementwise import IntBinary  # noqa: E402
from test_interp_reduce_cast_dot import CastToF16, _bf16_rne  # noqa: E402

import tilus
from tilus import bfloat16, float16, float32, int32
from tilus.testing import marker_line
from tilus.utils import cdiv

# --------------------------------------------------------------------------------------------
# CPU torch tensors


class Saxpy(tilus.Script):
    def __call__(
        self, n: int32, alpha: float32, x_ptr: ~float32, y_ptr: ~float32, out_ptr: ~float32
    ):
        self.attrs.blocks = cdiv(n, 64)
        self.attrs.warps = 2
        off = self.blockIdx.x * 64
        gx = self.global_view(x_ptr, dtype=float32, shape=[n])
        gy = self.global_view(y_ptr, dtype=float32, shape=[n])
        x = self.load_global(gx, offsets=[off], shape=[64])
        y = self.load_global(gy, offsets=[off], shape=[64])
        r = x * alpha + y
        go = self.global_view(out_ptr, dtype=float32, shape=[n])
        self.store_global(go, r, offsets=[off])


class SaxpyBF16(tilus.Script):
    def __call__(
        self, n: int32, alpha: float32, x_ptr: ~float32, y_ptr: ~float32, out_ptr: ~bfloat16
    ):
        self.attrs.blocks = cdiv(n, 64)
        self.attrs.warps = 2
        off = self.blockIdx.x * 64
        gx = self.global_view(x_ptr, dtype=float32, shape=[n])
        gy = self.global_view(y_ptr, dtype=float32, shape=[n])
        x = self.load_global(gx, offsets=[off], shape=[64])
        y = self.load_global(gy, offsets=[off], shape=[64])
        go = self.global_view(out_ptr, dtype=bfloat16, shape=[n])
        self.store_global(go, self.cast(x * alpha + y, dtype=bfloat16), offsets=[off])


class BF16Scale(tilus.Script):
    def __call__(self, n: int32, x_ptr: ~bfloat16, out_ptr: ~bfloat16):
        self.attrs.blocks = cdiv(n, 32)
        self.attrs.warps = 1
        off = self.blockIdx.x * 32
        gx = self.global_view(x_ptr, dtype=bfloat16, shape=[n])
        go = self.global_view(out_ptr, dtype=bfloat16, shape=[n])
        x = self.load_global(gx, offsets=[off], shape=[32])
        y = self.cast(self.cast(x, dtype=float32) * 3.0, dtype=bfloat16)
        self.store_global(go, y, offsets=[off])


def test_torch_cpu_tensors_float32():
    torch = pytest.importorskip("torch")
    n = 150
    x = torch.from_numpy(rand_f32(n))
    y = torch.from_numpy(rand_f32(n))
    out = torch.full((n,), float("nan"))
    alpha = float(rand_f32(()))
    Saxpy()(n, alpha, x, y, out)
    want = x.double() * alpha + y.double()
    assert not torch.isnan(out).any()
    torch.testing.assert_close(out.double(), want, rtol=1e-6, atol=1e-6)


def test_torch_cpu_bfloat16_output_is_written_back():
    torch = pytest.importorskip("torch")
    n = 150
    x = torch.from_numpy(rand_f32(n))
    y = torch.from_numpy(rand_f32(n))
    out = torch.full((n,), float("nan"), dtype=torch.bfloat16)
    alpha = float(rand_f32(()))
    SaxpyBF16()(n, alpha, x, y, out)
    want = (x * alpha + y).to(torch.bfloat16)  # torch rounds to nearest even too
    assert not torch.isnan(out.float()).any()
    assert torch.equal(out, want)


def test_torch_cpu_bfloat16_input_and_output():
    torch = pytest.importorskip("torch")
    n = 70
    x = torch.from_numpy(rand_f32(n)).to(torch.bfloat16)
    out = torch.full((n,), float("nan"), dtype=torch.bfloat16)
    BF16Scale()(n, x, out)
    assert torch.equal(out, (x.float() * 3.0).to(torch.bfloat16))


def test_torch_cpu_float16_and_int_tensors():
    torch = pytest.importorskip("torch")
    n = 45
    a = torch.from_numpy(rand_i32(n))
    b = torch.from_numpy(rand_i32(n))
    c = torch.full((2, n), -123456, dtype=torch.int32)
    IntBinary("-")(n, a, b, 11, c)
    assert torch.equal(c[0], a - b)
    assert torch.equal(c[1], 11 - a)
    x = torch.from_numpy(rand_f32(n))
    out = torch.full((n,), float("nan"), dtype=torch.float16)
    CastToF16()(n, x, out)
    assert torch.equal(out, x.to(torch.float16))


# --------------------------------------------------------------------------------------------
# more tile semantics: a fixed dim out of bounds, init functions, permutes, narrow arithmetic


class FixedDimOOB(tilus.Script):
    def __call__(self, b: int32, a_ptr: ~float32, out: ~float32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        g = self.global_view(a_ptr, dtype=float32, shape=[2, 4, 8])
        go = self.global_view(out, dtype=float32, shape=[4, 8])
        t = self.load_global(g, offsets=[b, 0, 0], shape=[4, 8], dims=[1, 2])
        self.store_global(go, t + 1.0, offsets=[0, 0])
        self.store_global(g, t + 100.0, offsets=[b, 0, 0], dims=[1, 2])


@pytest.mark.parametrize("b", [-1, 2, 7])
def test_a_fixed_dim_out_of_bounds_reads_zeros_and_skips_stores(b):
    a = rand_f32((2, 4, 8))
    before = a.copy()
    out = nan_like((4, 8))
    FixedDimOOB()(b, a, out)
    np.testing.assert_array_equal(out, np.ones((4, 8), np.float32))
    np.testing.assert_array_equal(a, before)


class InitFunctions(tilus.Script):
    def __call__(self, m: int32, s: float32, out: ~float32):
        self.attrs.blocks = 1
        self.attrs.warps = 2
        go = self.global_view(out, dtype=float32, shape=[3, 4, 8])
        r = self.register_tensor(dtype=float32, shape=[4, 8], init=lambda i, j: i * m + j * s)
        q = self.register_tensor(dtype=float32, shape=[4, 8], init=lambda i, j: (i + j) % 3)
        c = self.register_tensor(dtype=float32, shape=[4, 8], init=s)
        self.store_global(go, r, offsets=[0, 0, 0], dims=[1, 2])
        self.store_global(go, q, offsets=[1, 0, 0], dims=[1, 2])
        self.store_global(go, c, offsets=[2, 0, 0], dims=[1, 2])


def test_register_tensor_init_functions_over_runtime_values():
    m = int(rng.integers(2, 9))
    s = float(np.float32(rng.uniform(0.5, 2.0)))
    out = nan_like((3, 4, 8))
    InitFunctions()(m, s, out)
    i, j = np.indices((4, 8))
    assert_close(out[0], i * m + j * np.float32(s))
    assert_close(out[1], (i + j) % 3)
    assert_close(out[2], np.full((4, 8), s))


class InitCalls(tilus.Script):
    def __call__(self, n: int32, out: ~int32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        g = self.global_view(out, dtype=int32, shape=[2, 32])
        q = self.register_tensor(
            dtype=int32, shape=[32], init=lambda i: self.fast_divmod(i + n, 3)[0]
        )
        r = self.register_tensor(
            dtype=int32, shape=[32], init=lambda i: self.fast_divmod(i * n, 7)[1]
        )
        self.store_global(g, q, offsets=[0, 0], dims=[1])
        self.store_global(g, r, offsets=[1, 0], dims=[1])


def test_register_tensor_init_calls_over_the_axes():
    # fast_divmod of the axis variables (the CUDA backend handled it; the interpreter did not)
    n = int(rng.integers(1, 50))
    out = np.full((2, 32), -1, np.int32)
    InitCalls()(n, out)
    i = np.arange(32)
    np.testing.assert_array_equal(out[0], (i + n) // 3)
    np.testing.assert_array_equal(out[1], (i * n) % 7)


class PermuteRound(tilus.Script):
    def __call__(self, a_ptr: ~float32, out: ~float32, out_t: ~float32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        g = self.global_view(a_ptr, dtype=float32, shape=[2, 4, 8])
        x = self.load_global(g, offsets=[0, 0, 0], shape=[2, 4, 8])
        p = x.permute([2, 0, 1])
        g3 = self.global_view(out, dtype=float32, shape=[8, 2, 4])
        self.store_global(g3, self.round(p * 2.0), offsets=[0, 0, 0])
        y = self.load_global(g, offsets=[1, 0, 0], shape=[4, 8], dims=[1, 2])
        gt = self.global_view(out_t, dtype=float32, shape=[8, 4])
        self.store_global(gt, self.transpose(y), offsets=[0, 0])


def test_permute_transpose_and_round_half_to_even():
    a = rand_f32((2, 4, 8))
    a[0, 0, :4] = [0.25, 0.75, -1.25, 1.25]  # doubled: exact ties 0.5, 1.5, -2.5, 2.5
    out = nan_like((8, 2, 4))
    out_t = nan_like((8, 4))
    PermuteRound()(a, out, out_t)
    np.testing.assert_array_equal(out, np.rint(a.transpose(2, 0, 1) * 2))
    assert out[:4, 0, 0].tolist() == [0.0, 2.0, -2.0, 2.0]
    np.testing.assert_array_equal(out_t, a[1].T)


class NarrowArith(tilus.Script):
    def __init__(self, dtype):
        super().__init__()
        self.dtype = dtype

    def __call__(self, a_ptr: ~float32, b_ptr: ~float32, out: ~float32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        ga = self.global_view(a_ptr, dtype=float32, shape=[64])
        gb = self.global_view(b_ptr, dtype=float32, shape=[64])
        go = self.global_view(out, dtype=float32, shape=[4, 64])
        a = self.cast(self.load_global(ga, offsets=[0], shape=[64]), dtype=self.dtype)
        b = self.cast(self.load_global(gb, offsets=[0], shape=[64]), dtype=self.dtype)
        s = self.shared_tensor(dtype=self.dtype, shape=[2, 64])
        self.store_shared(s[1], a - b)
        self.sync()  # the load's elements were stored by other threads of the warp
        for k, r in [(0, a + b), (1, a * b), (2, a / b), (3, self.load_shared(s[1]))]:
            self.store_global(go, self.cast(r, dtype=float32), offsets=[k, 0], dims=[1])
        self.free_shared(s)


def test_float16_tile_arithmetic_rounds_each_result():
    a = rand_f32(64, -10, 10)
    b = rand_f32(64, 1, 3)
    out = nan_like((4, 64))
    NarrowArith(float16)(a, b, out)
    ah, bh = a.astype(np.float16), b.astype(np.float16)
    for k, want in enumerate([ah + bh, ah * bh, ah / bh, ah - bh]):
        np.testing.assert_array_equal(out[k], want.astype(np.float32))


def test_bfloat16_tile_arithmetic_rounds_each_result():
    a = rand_f32(64, -10, 10)
    b = rand_f32(64, 1, 3)
    out = nan_like((4, 64))
    NarrowArith(bfloat16)(a, b, out)
    ab, bb = _bf16_rne(a).astype(np.float64), _bf16_rne(b).astype(np.float64)
    for k, want in enumerate([ab + bb, ab * bb, ab / bb, ab - bb]):
        np.testing.assert_array_equal(out[k], _bf16_rne(want.astype(np.float32)))


class ChainedCompare(tilus.Script):
    def __call__(self, a_ptr: ~int32, out: ~int32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        ga = self.global_view(a_ptr, dtype=int32, shape=[8])
        go = self.global_view(out, dtype=int32, shape=[8])
        t = self.load_global(ga, offsets=[0], shape=[8])
        c = 0 < t < 5
        self.store_global(go, self.cast(c, dtype=int32), offsets=[0])


def test_chained_comparison_of_tiles():
    a = np.array([-3, 0, 1, 4, 5, 9, 2, -1], np.int32)
    out = np.full(8, -1, np.int32)
    try:
        ChainedCompare()(a, out)
    except tilus.TilusProgramError:
        return  # refusing it is fine too
    np.testing.assert_array_equal(out, ((0 < a) & (a < 5)).astype(np.int32))


class DotTyped(tilus.Script):
    def __init__(self, in_dtype, acc_dtype):
        super().__init__()
        self.in_dtype = in_dtype
        self.acc_dtype = acc_dtype

    def __call__(self, a_ptr: ~float32, b_ptr: ~float32, d_ptr: ~float32):
        self.attrs.blocks = 1
        self.attrs.warps = 4
        ga = self.global_view(a_ptr, dtype=float32, shape=[16, 64])
        gb = self.global_view(b_ptr, dtype=float32, shape=[64, 32])
        gd = self.global_view(d_ptr, dtype=float32, shape=[16, 32])
        a = self.cast(self.load_global(ga, offsets=[0, 0], shape=[16, 64]), dtype=self.in_dtype)
        b = self.cast(self.load_global(gb, offsets=[0, 0], shape=[64, 32]), dtype=self.in_dtype)
        acc = self.dot(a, b, acc_dtype=self.acc_dtype)
        self.store_global(gd, self.cast(acc, dtype=float32), offsets=[0, 0])


def test_dot_int8_accumulates_exactly_in_int32():
    a = rng.integers(-128, 128, size=(16, 64)).astype(np.float32)
    b = rng.integers(-128, 128, size=(64, 32)).astype(np.float32)
    d = nan_like((16, 32))
    DotTyped(tilus.int8, int32)(a, b, d)
    np.testing.assert_array_equal(d, a.astype(np.int64) @ b.astype(np.int64))


def test_dot_bfloat16_inputs_float32_accumulation():
    a = rand_f32((16, 64), -2, 2)
    b = rand_f32((64, 32), -2, 2)
    d = nan_like((16, 32))
    DotTyped(bfloat16, float32)(a, b, d)
    ref = _bf16_rne(a).astype(np.float64) @ _bf16_rne(b).astype(np.float64)
    assert_close(d, ref, rtol=0, atol=1e-5 * np.abs(ref).max())


class VoidView(tilus.Script):
    def __init__(self, dtype):
        super().__init__()
        self.dtype = dtype

    def __call__(self, p: tilus.void_p, out: ~int32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        g = self.global_view(p, dtype=self.dtype, shape=[4])
        go = self.global_view(out, dtype=int32, shape=[4])
        t = self.load_global(g, offsets=[0], shape=[4])
        self.store_global(go, self.cast(t, dtype=int32), offsets=[0])


def test_void_pointer_view_of_the_same_dtype():
    a = rand_i32(4)
    out = np.full(4, -1, np.int32)
    VoidView(int32)(a, out)
    np.testing.assert_array_equal(out, a)


@pytest.mark.parametrize("dtype", [int32, float16])
def test_void_pointer_view_reinterprets_memory(dtype):
    a = rand_f32(4)
    out = np.full(4, -1, np.int32)
    try:
        VoidView(dtype)(a, out)
    except (tilus.TilusArgumentError, tilus.TilusRuntimeError):
        return  # refusing a view whose dtype differs from the array is fine too
    with np.errstate(invalid="ignore"):  # fp16 views of random bits may hold NaNs
        want = np.trunc(a.view(dtype.np_storage)[:4].astype(np.float64))
    want = np.where(np.isnan(want), 0, np.clip(want, -(2**31), 2**31 - 1))
    np.testing.assert_array_equal(out, want.astype(np.int64))


class MathInInit(tilus.Script):
    def __call__(self, s: float32, out: ~float32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        g = self.global_view(out, dtype=float32, shape=[32])
        t = self.register_tensor(dtype=float32, shape=[32], init=lambda i: math.exp(i * s))  # HERE
        self.store_global(g, t, offsets=[0])


def test_math_function_in_an_init_lambda_is_refused_with_a_hint():
    with pytest.raises(tilus.TilusProgramError, match=r"self\.exp\(tile\)") as e:
        MathInInit()(0.5, nan_like((32,)))
    assert e.value.loc.line == marker_line(MathInInit, "# HERE")
