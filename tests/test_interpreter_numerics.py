"""Interpreter numerics against NumPy float64 references, on fresh random inputs every run.

Outputs are poisoned with NaN (or a sentinel for integers) before each run, so an element the
kernel forgets to write is caught.
"""

from __future__ import annotations

import numpy as np
import pytest

import tilus
from tilus import bfloat16, float16, float32, int32
from tilus.utils import cdiv

rng = np.random.default_rng()

BM, BN = 16, 8


def nan_like(shape, dtype=np.float32):
    return np.full(shape, np.nan, dtype=dtype)


def rand_f32(shape, lo=-4.0, hi=4.0):
    """Random floats away from zero (never an all-zero input)."""
    x = rng.uniform(lo, hi, size=shape)
    x = np.where(np.abs(x) < 0.25, 0.25 + np.abs(x), x)
    return x.astype(np.float32)


def rand_i32(shape, lo=-1000, hi=1000):
    x = rng.integers(lo, hi, size=shape)
    return np.where(x == 0, 7, x).astype(np.int32)


def assert_close(got, want, rtol=1e-6, atol=0.0):
    got = np.asarray(got, dtype=np.float64)
    assert not np.isnan(got).any(), "an output element was never written"
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


# --------------------------------------------------------------------------------------------
# elementwise operators with broadcasting


class FloatBinary(tilus.Script):
    """out = lhs OP rhs, where the operands are tiles, broadcast tiles or scalars."""

    def __init__(self, op, form):
        super().__init__()
        self.op = op
        self.form = form

    def apply(self, x, y):
        if self.op == "+":
            r = x + y
        elif self.op == "-":
            r = x - y
        elif self.op == "*":
            r = x * y
        elif self.op == "/":
            r = x / y
        elif self.op == "max":
            r = self.maximum(x, y)
        else:
            r = self.minimum(x, y)
        return r

    def __call__(
        self, m: int32, n: int32, a_ptr: ~float32, b_ptr: ~float32, s: float32, c_ptr: ~float32
    ):
        self.attrs.blocks = [cdiv(m, BM), cdiv(n, BN)]
        self.attrs.warps = 2
        om = self.blockIdx.x * BM
        on = self.blockIdx.y * BN
        ga = self.global_view(a_ptr, dtype=float32, shape=[m, n])
        gc = self.global_view(c_ptr, dtype=float32, shape=[m, n])
        a = self.load_global(ga, offsets=[om, on], shape=[BM, BN])
        if self.form == "tile-tile":
            gb = self.global_view(b_ptr, dtype=float32, shape=[m, n])
            b = self.load_global(gb, offsets=[om, on], shape=[BM, BN])
            c = self.apply(a, b)
        elif self.form == "tile-row":
            gb = self.global_view(b_ptr, dtype=float32, shape=[1, n])
            b = self.load_global(gb, offsets=[0, on], shape=[1, BN])
            c = self.apply(a, b)
        elif self.form == "col-tile":
            gb = self.global_view(b_ptr, dtype=float32, shape=[m, 1])
            b = self.load_global(gb, offsets=[om, 0], shape=[BM, 1])
            c = self.apply(b, a)
        elif self.form == "tile-scalar":
            c = self.apply(a, s)
        elif self.form == "scalar-tile":
            c = self.apply(s, a)
        else:
            c = self.apply(a, 1.5)
        self.store_global(gc, c, offsets=[om, on])


F_OPS = {
    "+": np.add,
    "-": np.subtract,
    "*": np.multiply,
    "/": np.divide,
    "max": np.maximum,
    "min": np.minimum,
}


@pytest.mark.parametrize("op", list(F_OPS))
@pytest.mark.parametrize(
    "form", ["tile-tile", "tile-row", "col-tile", "tile-scalar", "scalar-tile", "tile-const"]
)
def test_float_binary_operators_with_broadcasting(op, form):
    m, n = 37, 21
    a = rand_f32((m, n))
    shape_b = {"tile-row": (1, n), "col-tile": (m, 1)}.get(form, (m, n))
    b = rand_f32(shape_b)
    s = float(rand_f32(()))
    c = nan_like((m, n))
    FloatBinary(op, form)(m, n, a, b, s, c)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    lhs, rhs = {
        "tile-tile": (a64, b64),
        "tile-row": (a64, b64),
        "col-tile": (b64, a64),
        "tile-scalar": (a64, s),
        "scalar-tile": (s, a64),
        "tile-const": (a64, 1.5),
    }[form]
    assert_close(c, np.broadcast_to(F_OPS[op](lhs, rhs), (m, n)))


