"""C scalar semantics: one definition for IR folding, the interpreter and codegen."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from tilus import float16, float32, int8, int32, uint8, uint32
from tilus.ir import cscalar
from tilus.ir.evaluate import eval_scalar
from tilus.ir.expr import Binary, Cast, Const, Var, binary, call, cast

RNG = np.random.default_rng(20261201)


def _trunc_div(a: int, b: int) -> int:
    return math.trunc(Fraction(a, b))


def test_integer_division_truncates_on_ints_and_arrays():
    a = RNG.integers(-(2**31), 2**31, 500)
    b = RNG.integers(-1000, 1000, 500)
    b[b == 0] = 7
    want_q = [_trunc_div(int(x), int(y)) for x, y in zip(a, b)]
    want_r = [int(x) - int(y) * q for x, y, q in zip(a, b, want_q)]
    assert [cscalar.intdiv(int(x), int(y)) for x, y in zip(a, b)] == want_q
    assert [cscalar.intmod(int(x), int(y)) for x, y in zip(a, b)] == want_r
    assert cscalar.intdiv(a, b).tolist() == want_q
    assert cscalar.intmod(a, b).tolist() == want_r
    with pytest.raises(ZeroDivisionError):
        cscalar.div(5, 0, int32)


def test_shifts_clamp_like_ptx_and_conversions_saturate():
    assert cscalar.shl(1, 31, int32) == 1 << 31 and cscalar.shl(1, 32, int32) == 0
    assert cscalar.shl(1, -1, int32) == 0
    assert cscalar.shr(-8, 40, int32) == -1 and cscalar.shr(8, 40, int32) == 0
    a = np.array([1, -8, 8, 3])
    b = np.array([2, 40, -1, 1])
    assert cscalar.shift_array("<<", a, b, 32).tolist() == [4, 0, 0, 6]
    assert cscalar.shift_array(">>", a, b, 32).tolist() == [0, -1, 0, 1]
    assert cscalar.convert(3e10, int32) == 2**31 - 1
    assert cscalar.convert(-3e10, int32) == -(2**31)
    assert cscalar.convert(float("nan"), int32) == 0
    assert cscalar.convert(-1.9, int32) == -1
    assert cscalar.convert(300, uint8) == 44 and cscalar.convert(200, int8) == -56
    assert cscalar.convert(0.1, float32) == float(np.float32(0.1))
    assert cscalar.convert(1e6, float16) == math.inf


def test_identities_fold_only_where_they_hold_for_every_value():
    x = Var("x", int32)
    f = Var("f", float32)
    assert binary("/", x, 1) is x and binary("*", x, 1) is x and binary("*", 1, x) is x
    assert binary("+", x, 0) is x and binary("-", x, 0) is x and binary("+", 0, x) is x
    for e in (binary("*", x, 0), binary("*", 0, x), binary("%", x, 1), call("fastmod", x, 1)):
        assert type(e) is Const and e.value == 0 and e.dtype == int32
    assert call("fastdiv", x, 1) is x
    # floats: x * 1, x / 1 and x - 0 are exact; x + 0 (-0.0) and x * 0 (NaN, inf) are not
    assert binary("*", f, 1.0) is f and binary("/", f, 1.0) is f and binary("-", f, 0.0) is f
    assert type(binary("+", f, 0.0)) is Binary and type(binary("*", f, 0.0)) is Binary
    # a narrower operand keeps the result type through a cast
    assert type(binary("+", Var("b", int8), Const(0, int32))) is Cast
    assert type(cast(Const(0, int32), uint32) * 8192) is Const


_OPS = ("+", "-", "*", "/", "%", "&", "|", "^", "<<", ">>", "==", "<", ">=")


@pytest.mark.parametrize("dtype", [int32, uint32, int8, float32])
def test_folding_agrees_with_the_interpreter(dtype):
    ops = _OPS if dtype.is_integer() else ("+", "-", "*", "/", "%", "==", "<")
    lo, hi = (dtype.min_value(), dtype.max_value()) if dtype.is_integer() else (-100, 100)
    for _ in range(200):
        op = ops[RNG.integers(len(ops))]
        if dtype.is_integer():
            x, y = (int(v) for v in RNG.integers(lo, hi, 2, endpoint=True))
            if op in ("<<", ">>"):
                y = int(RNG.integers(-3, 40))
        else:
            x, y = (float(np.float32(v)) for v in RNG.uniform(lo, hi, 2))
        a, b = Const(x, dtype), Const(y, dtype)
        folded = binary(op, a, b)
        if type(folded) is not Const:
            assert op in ("/", "%") and y == 0  # integer division by zero stays for run time
            continue
        rtype = folded.dtype
        unfolded = Binary(op, a, b, rtype)  # what the interpreter evaluates without folding
        assert eval_scalar(unfolded, {}) == folded.value, (x, op, y, dtype)
