"""Global views' row strides in the generated CUDA: folded to one literal when the shape is
static, so the vector path tests the (launch-checked) base pointer once, not each run."""

from __future__ import annotations

import pytest

import tilus
from tests.cuda.conftest import needs_nvrtc
from tilus import float16, int32


class Double(tilus.Script):
    """``y = 2 x`` over a [m, rows, cols] fp16 view (``cols`` static, ``rows`` static or not)."""

    def __init__(self, rows=4, cols=64):
        super().__init__()
        self.rows, self.cols = rows, cols

    def __call__(self, m: int32, r: int32, x_ptr: ~float16, y_ptr: ~float16):
        self.attrs.blocks = m
        self.attrs.warps = 1
        shape = [m, r if self.rows is None else self.rows, self.cols]
        gx = self.global_view(x_ptr, dtype=float16, shape=shape)
        gy = self.global_view(y_ptr, dtype=float16, shape=shape)
        b = self.blockIdx.x
        x = self.load_global(gx, offsets=[b, 0, 0], shape=[1, 4, self.cols])
        self.store_global(gy, x + x, offsets=[b, 0, 0])


def _source(kernel):
    return tilus.compile(kernel, 8, 4, ~float16, ~float16).source


@needs_nvrtc
def test_static_strides_are_literals_and_no_run_tests_its_alignment():
    src = _source(Double(4, 64))
    assert "(int64_t)(256)" in src and "(int64_t)(64)" in src
    assert "*((uint4*)" in src  # 16-byte accesses
    assert "& 15) == 0" not in src  # the base pointer's alignment is checked at launch


@needs_nvrtc
def test_a_runtime_row_count_keeps_the_product():
    src = _source(Double(None, 64))
    assert "64 * (int64_t)(r)" in src
    assert "*((uint4*)" in src


@pytest.mark.parametrize("rows", [4, None])
def test_both_forms_double_on_the_interpreter(rows):
    import numpy as np

    x = np.random.default_rng().standard_normal((8, 4, 64)).astype(np.float16)
    y = np.full_like(x, np.nan)
    Double(rows, 64)(8, 4, x, y)
    np.testing.assert_array_equal(y, x + x)
