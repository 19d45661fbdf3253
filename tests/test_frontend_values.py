"""Front-end acceptance: compile-time values, min/max/cdiv, declarations and assignments."""

from __future__ import annotations

import numpy as np
import pytest
from helpers_frontend import (  # noqa: F401
    N_OUT,
    _out,
    _text,
)

import tilus
from tilus import int8, int32, uint32
from tilus.utils import cdiv

# --------------------------------------------------------------------------------------------
# compile-time values: constructor params, `int` params, comprehensions, static if


class ConstParams(tilus.Script):
    def __init__(self, scale, mode="add"):
        super().__init__()
        self.scale = scale
        self.mode = mode
        self.table = [scale * k for k in range(4)]

    def __call__(self, n: int, out: ~int32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        g = self.global_view(out, dtype=int32, shape=[N_OUT])
        r = self.register_tensor(dtype=int32, shape=[N_OUT], init=0)
        r[0] = n * self.scale
        r[1] = self.table[3]
        squares = [i * i for i in range(n)]
        r[2] = sum(squares)
        r[3] = len(squares)
        evens = {k: k * 2 for k in range(n) if k % 2 == 0}
        r[4] = len(evens)
        if self.mode == "add":
            r[5] = n + self.scale
        else:
            r[5] = undefined_name_never_transpiled  # noqa: F821 - the static if drops this
        if n > 3:
            r[6] = 1
        else:
            r[6] = 2
        self.store_global(g, r, offsets=[0])


@pytest.mark.parametrize("scale, n", [(3, 4), (5, 2), (-2, 7)])
def test_constructor_and_compile_time_params_are_baked_in(scale, n):
    k = ConstParams(scale)
    out = _out()
    k(n, out)
    squares = [i * i for i in range(n)]
    assert out[0] == n * scale
    assert out[1] == 3 * scale
    assert out[2] == sum(squares)
    assert out[3] == n
    assert out[4] == len(range(0, n, 2))
    assert out[5] == n + scale
    assert out[6] == (1 if n > 3 else 2)
    assert (out[7:] == 0).all()
    text = _text(k, {"n": n})
    assert "if " not in text  # static ifs leave no runtime branch
    assert str(n * scale) in text  # the product is folded into a constant


def test_compile_time_param_passed_by_keyword():
    out = _out()
    ConstParams(scale=2, mode="add")(out=out, n=6)
    assert out[0] == 12 and out[5] == 8


# --------------------------------------------------------------------------------------------
# min / max / cdiv on constants and runtime values


class MinMaxCdiv(tilus.Script):
    def __call__(self, c: int, m: int32, out: ~int32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        g = self.global_view(out, dtype=int32, shape=[N_OUT])
        r = self.register_tensor(dtype=int32, shape=[N_OUT], init=0)
        r[0] = min(c, 5)
        r[1] = max(c, 5)
        r[2] = cdiv(c, 4)
        r[3] = min(m, 5)
        r[4] = max(m, 5)
        r[5] = cdiv(m, 4)
        r[6] = min(m, c, 3)
        r[7] = max(m, c * 2)
        r[8] = min([c, 11, 9])
        self.store_global(g, r, offsets=[0])


@pytest.mark.parametrize("c, m", [(3, 9), (13, 1), (8, 8), (1, 0)])
def test_min_max_cdiv_of_constants_and_runtime_values(c, m):
    out = _out()
    MinMaxCdiv()(c, m, out)
    assert list(out[:9]) == [
        min(c, 5),
        max(c, 5),
        -(-c // 4),
        min(m, 5),
        max(m, 5),
        -(-m // 4),
        min(m, c, 3),
        max(m, c * 2),
        min(c, 11, 9),
    ]


def test_min_max_of_constants_fold_at_compile_time():
    text = _text(MinMaxCdiv(), {"c": 3})
    lines = {ln.split("#")[0].strip() for ln in text.splitlines()}
    assert any("indices=[0], value=3)" in ln for ln in lines)
    assert any("indices=[1], value=5)" in ln for ln in lines)
    assert any("min(m, 5)" in ln for ln in lines)


# --------------------------------------------------------------------------------------------
# declarations, reassignment and augmented assignment


class Declarations(tilus.Script):
    def __call__(self, m: int32, out: ~int32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        g = self.global_view(out, dtype=int32, shape=[N_OUT])
        r = self.register_tensor(dtype=int32, shape=[N_OUT], init=0)
        a: int32 = m * 3
        r[0] = a
        small: int8 = 120
        small += m  # wraps around in 8 bits
        r[1] = small
        u: uint32 = 0
        u -= 1
        r[2] = u == 4294967295
        t: int32 = 7.9  # float -> int truncates
        r[3] = t
        neg: int32 = -7.9
        r[4] = neg
        b = m + 1  # an unannotated runtime value declares a variable
        b = b * 2  # and reassignment updates it
        b = b - m
        r[5] = b
        c: int = 6  # a compile-time constant
        c = c + 1
        r[6] = c
        p, q = m, m * 2  # tuple unpacking
        r[7] = p
        r[8] = q
        self.store_global(g, r, offsets=[0])


@pytest.mark.parametrize("m", [1, 10, -4])
def test_annotated_declarations_and_reassignment(m):
    out = _out()
    Declarations()(m, out)
    assert out[0] == 3 * m
    assert out[1] == (120 + m + 128) % 256 - 128
    assert out[2] == 1
    assert out[3] == 7
    assert out[4] == -7
    assert out[5] == (m + 1) * 2 - m
    assert out[6] == 7
    assert out[7] == m and out[8] == 2 * m


class Swap(tilus.Script):
    def __call__(self, m: int32, out: ~int32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        g = self.global_view(out, dtype=int32, shape=[2])
        r = self.register_tensor(dtype=int32, shape=[2], init=0)
        p: int32 = m
        q: int32 = m * 2
        p, q = q, p  # Python evaluates the right side first
        r[0] = p
        r[1] = q
        self.store_global(g, r, offsets=[0])


def test_tuple_swap_of_runtime_variables():
    out = np.zeros(2, dtype=np.int32)
    Swap()(3, out)
    assert list(out) == [6, 3]


class AugAssign(tilus.Script):
    def __call__(self, m: int32, out: ~int32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        g = self.global_view(out, dtype=int32, shape=[N_OUT])
        r = self.register_tensor(dtype=int32, shape=[N_OUT], init=0)
        x: int32 = m
        x += 5
        r[0] = x
        x -= 2
        r[1] = x
        x *= 3
        r[2] = x
        x //= 4
        r[3] = x
        x %= 5
        r[4] = x
        x ^= 6
        r[5] = x
        x |= 16
        r[6] = x
        x &= 21
        r[7] = x
        x <<= 2
        r[8] = x
        x >>= 1
        r[9] = x
        r[10] = 3
        r[10] += m
        r[10] *= 2
        r[11] = 1
        r[11] ^= 1
        r[12] = 100
        r[12] //= m
        self.store_global(g, r, offsets=[0])


def _c_div(a, b):
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def _c_mod(a, b):
    return a - b * _c_div(a, b)


@pytest.mark.parametrize("m", [7, 3, 30])
def test_augmented_assignment_on_scalars_and_tile_elements(m):
    out = _out()
    AugAssign()(m, out)
    x = m + 5
    want = [x]
    x -= 2
    want.append(x)
    x *= 3
    want.append(x)
    x = _c_div(x, 4)
    want.append(x)
    x = _c_mod(x, 5)
    want.append(x)
    for op in (lambda v: v ^ 6, lambda v: v | 16, lambda v: v & 21, lambda v: v << 2):
        x = op(x)
        want.append(x)
    x >>= 1
    want.append(x)
    want += [(3 + m) * 2, 0, _c_div(100, m)]
    assert list(out[:13]) == want


class PhaseFlip(tilus.Script):
    """``phase[stage] ^= 1`` in a runtime loop, as in the pipelined matmul tutorial."""

    def __init__(self, num_stages):
        super().__init__()
        self.num_stages = num_stages

    def __call__(self, iters: int32, out: ~int32):
        self.attrs.blocks = 1
        self.attrs.warps = 4
        g = self.global_view(out, dtype=int32, shape=[self.num_stages])
        phase = self.register_tensor(dtype=int32, shape=[self.num_stages], init=0)
        for it in range(iters):
            stage = it % self.num_stages
            phase[stage] ^= 1
        self.store_global(g, phase, offsets=[0])


@pytest.mark.parametrize("stages, iters", [(2, 5), (3, 7), (4, 0)])
def test_phase_flip_on_register_elements(stages, iters):
    out = np.full(stages, -1, dtype=np.int32)
    PhaseFlip(stages)(iters, out)
    want = [sum(1 for it in range(iters) if it % stages == s) % 2 for s in range(stages)]
    assert list(out) == want


class WholeTileAug(tilus.Script):
    def __call__(self, m: int32, a_ptr: ~int32, out: ~int32):
        self.attrs.blocks = 1
        self.attrs.warps = 2
        ga = self.global_view(a_ptr, dtype=int32, shape=[4, 8])
        g = self.global_view(out, dtype=int32, shape=[4, 8])
        t = self.load_global(ga, offsets=[0, 0], shape=[4, 8])
        t += m
        t *= 3
        t -= 1
        t ^= 5
        acc = self.register_tensor(dtype=int32, shape=[4, 8], init=0)
        for _ in range(m):
            acc = acc + t  # rebinding a tile inside a runtime loop copies into it
        acc += t
        self.store_global(g, acc, offsets=[0, 0])


def test_augmented_assignment_and_rebinding_of_whole_tiles():
    rng = np.random.default_rng()
    a = rng.integers(-50, 50, size=(4, 8)).astype(np.int32)
    out = np.full((4, 8), -12345, dtype=np.int32)
    m = int(rng.integers(1, 5))
    WholeTileAug()(m, a, out)
    t = ((a + m) * 3 - 1) ^ 5
    np.testing.assert_array_equal(out, t * (m + 1))