class IntBinary(tilus.Script):
    def __init__(self, op):
        super().__init__()
        self.op = op

    def __call__(self, n: int32, a_ptr: ~int32, b_ptr: ~int32, s: int32, c_ptr: ~int32):
        self.attrs.blocks = cdiv(n, 32)
        self.attrs.warps = 1
        off = self.blockIdx.x * 32
        ga = self.global_view(a_ptr, dtype=int32, shape=[n])
        gb = self.global_view(b_ptr, dtype=int32, shape=[n])
        gc = self.global_view(c_ptr, dtype=int32, shape=[2, n])
        a = self.load_global(ga, offsets=[off], shape=[32])
        b = self.load_global(gb, offsets=[off], shape=[32])
        op = self.op
        if op == "+":
            c, d = a + b, s + a
        elif op == "-":
            c, d = a - b, s - a
        elif op == "*":
            c, d = a * b, a * s
        elif op == "/":
            c, d = a / b, a / s
        elif op == "%":
            c, d = a % b, a % s
        elif op == "&":
            c, d = a & b, a & s
        elif op == "|":
            c, d = a | b, a | s
        elif op == "^":
            c, d = a ^ b, s ^ a
        self.store_global(gc, c, offsets=[0, off], dims=[1])
        self.store_global(gc, d, offsets=[1, off], dims=[1])


def _wrap32(x):
    x = np.asarray(x, dtype=object)
    return np.array([((int(v) + 2**31) % 2**32) - 2**31 for v in x.ravel()]).reshape(x.shape)


def _cdiv_trunc(a, b):
    a, b = np.asarray(a, np.int64), np.asarray(b, np.int64)
    q = np.abs(a) // np.abs(b)
    return np.where((a < 0) != (b < 0), -q, q)


def _cmod_trunc(a, b):
    return np.asarray(a, np.int64) - np.asarray(b, np.int64) * _cdiv_trunc(a, b)


I_OPS = {
    "+": lambda x, y: _wrap32(np.asarray(x, np.int64) + y),
    "-": lambda x, y: _wrap32(np.asarray(x, np.int64) - y),
    "*": lambda x, y: _wrap32(np.asarray(x, np.int64) * y),
    "/": _cdiv_trunc,
    "%": _cmod_trunc,
    "&": np.bitwise_and,
    "|": np.bitwise_or,
    "^": np.bitwise_xor,
}


@pytest.mark.parametrize("op", list(I_OPS))
def test_int_binary_operators(op):
    n = 64
    big = op in ("+", "-", "*")
    lim = 2**31 - 1 if big else 1000
    a = rand_i32(n, -lim, lim)
    b = rand_i32(n, -lim, lim)
    s = int(rand_i32((), -lim, lim))
    c = np.full((2, n), -123456, dtype=np.int32)
    IntBinary(op)(n, a, b, s, c)
    f = I_OPS[op]
    np.testing.assert_array_equal(c[0], f(a, b))
    if op in ("-",):
        np.testing.assert_array_equal(c[1], f(s, a))
    elif op in ("+", "^"):
        np.testing.assert_array_equal(c[1], f(np.full(n, s), a))
    else:
        np.testing.assert_array_equal(c[1], f(a, np.full(n, s)))


@pytest.mark.parametrize("op", ["/", "%"])
def test_int_division_by_padding_lanes_is_harmless(op):
    n = 45  # the second block's tile reaches past the end: its padding lanes hold 0
    a = rand_i32(n)
    b = rand_i32(n, 1, 100)
    c = np.full((2, n), -123456, dtype=np.int32)
    IntBinary(op)(n, a, b, 3, c)
    np.testing.assert_array_equal(c[0], I_OPS[op](a, b))


def test_int32_overflow_wraps():
    n = 32
    a = np.full(n, 2**31 - 1, dtype=np.int32)
    a[1::2] = -(2**31)
    b = rand_i32(n, 1, 1000)
    c = np.full((2, n), -123456, dtype=np.int32)
    IntBinary("+")(n, a, b, 5, c)
    np.testing.assert_array_equal(c[0], _wrap32(a.astype(np.int64) + b))
    IntBinary("*")(n, a, b, 3, c)
    np.testing.assert_array_equal(c[0], _wrap32(a.astype(np.int64) * b))
    np.testing.assert_array_equal(c[1], _wrap32(a.astype(np.int64) * 3))


