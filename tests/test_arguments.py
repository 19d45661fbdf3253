"""Checks of the arguments a kernel is called with: each error names the parameter."""

from __future__ import annotations

import numpy as np
import pytest

import tilus
from tilus import float16, float32, int32
from tilus.utils import cdiv


class Scale(tilus.Script):
    def __call__(
        self,
        n: int32,
        x_ptr: ~float16,
        out_ptr: ~float32,
        factor: float32 = 2.0,
        block: int = 32,
    ):
        self.attrs.blocks = cdiv(n, block)
        self.attrs.warps = 1
        off = self.blockIdx.x * block
        gx = self.global_view(x_ptr, dtype=float16, shape=[n])
        go = self.global_view(out_ptr, dtype=float32, shape=[n])
        x = self.load_global(gx, offsets=[off], shape=[block])
        self.store_global(go, self.cast(x, dtype=float32) * factor, offsets=[off])


def _inputs(n=50):
    rng = np.random.default_rng()
    x = rng.uniform(0.5, 4.0, size=n).astype(np.float16)
    out = np.full(n, np.nan, dtype=np.float32)
    return x, out


def _raises(cls, fragment, *args, **kwargs):
    with pytest.raises(cls) as info:
        Scale()(*args, **kwargs)
    text = str(info.value)
    assert fragment in text, text
    return text


def test_defaults_and_keywords():
    x, out = _inputs()
    Scale()(50, x, out)
    np.testing.assert_array_equal(out, x.astype(np.float32) * 2)
    x, out = _inputs()
    Scale()(out_ptr=out, x_ptr=x, n=50, factor=-1.5, block=16)
    np.testing.assert_array_equal(out, x.astype(np.float32) * -1.5)
    x, out = _inputs()
    Scale()(50, x, out, 3.0)
    np.testing.assert_array_equal(out, x.astype(np.float32) * 3)
    x, out = _inputs()
    Scale()(50, x, out, factor=np.float32(0.5), block=np.int64(8))  # NumPy scalars are fine
    np.testing.assert_array_equal(out, x.astype(np.float32) * 0.5)


def test_too_many_arguments():
    x, out = _inputs()
    _raises(
        tilus.TilusArgumentError,
        "Scale takes 5 arguments (n, x_ptr, out_ptr, factor, block) but 6 were given",
        *(50, x, out, 2.0, 32, 99),
    )


def test_missing_argument_names_it():
    x, _ = _inputs()
    _raises(tilus.TilusArgumentError, "'out_ptr'", 50, x)


def test_unknown_keyword_names_it():
    x, out = _inputs()
    _raises(tilus.TilusArgumentError, "'scale'", 50, x, out, scale=2.0)


def test_argument_given_twice_names_it():
    x, out = _inputs()
    _raises(tilus.TilusArgumentError, "'n'", 50, x, out, n=50)


def test_float32_array_for_a_float16_pointer():
    _, out = _inputs()
    text = _raises(tilus.TilusArgumentError, "'x_ptr'", 50, np.ones(50, np.float32), out)
    assert "float16" in text and "float32" in text


def test_non_contiguous_array():
    x, out = _inputs(100)
    text = _raises(tilus.TilusArgumentError, "'x_ptr'", 50, x[::2], out[:50])
    assert "contiguous" in text


def test_non_array_for_a_pointer():
    _, out = _inputs()
    _raises(tilus.TilusArgumentError, "'x_ptr'", 50, [1.0] * 50, out)


def test_unsupported_array_dtype():
    _, out = _inputs()
    _raises(tilus.TilusArgumentError, "'x_ptr'", 50, np.ones(50, np.complex64), out)


def test_python_float_for_an_int32_param():
    x, out = _inputs()
    _raises(tilus.TilusArgumentError, "'n'", 50.0, x, out)


def test_bool_for_an_int32_param():
    x, out = _inputs()
    _raises(tilus.TilusArgumentError, "'n'", True, x, out)


@pytest.mark.parametrize("n", [2**31, -(2**31) - 1, 2**40])
def test_int_out_of_int32_range(n):
    x, out = _inputs()
    text = _raises(tilus.TilusArgumentError, "'n'", n, x, out)
    assert "int32" in text


def test_string_for_a_float32_param():
    x, out = _inputs()
    _raises(tilus.TilusArgumentError, "'factor'", 50, x, out, "2.0")


def test_array_for_a_scalar_param():
    x, out = _inputs()
    _raises(tilus.TilusArgumentError, "'factor'", 50, x, out, np.ones(3, np.float32))


def test_non_int_for_an_int_compile_time_param():
    x, out = _inputs()
    _raises(tilus.TilusArgumentError, "'block'", 50, x, out, 2.0, 32.0)
    _raises(tilus.TilusArgumentError, "'block'", 50, x, out, 2.0, "32")


def test_tile_too_small_for_the_global_view():
    x, _ = _inputs(50)
    out = np.full(64, np.nan, np.float32)
    with pytest.raises(tilus.TilusRuntimeError) as info:
        Scale()(64, x, out)
    text = str(info.value)
    assert "outside the array passed as `x_ptr` (50 elements)" in text, text
    assert info.value.loc is not None and info.value.loc.file.endswith("test_arguments.py")
    assert np.isnan(out).all()  # the array the kernel was given: nothing was stored


