"""A newcomer's rough edges (issue 16), each turned into a clear tilus error: one test each."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from helpers_errors import err_line

import tilus
from tilus import float32, int32
from tilus.utils import cdiv

REPO = Path(__file__).resolve().parents[1]


class Rows(tilus.Script):
    """Copies ``rows x 32`` float32 elements; ``block`` is compile-time."""

    def __call__(self, block: int, rows: int32, x_ptr: ~float32, y_ptr: ~float32):
        self.attrs.blocks = cdiv(rows, block)
        self.attrs.warps = 1
        gx = self.global_view(x_ptr, dtype=float32, shape=[rows, 32])
        gy = self.global_view(y_ptr, dtype=float32, shape=[rows, 32])
        x = self.load_global(gx, offsets=[self.blockIdx.x * block, 0], shape=[block, 32])
        self.store_global(gy, x, offsets=[self.blockIdx.x * block, 0])


def _xy(rows=37):
    x = np.random.default_rng().standard_normal((rows, 32)).astype(np.float32)
    return x, np.full_like(x, np.nan)


def test_rows_kernel_runs():
    x, y = _xy()
    Rows()(16, 37, x, y)
    np.testing.assert_array_equal(y, x)


# --- a forgotten compile-time argument -----------------------------------------------------
def test_forgotten_compile_time_argument_names_the_parameter():
    x, y = _xy()
    with pytest.raises(tilus.TilusArgumentError) as info:
        Rows()(x, y, x, y)  # `block` and `rows` forgotten: the arrays land on them
    text = str(info.value)
    assert "'block' is a compile-time int, got ndarray" in text, text
    assert "missing argument" in text, text
    assert info.value.__traceback__ is None or "only 0-dimensional" not in text


def test_cuda_argument_check_refuses_an_array_for_an_int():
    from tilus.backends.cuda.launch import _check_values, _Param

    with pytest.raises(tilus.TilusArgumentError, match=r"'rows' \(int32\) needs a number"):
        _check_values("Rows", [_Param("rows", int32)], [("rows", int32, np.arange(3))])
    env, _, _ = _check_values("Rows", [_Param("rows", int32)], [("rows", int32, np.int64(7))])
    assert list(env.values()) == [7]


# --- a negative size -----------------------------------------------------------------------
def test_negative_size_is_refused_naming_the_argument():
    x, y = _xy()
    with pytest.raises(tilus.TilusArgumentError) as info:
        Rows()(16, -5, x, y)  # the grid, cdiv(-5, 16), is empty: it used to do nothing
    text = str(info.value)
    line = inspect.getsourcelines(Rows.__call__)[1] + 3  # the first global_view
    assert "argument rows=-5" in text and "'x_ptr'" in text, text
    assert f"test_friction.py:{line}" in text, text


def test_negative_size_check_is_shared_with_the_cuda_path():
    from tilus.backends.arguments import check_view_extents

    prog = Rows().program({}, {"block": 16})
    check_view_extents("Rows", prog, {"rows": 0})  # an empty view is fine
    with pytest.raises(tilus.TilusArgumentError, match="argument rows=-1 gives"):
        check_view_extents("Rows", prog, {"rows": -1})


# --- a tile no GPU could hold ----------------------------------------------------------------
class Huge(tilus.Script):
    def __call__(self, x_ptr: ~float32):
        self.attrs.blocks = 1
        self.attrs.warps = 4
        t = self.register_tensor(dtype=float32, shape=[65536, 65536], init=1.0)  # ERR
        gx = self.global_view(x_ptr, dtype=float32, shape=[1, 1])
        self.store_global(gx, t, offsets=[0, 0])


def test_huge_register_tile_is_refused_before_allocating():
    start = time.perf_counter()
    with pytest.raises(tilus.TilusCompileError) as info:
        Huge()(np.zeros((1, 1), np.float32))
    assert time.perf_counter() - start < 10  # it used to allocate 16 GiB and be OOM-killed
    err = info.value
    assert err.loc.line == err_line(Huge), str(err)
    assert "needs 33554432 registers per thread over 128 threads" in err.msg, err.msg


def test_register_message_is_the_cuda_one():
    from tilus.backends.cuda.layout import inference

    src = inspect.getsource(inference)
    assert "tile_registers_message(" in src  # one text for both backends


# --- NumPy on a tile -------------------------------------------------------------------------
class NumpyExp(tilus.Script):
    def __call__(self, x_ptr: ~float32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        gx = self.global_view(x_ptr, dtype=float32, shape=[32])
        x = self.load_global(gx, offsets=[0], shape=[32])
        y = np.exp(x)  # ERR
        self.store_global(gx, y, offsets=[0])


class NumpyArray(tilus.Script):
    def __call__(self, x_ptr: ~float32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        gx = self.global_view(x_ptr, dtype=float32, shape=[32])
        x = self.load_global(gx, offsets=[0], shape=[32])
        y = np.asarray(x)  # ERR
        self.store_global(gx, y, offsets=[0])


@pytest.mark.parametrize("kernel, hint", [(NumpyExp, "self.exp(...)"), (NumpyArray, "self.exp")])
def test_numpy_on_a_tile_is_a_located_tilus_error(kernel, hint):
    with pytest.raises(tilus.TilusProgramError) as info:
        kernel()(np.ones(32, np.float32))
    err = info.value
    assert err.loc.line == err_line(kernel), str(err)
    assert "tilus tile `x`" in err.msg and hint in err.msg, err.msg
    assert "loop of ufunc" not in err.msg


# --- a lambda's body -------------------------------------------------------------------------
class LambdaBody(tilus.Script):
    def __call__(self, x_ptr: ~float32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        gx = self.global_view(x_ptr, dtype=float32, shape=[32])
        scale = lambda t: self.cast(t, dtype="f32")  # noqa: E731  # ERR
        x = self.load_global(gx, offsets=[0], shape=[32])
        self.store_global(gx, scale(x), offsets=[0])


class LambdaWorks(tilus.Script):
    def __call__(self, x_ptr: ~float32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        gx = self.global_view(x_ptr, dtype=float32, shape=[32])
        twice = lambda t: self.add(t, t)  # noqa: E731
        x = self.load_global(gx, offsets=[0], shape=[32])
        self.store_global(gx, twice(x), offsets=[0])


def test_lambda_error_points_at_the_lambda():
    with pytest.raises(tilus.TilusProgramError) as info:
        LambdaBody()(np.ones(32, np.float32))
    err = info.value
    assert err.loc.line == err_line(LambdaBody), str(err)  # not the line that calls it
    assert "dtype" in err.msg, err.msg


def test_lambda_still_works():
    x = np.random.default_rng().standard_normal(32).astype(np.float32)
    want = 2 * x
    LambdaWorks()(x)
    np.testing.assert_allclose(x, want)


# --- the exported errors ---------------------------------------------------------------------
def test_every_error_and_warning_class_is_exported():
    import tilus.errors as errors

    classes = [
        name
        for name, obj in vars(errors).items()
        if isinstance(obj, type)
        and issubclass(obj, BaseException)
        and obj.__module__ == errors.__name__
    ]
    assert "TilusBackendError" in classes
    for name in classes:
        assert getattr(tilus, name, None) is getattr(errors, name), name
        assert name in tilus.__all__, name


# --- bench/interp_speed.py -------------------------------------------------------------------
def test_interp_speed_bench_runs_and_writes_only_where_asked(tmp_path):
    results = REPO / "bench" / "results"
    before = sorted(p.name for p in results.iterdir())
    out = tmp_path / "speed.json"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    r = subprocess.run(
        [sys.executable, str(REPO / "bench" / "interp_speed.py"), "--size", "40", "--no-seeds"]
        + ["--out", str(out)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert '"size": "40x40x40"' in out.read_text()
    assert "tiled_matmul" in r.stdout
    assert sorted(p.name for p in results.iterdir()) == before


# --- the README's set-up facts ----------------------------------------------------------------
def test_readme_says_what_setting_up_needs():
    text = (REPO / "README.md").read_text()
    setup = text[text.index("## Set up") :].split("\n## ", 1)[0]
    for fact in ("Python >= 3.10", "download.pytorch.org/whl/cpu", "TILUS_SEED_KERNELS"):
        assert fact in setup, fact
    assert "../shared/seed_kernels" in setup
    assert "namespace package" in setup  # a clone named tilus beside a script