def test_c_style_integer_division_and_remainder_of_tiles():
    a = np.array([-7, 7, -7, 7, -8, 9, 0, -1] * 4, dtype=np.int32)
    b = np.array([2, -2, -2, 2, 3, -4, 5, 3] * 4, dtype=np.int32)
    c = np.full((2, a.size), -123456, dtype=np.int32)
    IntBinary("/")(a.size, a, b, -2, c)
    assert list(c[0, :8]) == [-3, -3, 3, 3, -2, -2, 0, 0]
    assert list(c[1, :8]) == [3, -3, 3, -3, 4, -4, 0, 0]
    IntBinary("%")(a.size, a, b, -2, c)
    assert list(c[0, :8]) == [-1, 1, -1, 1, -2, 1, 0, -1]
    assert list(c[1, :8]) == [-1, 1, -1, 1, 0, 1, 0, -1]


class ScalarDivMod(tilus.Script):
    def __call__(self, a: int32, b: int32, out: ~int32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        g = self.global_view(out, dtype=int32, shape=[4])
        r = self.register_tensor(dtype=int32, shape=[4], init=0)
        r[0] = a / b
        r[1] = a % b
        r[2] = a // b
        x: int32 = a
        x %= b
        r[3] = x
        self.store_global(g, r, offsets=[0])


@pytest.mark.parametrize("a, b", [(-7, 2), (7, -2), (-7, -2), (7, 2), (-1, 5)])
def test_c_style_integer_division_and_remainder_of_scalars(a, b):
    out = np.full(4, -99, dtype=np.int32)
    ScalarDivMod()(a, b, out)
    q = int(_cdiv_trunc(a, b))
    r = int(_cmod_trunc(a, b))
    assert list(out) == [q, r, q, r]


# --------------------------------------------------------------------------------------------
# comparisons, where, unary math


class Compare(tilus.Script):
    def __init__(self, op):
        super().__init__()
        self.op = op

    def __call__(self, n: int32, a_ptr: ~int32, b_ptr: ~int32, out: ~int32):
        self.attrs.blocks = 1
        self.attrs.warps = 2
        ga = self.global_view(a_ptr, dtype=int32, shape=[n])
        gb = self.global_view(b_ptr, dtype=int32, shape=[n])
        go = self.global_view(out, dtype=int32, shape=[3, n])
        a = self.load_global(ga, offsets=[0], shape=[64])
        b = self.load_global(gb, offsets=[0], shape=[64])
        op = self.op
        if op == "==":
            c = a == b
        elif op == "!=":
            c = a != b
        elif op == "<":
            c = a < b
        elif op == "<=":
            c = a <= b
        elif op == ">":
            c = a > b
        else:
            c = a >= b
        self.store_global(go, self.cast(c, dtype=int32), offsets=[0, 0], dims=[1])
        self.store_global(go, self.where(c, a, b * 10), offsets=[1, 0], dims=[1])
        self.store_global(go, self.where(c, -1, b), offsets=[2, 0], dims=[1])


CMP = {
    "==": np.equal,
    "!=": np.not_equal,
    "<": np.less,
    "<=": np.less_equal,
    ">": np.greater,
    ">=": np.greater_equal,
}


@pytest.mark.parametrize("op", list(CMP))
def test_comparisons_and_where(op):
    n = 64
    a = rng.integers(-3, 4, size=n).astype(np.int32)
    b = rng.integers(-3, 4, size=n).astype(np.int32)
    out = np.full((3, n), -12345, dtype=np.int32)
    Compare(op)(n, a, b, out)
    cond = CMP[op](a, b)
    np.testing.assert_array_equal(out[0], cond.astype(np.int32))
    np.testing.assert_array_equal(out[1], np.where(cond, a, b * 10))
    np.testing.assert_array_equal(out[2], np.where(cond, -1, b))


class FloatWhere(tilus.Script):
    def __call__(self, a_ptr: ~float32, out: ~float32):
        self.attrs.blocks = 1
        self.attrs.warps = 4
        ga = self.global_view(a_ptr, dtype=float32, shape=[8, 16])
        go = self.global_view(out, dtype=float32, shape=[8, 16])
        a = self.load_global(ga, offsets=[0, 0], shape=[8, 16])
        row = self.load_global(ga, offsets=[0, 0], shape=[1, 16])
        keep = (a > row) & (a > 0.0)
        self.store_global(go, self.where(keep, a, -a * 2.0), offsets=[0, 0])


def test_where_with_broadcast_condition_and_boolean_and():
    a = rand_f32((8, 16))
    out = nan_like((8, 16))
    FloatWhere()(a, out)
    keep = (a > a[:1]) & (a > 0)
    assert_close(out, np.where(keep, a, -a.astype(np.float64) * 2))


class Unary(tilus.Script):
    def __init__(self, op):
        super().__init__()
        self.op = op

    def __call__(self, n: int32, a_ptr: ~float32, out: ~float32):
        self.attrs.blocks = cdiv(n, 64)
        self.attrs.warps = 2
        off = self.blockIdx.x * 64
        ga = self.global_view(a_ptr, dtype=float32, shape=[n])
        go = self.global_view(out, dtype=float32, shape=[n])
        a = self.load_global(ga, offsets=[off], shape=[64])
        if self.op == "exp":
            r = self.exp(a)
        elif self.op == "log":
            r = self.log(self.abs(a))
        elif self.op == "sqrt":
            r = self.sqrt(self.abs(a))
        elif self.op == "abs":
            r = self.abs(a)
        else:
            r = -a
        self.store_global(go, r, offsets=[off])


@pytest.mark.parametrize(
    "op, ref",
    [
        ("exp", np.exp),
        ("log", lambda x: np.log(np.abs(x))),
        ("sqrt", lambda x: np.sqrt(np.abs(x))),
        ("abs", np.abs),
        ("neg", np.negative),
    ],
)
def test_unary_math(op, ref):
    n = 100
    a = rand_f32(n)
    out = nan_like(n)
    Unary(op)(n, a, out)
    assert_close(out, ref(a.astype(np.float64)), rtol=2e-6)


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


# --------------------------------------------------------------------------------------------
# global memory: out-of-bounds rules, dims=, strides


class Copy(tilus.Script):
    """Reads tiles of [BM, BN] with OOB zeros, adds one, stores with OOB skipped."""

    def __call__(self, m: int32, n: int32, ld: int32, a_ptr: ~float32, c_ptr: ~float32):
        self.attrs.blocks = [cdiv(m, BM), cdiv(n, BN)]
        self.attrs.warps = 1
        om = self.blockIdx.x * BM
        on = self.blockIdx.y * BN
        ga = self.global_view(a_ptr, dtype=float32, shape=[m, n])
        gc = self.global_view(c_ptr, dtype=float32, shape=[m, n], strides=[ld, 1])
        t = self.load_global(ga, offsets=[om, on], shape=[BM, BN])
        self.store_global(gc, t + 1.0, offsets=[om, on])


class PaddedTiles(tilus.Script):
    """Writes whole tiles (including the zero padding of the loads) into a padded output."""

    def __call__(self, m: int32, n: int32, a_ptr: ~float32, c_ptr: ~float32):
        self.attrs.blocks = [cdiv(m, BM), cdiv(n, BN)]
        self.attrs.warps = 1
        om = self.blockIdx.x * BM
        on = self.blockIdx.y * BN
        ga = self.global_view(a_ptr, dtype=float32, shape=[m, n])
        gc = self.global_view(c_ptr, dtype=float32, shape=[cdiv(m, BM) * BM, cdiv(n, BN) * BN])
        t = self.load_global(ga, offsets=[om, on], shape=[BM, BN])
        self.store_global(gc, t + 1.0, offsets=[om, on])


@pytest.mark.parametrize("m, n", [(37, 21), (16, 8), (5, 3), (33, 17)])
def test_oob_loads_read_zero_and_oob_stores_are_skipped(m, n):
    a = rand_f32((m, n))
    ld = n + 5
    c = nan_like((m, ld))
    Copy()(m, n, ld, a, c)
    assert_close(c[:, :n], a.astype(np.float64) + 1)
    assert np.isnan(c[:, n:]).all()  # the padding columns are never written
    pm, pn = cdiv(m, BM) * BM, cdiv(n, BN) * BN
    p = nan_like((pm, pn))
    PaddedTiles()(m, n, a, p)
    want = np.ones((pm, pn))
    want[:m, :n] += a
    assert_close(p, want)


class NegativeOffsets(tilus.Script):
    def __call__(self, a_ptr: ~float32, c_ptr: ~float32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        ga = self.global_view(a_ptr, dtype=float32, shape=[8, 8])
        gc = self.global_view(c_ptr, dtype=float32, shape=[8, 8])
        t = self.load_global(ga, offsets=[-3, 2], shape=[8, 8])  # rows -3..4, cols 2..9
        self.store_global(gc, t, offsets=[0, 0])
        u = self.register_tensor(dtype=float32, shape=[4, 4], init=-1.0)
        self.store_global(gc, u, offsets=[-2, 6])  # only rows 0..1, cols 6..7 land


def test_oob_with_negative_offsets():
    a = rand_f32((8, 8))
    c = nan_like((8, 8))
    NegativeOffsets()(a, c)
    want = np.zeros((8, 8))
    want[3:, :6] = a[:5, 2:]
    want[:2, 6:] = -1.0
    assert_close(c, want)


class Dims3D(tilus.Script):
    def __init__(self, dims):
        super().__init__()
        self.dims = dims

    def __call__(self, b: int32, i: int32, a_ptr: ~float32, c_ptr: ~float32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        ga = self.global_view(a_ptr, dtype=float32, shape=[3, 5, 6])
        gc = self.global_view(c_ptr, dtype=float32, shape=[3, 5, 6])
        if self.dims == [1, 2]:
            t = self.load_global(ga, offsets=[b, 0, 0], shape=[8, 8], dims=[1, 2])
            self.store_global(gc, t * 2.0, offsets=[b, 0, 0], dims=[1, 2])
        elif self.dims == [0, 2]:
            t = self.load_global(ga, offsets=[0, i, 0], shape=[4, 8], dims=[0, 2])
            self.store_global(gc, t * 2.0, offsets=[0, i, 0], dims=[0, 2])
        else:
            t = self.load_global(ga, offsets=[b, 0, 0], shape=[8, 8], dims=[2, 1])
            self.store_global(gc, t * 2.0, offsets=[b, 0, 0], dims=[2, 1])


@pytest.mark.parametrize("dims", [[1, 2], [0, 2], [2, 1]])
def test_load_store_with_dims_on_a_3d_view(dims):
    a = rand_f32((3, 5, 6))
    c = nan_like((3, 5, 6))
    b, i = int(rng.integers(0, 3)), int(rng.integers(0, 5))
    Dims3D(dims)(b, i, a, c)
    want = np.full((3, 5, 6), np.nan)
    if dims == [0, 2]:
        want[:, i, :] = 2 * a[:, i, :]
    else:
        want[b] = 2 * a[b]
    np.testing.assert_allclose(c, want, rtol=1e-6)


class Transposed(tilus.Script):
    def __call__(self, m: int32, n: int32, a_ptr: ~float32, c_ptr: ~float32):
        self.attrs.blocks = [cdiv(m, BM), cdiv(n, BN)]
        self.attrs.warps = 1
        om = self.blockIdx.x * BM
        on = self.blockIdx.y * BN
        at = self.global_view(a_ptr, dtype=float32, shape=[m, n], strides=[1, m])  # a is [n, m]
        gc = self.global_view(c_ptr, dtype=float32, shape=[m, n])
        t = self.load_global(at, offsets=[om, on], shape=[BM, BN])
        self.store_global(gc, t, offsets=[om, on])


def test_global_view_with_explicit_strides():
    m, n = 29, 19
    a = rand_f32((n, m))
    c = nan_like((m, n))
    Transposed()(m, n, a, c)
    np.testing.assert_array_equal(c, a.T)


# --------------------------------------------------------------------------------------------
# printing


class Prints(tilus.Script):
    def __call__(self, m: int32, x: float32, a_ptr: ~int32):
        self.attrs.blocks = [2, 3]
        self.attrs.warps = 2
        g = self.global_view(a_ptr, dtype=int32, shape=[2, 3])
        self.printf("block %d,%d m=%d x=%.3f\n", self.blockIdx.x, self.blockIdx.y, m, x)
        if self.blockIdx.x == 1 and self.blockIdx.y == 2:
            t = self.load_global(g, offsets=[0, 0], shape=[2, 3])
            self.print_tensor("tile t:", t)


def test_printf_once_per_block_and_print_tensor(capsys):
    a = rand_i32((2, 3), 10, 99)
    Prints()(7, 0.25, a)
    out = capsys.readouterr().out
    lines = [ln for ln in out.splitlines() if ln.startswith("block")]
    assert sorted(lines) == sorted(f"block {x},{y} m=7 x=0.250" for x in range(2) for y in range(3))
    assert "tile t:" in out
    tail = out.split("tile t:")[1]
    for v in a.ravel():
        assert str(v) in tail
    assert out.count("tile t:") == 1


class PrintFmt(tilus.Script):
    def __call__(self, a_ptr: ~float32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        g = self.global_view(a_ptr, dtype=float32, shape=[3])
        t = self.load_global(g, offsets=[0], shape=[3])
        self.print_tensor("t", t, fmt="%.3f")


def test_print_tensor_honours_fmt(capsys):
    PrintFmt()(np.array([2.75, -1.5, 3.125], dtype=np.float32))
    out = capsys.readouterr().out
    assert "2.750" in out and "-1.500" in out and "3.125" in out


class ThreadGroupPrintf(tilus.Script):
    def __call__(self, m: int32):
        self.attrs.blocks = 2
        self.attrs.warps = 4
        with self.thread_group(64, 64):
            self.printf("group %d\n", self.blockIdx.x)
        self.printf("all %d\n", m)


def test_printf_inside_a_thread_group_prints_once_per_block(capsys):
    ThreadGroupPrintf()(5)
    out = capsys.readouterr().out.splitlines()
    assert sorted(out) == ["all 5", "all 5", "group 0", "group 1"]


# --------------------------------------------------------------------------------------------
# the grid, and results written in place


class Grid3D(tilus.Script):
    def __call__(self, counts: ~int32, ids: ~int32):
        self.attrs.blocks = [4, 3, 2]
        self.attrs.warps = 1
        gc = self.global_view(counts, dtype=int32, shape=[2, 3, 4])
        gi = self.global_view(ids, dtype=int32, shape=[2, 3, 4])
        x = self.blockIdx.x
        y = self.blockIdx.y
        z = self.blockIdx.z
        c = self.load_global(gc, offsets=[z, y, x], shape=[1, 1, 1])
        self.store_global(gc, c + 1, offsets=[z, y, x])
        i = self.register_tensor(dtype=int32, shape=[1, 1, 1], init=x + 10 * y + 100 * z)
        self.store_global(gi, i, offsets=[z, y, x])


def test_every_block_of_a_3d_grid_runs_once():
    counts = rand_i32((2, 3, 4))
    before = counts.copy()
    ids = np.full((2, 3, 4), -1, dtype=np.int32)
    Grid3D()(counts, ids)
    np.testing.assert_array_equal(counts, before + 1)
    z, y, x = np.indices((2, 3, 4))
    np.testing.assert_array_equal(ids, x + 10 * y + 100 * z)


class UnpackBlockIdx(tilus.Script):
    def __call__(self, ids: ~int32):
        self.attrs.blocks = [2, 2, 2]
        self.attrs.warps = 1
        gi = self.global_view(ids, dtype=int32, shape=[2, 2, 2])
        x, y, z = self.blockIdx
        i = self.register_tensor(dtype=int32, shape=[1, 1, 1], init=x + 10 * y + 100 * z)
        self.store_global(gi, i, offsets=[z, y, x])


def test_block_idx_unpacks_into_x_y_z():
    ids = np.full((2, 2, 2), -1, dtype=np.int32)
    UnpackBlockIdx()(ids)
    z, y, x = np.indices((2, 2, 2))
    np.testing.assert_array_equal(ids, x + 10 * y + 100 * z)


def test_outputs_are_written_in_place_into_the_callers_array():
    m, n = 20, 9
    a = rand_f32((m, n))
    big = nan_like((m + 4, n))
    view = big[2 : 2 + m]  # a contiguous slice of a bigger array
    Copy()(m, n, n, a, view)
    assert_close(big[2 : 2 + m], a.astype(np.float64) + 1)
    assert np.isnan(big[:2]).all() and np.isnan(big[2 + m :]).all()


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
    want = np.trunc(a.view(dtype.np_storage)[:4].astype(np.float64))
    want = np.where(np.isnan(want), 0, np.clip(want, -(2**31), 2**31 - 1))
    np.testing.assert_array_equal(out, want.astype(np.int64))
