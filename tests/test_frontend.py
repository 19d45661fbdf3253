"""Front-end acceptance: every language construct, checked by its numeric effect.

Each kernel computes scalars, writes them into a register tile and stores the tile into an int32
output array, which the test compares with what Python computes for the same construct.
"""

from __future__ import annotations

import numpy as np
import pytest

import tilus
from tilus import float32, int8, int32, uint32
from tilus.lang.frontend.kernel import transpile
from tilus.passes.pipeline import lower
from tilus.utils import cdiv

N_OUT = 16


def _out(n=N_OUT):
    return np.full(n, -12345, dtype=np.int32)


def _text(kernel, const_args):
    """The IR text of the first config of ``kernel`` for ``const_args``."""
    return kernel.program(kernel.configs[0], const_args).text


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
        "import sys; sys.path.insert(0, sys.argv[1]); import test_frontend as t; "
        "print(t._text(t.Loops(), {}) + t._text(t.UsesClass(), {}) + "
        "t._text(t.ConstParams(3), {'n': 4}), end='')"
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
