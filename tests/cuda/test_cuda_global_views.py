"""Global views sliced by an integer index and transposed, on the CUDA emulator and the
interpreter (no data moves: the view's pointer, extents and strides change)."""

from __future__ import annotations

import numpy as np
import pytest

import tilus
from tests.cuda.conftest import needs_nvrtc
from tests.helpers_cpu_cuda import available, emulate
from tilus import float32, int32

needs_gxx = pytest.mark.skipif(not available(), reason="needs g++ for the CPU emulator")


class Views(tilus.Script):
    """``y[b] = x[b].T * 2`` for a batch index ``b`` (runtime), plus ``x[b, :, col]``; a
    batch index past the end leaves the outputs alone."""

    def __call__(self, x_ptr: ~float32, y_ptr: ~float32, c_ptr: ~float32, b: int32, col: int32):
        self.attrs.blocks = 1
        self.attrs.warps = 2
        gx = self.global_view(x_ptr, dtype=float32, shape=[3, 13, 11])
        gy = self.global_view(y_ptr, dtype=float32, shape=[3, 11, 13])
        xt = self.transpose(gx[b])  # [11, 13], strides (1, 11)
        t = self.load_global(xt, offsets=[0, 0], shape=[16, 16])
        self.store_global(gy[b], t * 2.0, offsets=[0, 0])
        gc = self.global_view(c_ptr, dtype=float32, shape=[3, 13])
        column = self.load_global(gx[b, :, col], offsets=[0], shape=[16])
        self.store_global(gc[b], column, offsets=[0])


def _check(run, b, col):
    rng = np.random.default_rng()
    x = rng.standard_normal((3, 13, 11)).astype(np.float32)
    y = np.full((3, 11, 13), np.nan, np.float32)
    c = np.full((3, 13), np.nan, np.float32)
    run(x, y, c, b, col)
    wy, wc = np.full_like(y, np.nan), np.full_like(c, np.nan)
    if b < 3:
        wy[b] = x[b].T * 2
        wc[b] = x[b, :, col]
    np.testing.assert_array_equal(y, wy)
    np.testing.assert_array_equal(c, wc)


def test_interpreter():
    with tilus.option.scoped(interpret=True):
        _check(Views(), 1, 4)


@needs_nvrtc
@needs_gxx
@pytest.mark.parametrize("b, col", [(0, 0), (2, 10), (3, 2)])
def test_cuda_emulator(b, col):
    _check(lambda *a: emulate(Views(), list(a), [1]), b, col)


class AsyncFromTransposed(tilus.Script):
    def __call__(self, x_ptr: ~float32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        gx = self.global_view(x_ptr, dtype=float32, shape=[16, 16])
        s = self.shared_tensor(dtype=float32, shape=[16, 16])
        self.copy_async(self.transpose(gx), s, offsets=[0, 0])  # ERR
        self.copy_async_wait_all()


@needs_nvrtc
def test_copy_async_from_a_strided_view_is_refused():
    from tests.helpers_errors import err_line

    with pytest.raises(tilus.TilusCompileError, match="innermost stride is 1") as info:
        tilus.compile(AsyncFromTransposed(), None)
    assert info.value.loc.line == err_line(AsyncFromTransposed)