class Consts(tilus.Script):
    def __call__(self, flag: bool, ratio: float, name: str, out: ~int32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        g = self.global_view(out, dtype=int32, shape=[3])
        r = self.register_tensor(dtype=int32, shape=[3], init=0)
        if flag:
            r[0] = 1
        r[1] = int(ratio * 10)
        r[2] = len(name)
        self.store_global(g, r, offsets=[0])


def test_bool_float_str_compile_time_params():
    out = np.full(3, -1, np.int32)
    Consts()(True, 2.5, "abcd", out)
    assert list(out) == [1, 25, 4]
    Consts()(False, 1, "ab", out)  # an int is accepted for a float
    assert list(out) == [0, 10, 2]


@pytest.mark.parametrize(
    "args, name",
    [
        ((1, 2.5, "a"), "'flag'"),
        ((True, "2.5", "a"), "'ratio'"),
        ((True, 2.5, 3), "'name'"),
    ],
)
def test_wrong_types_for_compile_time_params(args, name):
    with pytest.raises(tilus.TilusArgumentError) as info:
        Consts()(*args, np.zeros(3, np.int32))
    assert name in str(info.value)


class Scalars(tilus.Script):
    def __call__(self, a: tilus.int8, b: tilus.uint32, c: tilus.boolean, out: ~int32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        g = self.global_view(out, dtype=int32, shape=[3])
        r = self.register_tensor(dtype=int32, shape=[3], init=0)
        r[0] = a
        r[1] = b % 1000
        r[2] = 5 if c else 6
        self.store_global(g, r, offsets=[0])


def test_small_and_unsigned_scalar_params():
    out = np.full(3, -1, np.int32)
    Scalars()(-128, 2**32 - 1, True, out)
    assert list(out) == [-128, (2**32 - 1) % 1000, 5]
    for bad, name in (((128, 0, True), "'a'"), ((0, -1, True), "'b'")):
        with pytest.raises(tilus.TilusArgumentError) as info:
            Scalars()(*bad, out)
        assert name in str(info.value)


def test_array_argument_errors_leave_outputs_untouched():
    x, out = _inputs()
    with pytest.raises(tilus.TilusArgumentError):
        Scale()(50, x, out, "bad")
    assert np.isnan(out).all()


class Flags(tilus.Script):
    def __call__(self, c: tilus.boolean, f: float32, out: ~float32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        g = self.global_view(out, dtype=float32, shape=[4])
        r = self.register_tensor(dtype=float32, shape=[4], init=f)
        r[0] = 1.0 if c else 2.0
        self.store_global(g, r, offsets=[0])


def test_boolean_and_float_params():
    out = np.full(4, np.nan, np.float32)
    Flags()(False, 1.5, out)
    assert out.tolist() == [2.0, 1.5, 1.5, 1.5]
    Flags()(np.bool_(True), 3, out)  # NumPy bools and Python ints are fine
    assert out.tolist() == [1.0, 3.0, 3.0, 3.0]


def test_string_for_a_boolean_param():
    out = np.full(4, np.nan, np.float32)
    with pytest.raises(tilus.TilusArgumentError) as info:
        Flags()("no", 1.0, out)
    assert "'c'" in str(info.value)


def test_huge_int_for_a_float_param():
    out = np.full(4, np.nan, np.float32)
    with pytest.raises(tilus.TilusArgumentError) as info:
        Flags()(True, 10**400, out)
    assert "'f'" in str(info.value)


def test_read_only_output_array():
    out = np.zeros(4, np.float32)
    out.setflags(write=False)
    with pytest.raises(tilus.TilusError) as info:
        Flags()(True, 1.0, out)
    assert "out" in str(info.value)


class Grid(tilus.Script):
    def __call__(self, gx: int32, gy: int32, out: ~int32):
        self.attrs.blocks = [gx, gy]
        self.attrs.warps = 1
        g = self.global_view(out, dtype=int32, shape=[4])
        r = self.register_tensor(dtype=int32, shape=[1], init=1)
        self.store_global(g, r, offsets=[self.blockIdx.x])


def test_empty_grid_runs_nothing():
    out = np.full(4, -1, np.int32)
    Grid()(0, 3, out)
    assert out.tolist() == [-1] * 4
    Grid()(2, 1, out)
    assert out.tolist() == [1, 1, -1, -1]


@pytest.mark.parametrize("gx, gy, axis", [(-1, 1, "x"), (1, 65536, "y")])
def test_grid_outside_the_launch_limits(gx, gy, axis):
    out = np.full(4, -1, np.int32)
    with pytest.raises(tilus.TilusRuntimeError, match=f"grid dim {axis}"):
        Grid()(gx, gy, out)
    assert out.tolist() == [-1] * 4


class ReversedView(tilus.Script):
    """A view walking backwards from the last element (negative stride)."""

    def __init__(self, touch):
        super().__init__()
        self.touch = touch

    def __call__(self, n: int32, a_ptr: ~float32, out: ~float32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        ga = self.global_view(a_ptr + (n - 1), dtype=float32, shape=[n], strides=[-1])
        if self.touch:
            go = self.global_view(out, dtype=float32, shape=[n])
            self.store_global(go, self.load_global(ga, offsets=[0], shape=[16]), offsets=[0])


def test_reversed_view_with_a_negative_stride():
    a = np.random.default_rng().uniform(1, 2, size=10).astype(np.float32)
    out = np.full(10, np.nan, np.float32)
    ReversedView(True)(10, a, out)
    np.testing.assert_array_equal(out, a[::-1])


def test_view_with_a_negative_stride_past_the_end_is_refused():
    a = np.ones(10, np.float32)
    out = np.full(11, np.nan, np.float32)
    # the kernel only builds the view, so the unchecked case never touches memory
    with pytest.raises(tilus.TilusRuntimeError, match="a_ptr"):
        ReversedView(False)(11, a, out)
