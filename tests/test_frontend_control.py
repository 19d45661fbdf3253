"""Front-end acceptance: loops, branches, helpers, tilus.Class, thread groups, the grid, IR text."""

from __future__ import annotations

import numpy as np
import pytest
from helpers_frontend import (  # noqa: F401
    N_OUT,
    _out,
    _text,
)
from test_frontend_values import AugAssign, ConstParams, PhaseFlip, _c_div  # noqa: E402

import tilus
from tilus import int32
from tilus.lang.frontend.kernel import transpile
from tilus.passes.pipeline import lower
from tilus.utils import cdiv

# --------------------------------------------------------------------------------------------
# loops and branches


class Loops(tilus.Script):
    def __call__(self, start: int32, stop: int32, out: ~int32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        g = self.global_view(out, dtype=int32, shape=[N_OUT])
        r = self.register_tensor(dtype=int32, shape=[N_OUT], init=0)
        for i in range(stop):
            r[0] += i
        for _i in range(start, stop):
            r[1] += 1
        for i in range(start, stop, 3):
            r[2] += i
        for i in self.range(stop, start, -2, unroll=2):
            r[3] += i
            r[4] += 1
        for i in self.range(start, stop, unroll="all"):
            r[5] += i * i
        for i in self.range(4):
            for _j in self.range(i, 4):
                r[6] += 1
        for _i in range(3):
            for j in [10, 20, 30]:  # a Python list: unrolled on the host
                r[7] += j
        k: int32 = 0
        while True:
            k += 1
            if k * k >= stop:
                break
        r[8] = k
        w: int32 = start
        while w < stop:
            w += 2
        r[9] = w
        self.store_global(g, r, offsets=[0])


@pytest.mark.parametrize("start, stop", [(0, 10), (3, 17), (5, 5), (9, 4), (-4, 6)])
def test_for_and_while_loops(start, stop):
    out = _out()
    Loops()(start, stop, out)
    k = 1
    while k * k < stop:
        k += 1
    w = start
    while w < stop:
        w += 2
    want = [
        sum(range(stop)),
        len(range(start, stop)),
        sum(range(start, stop, 3)),
        sum(range(stop, start, -2)),
        len(range(stop, start, -2)),
        sum(i * i for i in range(start, stop)),
        10,
        3 * 60,
        k,
        w,
    ]
    assert list(out[:10]) == want


def test_loops_stay_loops_and_python_lists_unroll():
    text = _text(Loops(), {})
    assert text.count("for ") == 8  # every range loop stays a loop; the list loop unrolls
    assert "range(stop, start, -2) unroll=2" in text
    assert "unroll=all" in text
    assert text.count("(r[7] + 10)") == 1 and text.count("(r[7] + 30)") == 1


class Branches(tilus.Script):
    def __call__(self, m: int32, out: ~int32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        g = self.global_view(out, dtype=int32, shape=[N_OUT])
        r = self.register_tensor(dtype=int32, shape=[N_OUT], init=0)
        if m > 100:
            r[0] = 1
        elif m > 5:
            r[0] = 2
        elif m == 5:
            r[0] = 3
        else:
            r[0] = 4
        v: int32 = 0
        if m % 2 == 0:
            v = m // 2
        else:
            v = 3 * m + 1
        r[1] = v
        r[2] = 7 if m > 3 else 9
        r[3] = (m * 2) if (m > 0 and m < 10) else -1
        r[4] = 1 if not (m == 5 or m == 6) else 0
        if 0 < m <= 6:
            r[5] = 1
        self.store_global(g, r, offsets=[0])


@pytest.mark.parametrize("m", [200, 50, 5, 6, 3, 0, -8])
def test_runtime_if_elif_else_and_ternary(m):
    out = _out()
    Branches()(m, out)
    first = 1 if m > 100 else 2 if m > 5 else 3 if m == 5 else 4
    second = _c_div(m, 2) if m % 2 == 0 else 3 * m + 1
    assert list(out[:6]) == [
        first,
        second,
        7 if m > 3 else 9,
        m * 2 if 0 < m < 10 else -1,
        0 if m in (5, 6) else 1,
        1 if 0 < m <= 6 else 0,
    ]


class EarlyReturn(tilus.Script):
    def __call__(self, m: int32, out: ~int32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        g = self.global_view(out, dtype=int32, shape=[2])
        r = self.register_tensor(dtype=int32, shape=[2], init=1)
        self.store_global(g, r, offsets=[0])
        if m > 0:
            return
        r2 = self.register_tensor(dtype=int32, shape=[2], init=2)
        self.store_global(g, r2, offsets=[0])


@pytest.mark.parametrize("m, want", [(1, 1), (0, 2)])
def test_return_without_value_exits_the_kernel(m, want):
    out = np.zeros(2, dtype=np.int32)
    EarlyReturn()(m, out)
    assert list(out) == [want, want]


# --------------------------------------------------------------------------------------------
# helpers, tilus.Class, thread groups


class Helpers(tilus.Script):
    def split(self, x: int32, d: int):
        q = x // d
        return q, x - q * d

    def block_coord(self, scale: int):
        """A helper with a docstring and a tuple return of constants and runtime values."""
        return self.blockIdx.x * scale, scale + 1

    def bump(self, t: tilus.RegisterTensor, k: int32):
        t[0] += k  # tiles are passed by reference

    def __call__(self, m: int32, out: ~int32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        g = self.global_view(out, dtype=int32, shape=[N_OUT])
        r = self.register_tensor(dtype=int32, shape=[N_OUT], init=0)
        q, rem = self.split(m, 7)
        r[1] = q
        r[2] = rem
        a, b = self.block_coord(4)
        r[3] = a
        r[4] = b
        self.bump(r, m)
        self.bump(r, 2)
        self.store_global(g, r, offsets=[0])


@pytest.mark.parametrize("m", [23, 7, 0])
def test_helper_methods_with_tuple_returns(m):
    out = _out()
    Helpers()(m, out)
    assert list(out[:5]) == [m + 2, m // 7, m % 7, 0, 5]


class Ring(tilus.Class):
    def __init__(self, num_stages: int):
        self.num_stages: int = num_stages
        self.stage: int32 = 0
        self.phase: int32 = 0
        self.count: int32 = 0

    def advance(self):
        self.count += 1
        self.stage += 1
        if self.stage == self.num_stages:
            self.stage = 0
            self.phase ^= 1


class UsesClass(tilus.Script):
    def __call__(self, iters: int32, out: ~int32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        g = self.global_view(out, dtype=int32, shape=[N_OUT])
        r = self.register_tensor(dtype=int32, shape=[N_OUT], init=0)
        ring = Ring(3)
        other = Ring(2)
        for _ in range(iters):
            ring.advance()
        other.advance()
        r[0] = ring.stage
        r[1] = ring.phase
        r[2] = ring.count
        r[3] = ring.num_stages
        r[4] = other.stage
        r[5] = other.count
        self.store_global(g, r, offsets=[0])


@pytest.mark.parametrize("iters", [0, 2, 3, 7, 10])
def test_class_state_persists_across_method_calls(iters):
    out = _out()
    UsesClass()(iters, out)
    assert list(out[:6]) == [iters % 3, (iters // 3) % 2, iters, 3, 1, 1]


class Groups(tilus.Script):
    def __call__(self, out: ~int32):
        self.attrs.blocks = 1
        self.attrs.warps = 4
        g = self.global_view(out, dtype=int32, shape=[4, 4])
        r = self.register_tensor(dtype=int32, shape=[4], init=0)
        r[0] = self.current_thread_begin
        r[1] = self.current_num_threads
        r[2] = self.current_thread_end
        self.store_global(g, r, offsets=[0, 0], dims=[1])
        with self.thread_group(32, 64):
            r1 = self.register_tensor(dtype=int32, shape=[4], init=1)
            r1[0] = self.current_thread_begin
            r1[1] = self.current_num_threads
            r1[2] = self.current_thread_end
            self.store_global(g, r1, offsets=[1, 0], dims=[1])
            with self.thread_group(32, 32):
                r2 = self.register_tensor(dtype=int32, shape=[4], init=2)
                r2[0] = self.current_thread_begin
                r2[1] = self.current_num_threads
                r2[2] = self.current_thread_end
                self.store_global(g, r2, offsets=[2, 0], dims=[1])
        with self.single_thread():
            r3 = self.register_tensor(dtype=int32, shape=[4], init=3)
            r3[1] = self.current_num_threads
            self.store_global(g, r3, offsets=[3, 0], dims=[1])
        self.sync()


def test_thread_groups_and_single_thread():
    out = np.full((4, 4), -1, dtype=np.int32)
    Groups()(out)
    assert out.tolist() == [
        [0, 128, 128, 0],
        [32, 64, 96, 1],
        [64, 32, 96, 2],
        [3, 1, 3, 3],
    ]


# --------------------------------------------------------------------------------------------
# the grid: self.attrs.blocks as an int and as a list


class GridInt(tilus.Script):
    def __call__(self, n: int32, out: ~int32):
        self.attrs.blocks = n
        self.attrs.warps = 1
        g = self.global_view(out, dtype=int32, shape=[n, 2])
        r = self.register_tensor(dtype=int32, shape=[2], init=0)
        r[0] = self.blockIdx.x
        r[1] = self.gridDim.x * 100 + self.gridDim.y * 10 + self.gridDim.z
        self.store_global(g, r, offsets=[self.blockIdx.x, 0], dims=[1])


def test_blocks_as_int():
    out = np.full((5, 2), -1, dtype=np.int32)
    GridInt()(5, out)
    assert out[:, 0].tolist() == list(range(5))
    assert out[:, 1].tolist() == [511] * 5


class GridList(tilus.Script):
    def __call__(self, m: int32, n: int, out: ~int32):
        bm = 4
        num_x = cdiv(m, bm)  # an intermediate variable in the grid expression
        self.attrs.blocks = [num_x, n]
        self.attrs.warps = 1
        g = self.global_view(out, dtype=int32, shape=[n, m])
        r = self.register_tensor(dtype=int32, shape=[1, bm], init=lambda i, j: j)
        t = r + self.blockIdx.x * bm + self.blockIdx.y * 1000
        self.store_global(g, t, offsets=[self.blockIdx.y, self.blockIdx.x * bm])


@pytest.mark.parametrize("m, n", [(10, 3), (8, 1), (1, 2)])
def test_blocks_as_list_of_expressions(m, n):
    out = np.full((n, m), -1, dtype=np.int32)
    GridList()(m, n, out)
    want = np.arange(m)[None, :] + 1000 * np.arange(n)[:, None]
    np.testing.assert_array_equal(out, want)


# --------------------------------------------------------------------------------------------
# IR printer stability


def test_ir_text_is_stable_across_transpilations():
    k1 = ConstParams(3)
    k2 = ConstParams(scale=3)  # a different cache entry, transpiled again
    assert k1 is not k2
    t1 = _text(k1, {"n": 4})
    t2 = _text(k2, {"n": 4})
    assert t1.replace("ConstParams", "") == t2.replace("ConstParams", "")
    again = lower(transpile(k1.instance({}), {"n": 4}, {})).text
    assert again == t1
    for kernel in (Loops(), Branches(), UsesClass(), Groups(), AugAssign()):
        a = _text(kernel, {})
        b = lower(transpile(kernel.instance({}), {}, {})).text
        assert a == b


def test_ir_text_changes_with_constants():
    base = _text(ConstParams(3), {"n": 4})
    assert _text(ConstParams(4), {"n": 4}) != base
    assert _text(ConstParams(3), {"n": 5}) != base
    assert _text(PhaseFlip(2), {}) != _text(PhaseFlip(3), {})
