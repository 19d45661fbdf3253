"""``reshape_shared`` in the CUDA backend: a view of the same bytes when the rows stay whole
(two stacked halves read as one tile, a ring slot's leading dims merged), checked on the
interpreter and, through the CPU emulator, in the generated code; a reshape that would move
bytes (rows of another width) refused at its line."""

from __future__ import annotations

import numpy as np
import pytest

import tilus
from tests.cuda.conftest import needs_nvrtc
from tests.helpers_cpu_cuda import available, emulate
from tilus import float32
from tilus.testing import marker_line

needs_gxx = pytest.mark.skipif(not available(), reason="needs g++ for the CPU emulator")


class Stacked(tilus.Script):
    """x [2, 3, 8, 32] stored into shared s of that shape, then slot 1 read back through
    ``reshape_shared(s[1], [24, 32])`` and all of s as [48, 32]: y0 = x[1] as [24, 32],
    y1 = x as [48, 32]; ``bad``: slot 1 read as rows of 64 instead (refused on CUDA)."""

    def __init__(self, bad=False):
        super().__init__()
        self.bad = bad

    def __call__(self, x_ptr: ~float32, y0_ptr: ~float32, y1_ptr: ~float32):
        self.attrs.blocks = 1
        self.attrs.warps = 4
        gx = self.global_view(x_ptr, dtype=float32, shape=[2, 3, 8, 32])
        g0 = self.global_view(y0_ptr, dtype=float32, shape=[24, 32])
        g1 = self.global_view(y1_ptr, dtype=float32, shape=[48, 32])
        s = self.shared_tensor(dtype=float32, shape=[2, 3, 8, 32])
        self.store_shared(s, self.load_global(gx, offsets=[0, 0, 0, 0], shape=[2, 3, 8, 32]))
        self.sync()
        if self.bad:
            wide = self.reshape_shared(s[1], [12, 64])  # CHECK:wide
            self.store_global(g0, self.reshape(self.load_shared(wide), [24, 32]), offsets=[0, 0])
        else:
            slot = self.reshape_shared(s[1], [24, 32])
            self.store_global(g0, self.load_shared(slot), offsets=[0, 0])
        whole = self.reshape_shared(s, [48, 32])
        self.store_global(g1, self.load_shared(whole), offsets=[0, 0])


def _io():
    x = np.random.default_rng().standard_normal((2, 3, 8, 32)).astype(np.float32)
    return x, np.full((24, 32), np.nan, np.float32), np.full((48, 32), np.nan, np.float32)


def test_interpreter():
    x, y0, y1 = _io()
    with tilus.option.scoped(interpret=True):
        Stacked()(x, y0, y1)
    np.testing.assert_array_equal(y0, x[1].reshape(24, 32))
    np.testing.assert_array_equal(y1, x.reshape(48, 32))


@needs_nvrtc
@needs_gxx
def test_cuda_code_on_the_cpu_emulator():
    x, y0, y1 = _io()
    ck = emulate(Stacked(), (x, y0, y1), [1])
    np.testing.assert_array_equal(y0, x[1].reshape(24, 32))
    np.testing.assert_array_equal(y1, x.reshape(48, 32))
    assert "// reshaped view [24, 32]" in ck.source  # an alias of the slot's offset, no copy


@needs_nvrtc
def test_rows_of_another_width_are_refused_at_the_line():
    x, y0, y1 = _io()
    with pytest.raises(tilus.TilusCompileError) as info:
        tilus.compile(Stacked(bad=True), x, y0, y1)
    assert "rows change width" in str(info.value)
    assert info.value.loc.line == marker_line(Stacked, "CHECK:wide")
