"""Vectorized global loads/stores of register runs that are not a power of two long (5 or 6
16-bit elements a thread): each run moves in words that divide it, every element arrives."""

from __future__ import annotations

import numpy as np
import pytest

import tilus
from tests.cuda.conftest import needs_nvrtc
from tests.helpers_cpu_cuda import available, emulate
from tilus import float16

needs_gxx = pytest.mark.skipif(not available(), reason="needs g++ for the CPU emulator")


class Copy(tilus.Script):
    """``y = x + 1`` of a [rows, cols] float16 tile (one block, one warp)."""

    def __init__(self, rows, cols):
        super().__init__()
        self.rows, self.cols = rows, cols

    def __call__(self, x_ptr: ~float16, y_ptr: ~float16):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        shape = [self.rows, self.cols]
        gx = self.global_view(x_ptr, dtype=float16, shape=shape)
        gy = self.global_view(y_ptr, dtype=float16, shape=shape)
        x = self.load_global(gx, offsets=[0, 0], shape=shape)
        self.store_global(gy, x + 1.0, offsets=[0, 0])


@needs_nvrtc
@needs_gxx
@pytest.mark.parametrize("rows, cols", [(12, 5), (32, 6), (64, 12)])
def test_runs_of_any_length_load_and_store_every_element(rows, cols):
    x = np.random.default_rng().standard_normal((rows, cols)).astype(np.float16)
    y = np.full_like(x, np.nan)
    emulate(Copy(rows, cols), (x, y), [1])
    np.testing.assert_array_equal(y, (x.astype(np.float32) + 1).astype(np.float16))
