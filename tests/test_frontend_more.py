"""Front-end acceptance: more helpers and Class tiles, host-built runtime values, aliasing."""

from __future__ import annotations

import numpy as np
import pytest
from helpers_frontend import (  # noqa: F401
    N_OUT,
    _out,
    _text,
)
from test_frontend_control import Loops, UsesClass  # noqa: E402
from test_frontend_values import ConstParams, _c_div  # noqa: E402

import tilus
from tilus import float32, int32

# --------------------------------------------------------------------------------------------
# more helpers, Class tiles, breaks in range loops


class Accumulator(tilus.Class):
    def __init__(self, width: int):
        self.acc = self.register_tensor(dtype=int32, shape=[width], init=0)
        self.calls: int32 = 0

    def add(self, t):
        self.acc = self.acc + t  # rebinding a tile attribute copies into it
        self.calls += 1

    def total(self):
        return self.calls * 1000


class MoreHelpers(tilus.Script):
    def scaled(self, x: int32, scale: int = 2, *, shift: int = 1):
        return self.plus_hundred(x * scale) + shift

    def plus_hundred(self, y: int32):
        return y + 100

    def filled(self, v: int32):
        t = self.register_tensor(dtype=int32, shape=[4], init=v)
        return t

    def __call__(self, m: int32, out: ~int32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        g = self.global_view(out, dtype=int32, shape=[3, 4])
        acc = Accumulator(4)
        for i in range(m):
            acc.add(self.filled(i))
        r = self.register_tensor(dtype=int32, shape=[4], init=0)
        r[0] = self.scaled(m, shift=5)
        r[1] = self.scaled(m, 3)
        r[2] = self.scaled(x=m, scale=4, shift=0)
        r[3] = acc.total()
        self.store_global(g, r, offsets=[0, 0], dims=[1])
        self.store_global(g, acc.acc, offsets=[1, 0], dims=[1])
        self.store_global(g, self.filled(m * 7), offsets=[2, 0], dims=[1])


@pytest.mark.parametrize("m", [0, 1, 6])
def test_nested_helpers_defaults_keywords_and_class_tiles(m):
    out = np.full((3, 4), -1, dtype=np.int32)
    MoreHelpers()(m, out)
    assert out[0].tolist() == [2 * m + 105, 3 * m + 101, 4 * m + 100, 1000 * m]
    assert out[1].tolist() == [sum(range(m))] * 4
    assert out[2].tolist() == [7 * m] * 4


class Breaks(tilus.Script):
    def __call__(self, m: int32, out: ~int32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        g = self.global_view(out, dtype=int32, shape=[3])
        r = self.register_tensor(dtype=int32, shape=[3], init=0)
        for i in range(m):
            for j in range(m):
                if j > i:
                    break  # leaves the inner loop only
                r[0] += 1
        for i in range(100):
            if i == m:
                break
            r[1] += 1
        n: int32 = 0
        while n < 1000:
            n += 3
            if n > m:
                break
        r[2] = n
        self.store_global(g, r, offsets=[0])


@pytest.mark.parametrize("m", [0, 1, 5, 12])
def test_break_in_range_and_while_loops(m):
    out = np.full(3, -1, dtype=np.int32)
    Breaks()(m, out)
    n = 0
    while n < 1000:
        n += 3
        if n > m:
            break
    assert out.tolist() == [m * (m + 1) // 2, m, n]


class EnumerateLoop(tilus.Script):
    def __call__(self, out: ~int32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        g = self.global_view(out, dtype=int32, shape=[4])
        r = self.register_tensor(dtype=int32, shape=[4], init=0)
        for i, v in enumerate([3, 4, 5]):
            r[i] = v
        for a, b in zip([1, 2], [10, 20]):
            r[3] += a * b
        self.store_global(g, r, offsets=[0])


def test_loops_over_enumerate_and_zip_unroll():
    out = np.full(4, -1, dtype=np.int32)
    EnumerateLoop()(out)
    assert out.tolist() == [3, 4, 5, 50]


class FloatScalars(tilus.Script):
    def __call__(self, m: int32, f: float32, out: ~float32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        g = self.global_view(out, dtype=float32, shape=[6])
        r = self.register_tensor(dtype=float32, shape=[6], init=0.0)
        y: float32 = f * 3
        r[0] = y
        r[1] = max(f, m)
        r[2] = f // 2  # floor division of floats
        r[3] = m / 2  # integer division (C semantics) before the conversion
        r[4] = 1.0 if f > 0 else -1.0
        k: int32 = f  # float -> int truncates toward zero
        r[5] = k
        self.store_global(g, r, offsets=[0])


@pytest.mark.parametrize("m, f", [(5, -2.5), (-7, 3.75)])
def test_float_scalars(m, f):
    out = np.full(6, np.nan, dtype=np.float32)
    FloatScalars()(m, f, out)
    assert out.tolist() == [3 * f, max(f, m), np.floor(f / 2), _c_div(m, 2), np.sign(f), int(f)]


# --------------------------------------------------------------------------------------------
# host-evaluated expressions that build runtime values


class HostBuilt(tilus.Script):
    def __init__(self, tag):
        super().__init__()
        self.tag = tag

    def __call__(self, m: int32, out: ~int32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        g = self.global_view(out, dtype=int32, shape=[6])
        r = self.register_tensor(dtype=int32, shape=[6], init=0)
        terms = [m * k for k in range(1, 4)]  # a comprehension of runtime values
        for k, term in [(0, terms[0]), (1, terms[1]), (2, terms[2])]:
            r[k] = term
        twice = lambda v: v * 2  # noqa: E731 - a host lambda over runtime values
        r[3] = twice(m) + twice(1)
        table = {"a": 10, "b": 20}
        r[4] = table[self.tag] + m
        r[5] = sum(terms)
        self.printf(f"tag={self.tag} m=%d\n", m)
        self.store_global(g, r, offsets=[0])


@pytest.mark.parametrize("tag", ["a", "b"])
def test_comprehensions_lambdas_dicts_and_fstrings_on_the_host(tag, capsys):
    out = np.full(6, -1, dtype=np.int32)
    HostBuilt(tag)(4, out)
    assert out.tolist() == [4, 8, 12, 10, (10 if tag == "a" else 20) + 4, 24]
    assert capsys.readouterr().out == f"tag={tag} m=4\n"


def test_ir_text_is_stable_across_processes():
    """Two fresh interpreters with different hash seeds print the same IR."""
    import os
    import subprocess
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); import helpers_frontend as h; "
        "import test_frontend_control as c; import test_frontend_values as v; "
        "print(h._text(c.Loops(), {}) + h._text(c.UsesClass(), {}) + "
        "h._text(v.ConstParams(3), {'n': 4}), end='')"
    )
    texts = []
    for seed in ("1", "2"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        res = subprocess.run(
            [sys.executable, "-c", code, here], capture_output=True, text=True, env=env
        )
        assert res.returncode == 0, res.stderr
        texts.append(res.stdout)
    assert texts[0] == texts[1]
    local = _text(Loops(), {}) + _text(UsesClass(), {}) + _text(ConstParams(3), {"n": 4})
    assert texts[0] == local


# --------------------------------------------------------------------------------------------
# tiles bound in runtime branches, and aliasing


class TileInBranches(tilus.Script):
    def __call__(self, m: int32, out: ~int32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        g = self.global_view(out, dtype=int32, shape=[4])
        a = self.register_tensor(dtype=int32, shape=[4], init=lambda i: i)
        t = self.register_tensor(dtype=int32, shape=[4], init=0)  # declared before the if
        if m > 0:
            t = a + m
        else:
            t = a - m
        self.store_global(g, t, offsets=[0])


@pytest.mark.parametrize("m", [3, -5])
def test_tile_declared_before_a_runtime_if_and_rebound_in_branches(m):
    out = np.full(4, -1, dtype=np.int32)
    TileInBranches()(m, out)
    assert out.tolist() == [i + abs(m) for i in range(4)]


class Alias(tilus.Script):
    def __call__(self, m: int32, out: ~int32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        g = self.global_view(out, dtype=int32, shape=[2, 4])
        a = self.register_tensor(dtype=int32, shape=[4], init=1)
        t = a  # t names the same tile as a
        t = a + m  # Python semantics: rebinding t leaves a alone
        self.store_global(g, a, offsets=[0, 0], dims=[1])
        self.store_global(g, t, offsets=[1, 0], dims=[1])


def test_rebinding_an_alias_leaves_the_original_tile_alone():
    out = np.full((2, 4), -1, dtype=np.int32)
    Alias()(5, out)
    assert out.tolist() == [[1] * 4, [6] * 4]


class HelperRebindsParam(tilus.Script):
    def bump(self, t):
        t = t + 1  # rebinds the helper's own name
        return t

    def __call__(self, out: ~int32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        g = self.global_view(out, dtype=int32, shape=[2, 4])
        a = self.register_tensor(dtype=int32, shape=[4], init=1)
        b = self.bump(a)
        self.store_global(g, a, offsets=[0, 0], dims=[1])
        self.store_global(g, b, offsets=[1, 0], dims=[1])


def test_helper_rebinding_its_tile_parameter_leaves_the_callers_tile_alone():
    out = np.full((2, 4), -1, dtype=np.int32)
    HelperRebindsParam()(out)
    assert out.tolist() == [[1] * 4, [2] * 4]


class ViewShapes(tilus.Script):
    def __init__(self, swap):
        super().__init__()
        self.swap = swap

    def __call__(self, m: int32, n: int32, a_ptr: ~float32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        shape = [n, m] if self.swap else [m, n]
        g = self.global_view(a_ptr, dtype=float32, shape=shape)
        t = self.load_global(g, offsets=[0, 0], shape=[4, 4])
        self.store_global(g, t + 1.0, offsets=[0, 0])


def test_ir_text_shows_global_view_shapes():
    a = _text(ViewShapes(False), {})
    b = _text(ViewShapes(True), {})
    assert a != b


class WarpHelpers(tilus.Script):
    def record(self, g, row: int):
        r = self.register_tensor(dtype=int32, shape=[3], init=0)
        r[0] = self.current_thread_begin
        r[1] = self.current_num_threads
        r[2] = self.current_thread_end
        self.store_global(g, r, offsets=[row, 0], dims=[1])

    def __call__(self, out: ~int32):
        self.attrs.blocks = 1
        self.attrs.warps = 8
        g = self.global_view(out, dtype=int32, shape=[5, 3])
        with self.single_warp(2):
            self.record(g, 0)
        with self.warp_group(4, 4):
            self.record(g, 1)
            with self.single_warp(1):
                self.record(g, 2)
                with self.single_thread(5):
                    self.record(g, 3)
        with self.thread_group(100, 20):
            self.record(g, 4)


def test_single_warp_warp_group_and_single_thread_offsets():
    out = np.full((5, 3), -1, dtype=np.int32)
    WarpHelpers()(out)
    assert out.tolist() == [
        [64, 32, 96],
        [128, 128, 256],
        [160, 32, 192],
        [165, 1, 166],
        [100, 20, 120],
    ]


class StepBase(tilus.Class):
    def __init__(self, n: int):
        super().__init__()
        self.n: int = n
        self.v: int32 = 0

    def step(self):
        self.v += self.n


class StepDerived(StepBase):
    def __init__(self, n: int, extra: int32):
        super().__init__(n)
        self.extra: int32 = extra

    def step(self):
        super().step()
        self.v += self.extra

    def twice(self):
        self.step()
        self.step()


class UsesDerived(tilus.Script):
    def drive(self, d: StepDerived, times: int32):
        for _ in range(times):
            d.twice()

    def __call__(self, m: int32, k: int32, out: ~int32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        g = self.global_view(out, dtype=int32, shape=[2])
        d = StepDerived(3, m)
        self.drive(d, k)
        r = self.register_tensor(dtype=int32, shape=[2], init=0)
        r[0] = d.v
        r[1] = d.n
        self.store_global(g, r, offsets=[0])


@pytest.mark.parametrize("m, k", [(10, 2), (-1, 5), (7, 0)])
def test_class_inheritance_super_and_passing_objects_to_helpers(m, k):
    out = np.full(2, -99, dtype=np.int32)
    UsesDerived()(m, k, out)
    assert out.tolist() == [2 * k * (3 + m), 3]


class LoopVarSemantics(tilus.Script):
    def __call__(self, m: int32, out: ~int32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        g = self.global_view(out, dtype=int32, shape=[3])
        r = self.register_tensor(dtype=int32, shape=[3], init=0)
        for i in range(4):
            i = i * 10  # noqa: PLW2901 - rebinding the loop variable lasts one iteration
            r[0] += i
        n: int32 = m
        for _ in range(n):  # the bound is evaluated once, like Python's range
            n = n - 1
            r[1] += 1
        r[2] = n
        self.store_global(g, r, offsets=[0])


@pytest.mark.parametrize("m", [0, 3, 8])
def test_loop_variable_and_bound_follow_python_semantics(m):
    out = np.full(3, -1, dtype=np.int32)
    LoopVarSemantics()(m, out)
    assert out.tolist() == [60, m, 0]
