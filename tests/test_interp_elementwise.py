"""Interpreter numerics: elementwise operators, comparisons, where, unary math (vs NumPy float64)."""

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
from tilus import float32, int32
from tilus.utils import cdiv

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
