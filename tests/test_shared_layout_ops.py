"""Shared layouts: ``SharedLayout.create`` with mode strides and any ``Swizzle``,
``count_size``, ``as_numpy_grid``, ``shared_reshape``/``shared_unsqueeze``; a general layout
on the interpreter, a hardware one honoured and a non-hardware one refused by CUDA."""

from __future__ import annotations

import numpy as np
import pytest

import tilus
from tests.helpers_errors import err_line
from tilus import float16, float32
from tilus.backends.cuda.layout import infer_layouts
from tilus.errors import LayoutOperationError
from tilus.ir.layout import (
    SharedLayout,
    Swizzle,
    shared_column_major,
    shared_reshape,
    shared_row_major,
    shared_row_major_swizzle,
    shared_unsqueeze,
)


def test_create_with_mode_strides():
    # rows split 4 x 1, columns 2 x 3: column c = 3a + b at a * 12 + b * 4 + row
    lay = SharedLayout.create([4, 6], [4, 2, 3], [1, 12, 4])
    want = np.array([[r + 12 * (c // 3) + 4 * (c % 3) for c in range(6)] for r in range(4)])
    np.testing.assert_array_equal(lay.as_numpy_grid(), want)
    assert lay.count_size() == 24 and lay.general
    padded = SharedLayout.create([4, 4], [4, 4], [8, 1])  # rows padded to 8 elements
    assert padded.count_size() == 28
    assert padded.as_numpy_grid()[3, 3] == 27
    plain = SharedLayout.create([4, 6], [2, 2, 6], [12, 6, 1])  # row-major after all
    assert plain == shared_row_major(4, 6) and not plain.general


@pytest.mark.parametrize(
    "shape, modes, strides",
    [([4, 6], [4, 5], [5, 1]), ([4, 6], [4, 6], [1]), ([4, 6], [2, 6, 2], [1, 2, 12])],
)
def test_create_refuses_modes_that_do_not_split_the_shape(shape, modes, strides):
    with pytest.raises(LayoutOperationError, match="do not split"):
        SharedLayout.create(shape, modes, strides)


def test_grids_of_the_builtin_layouts():
    np.testing.assert_array_equal(
        shared_row_major(3, 5).as_numpy_grid(), np.arange(15).reshape(3, 5)
    )
    np.testing.assert_array_equal(
        shared_column_major(3, 5).as_numpy_grid(), np.arange(15).reshape(5, 3).T
    )
    grid = shared_row_major_swizzle([8, 64], 2).as_numpy_grid()
    # row 1 (128 bytes): its 16-byte chunk k is stored at chunk k ^ 1
    np.testing.assert_array_equal(grid[1, :10], [72, 73, 74, 75, 76, 77, 78, 79, 64, 65])
    assert shared_row_major_swizzle([8, 64], 2).count_size() == 512


def test_a_hardware_swizzle_given_as_swizzle_is_the_hardware_layout():
    hw = shared_row_major_swizzle([8, 64], 2)
    assert SharedLayout.create([8, 64], [8, 64], [64, 1], Swizzle(3, 3, 3), 2) == hw
    assert shared_row_major(8, 64, dtype_nbytes=2).with_swizzle(Swizzle(3, 3, 3)) == hw
    assert shared_row_major(8, 32, dtype_nbytes=2).with_swizzle(Swizzle(3, 2, 3)).swizzle == 64


def test_an_arbitrary_swizzle_xors_the_element_offset():
    sw = Swizzle(2, 2, 4)  # bits 6..7 of the element offset into bits 2..3
    lay = shared_row_major(16, 16).with_swizzle(sw)
    assert lay.general
    lin = np.arange(256).reshape(16, 16)
    want = lin ^ (((lin >> 6) & 3) << 2)
    np.testing.assert_array_equal(lay.as_numpy_grid(), want)
    assert lay.as_numpy_grid()[4, 0] == 68 and lay.count_size() == 256
    assert sorted(lay.as_numpy_grid().ravel()) == list(range(256))


def test_shared_reshape():
    np.testing.assert_array_equal(
        shared_reshape(shared_row_major(4, 6), [2, 12]).as_numpy_grid(),
        np.arange(24).reshape(2, 12),
    )
    sw = shared_row_major_swizzle([2, 8, 64], 2)
    flat = shared_reshape(sw, [16, 64])
    np.testing.assert_array_equal(flat.as_numpy_grid(), sw.as_numpy_grid().reshape(16, 64))
    wide = shared_row_major_swizzle([8, 128], 2)  # two 128-byte column blocks
    np.testing.assert_array_equal(
        shared_reshape(shared_unsqueeze(wide, 0), [8, 128]).as_numpy_grid(), wide.as_numpy_grid()
    )
    for bad, shape in [
        (shared_row_major(4, 6), [5, 5]),
        (sw, [8, 128]),  # a new last dim changes what the swizzle maps
        (shared_column_major(4, 6), [6, 4]),
    ]:
        with pytest.raises(LayoutOperationError):
            shared_reshape(bad, shape)


def test_shared_unsqueeze():
    col = shared_column_major(4, 6)
    u = shared_unsqueeze(col, 1)
    assert u.shape == (4, 1, 6)
    np.testing.assert_array_equal(u.as_numpy_grid()[:, 0, :], col.as_numpy_grid())
    g = SharedLayout.create([4, 6], [4, 2, 3], [1, 12, 4])
    ug = shared_unsqueeze(g, [0, 2])
    assert ug.shape == (1, 4, 1, 6)
    np.testing.assert_array_equal(ug.as_numpy_grid()[0, :, 0, :], g.as_numpy_grid())
    assert shared_unsqueeze(shared_row_major(3, 5), -1).shape == (3, 5, 1)


# --- on a kernel -------------------------------------------------------------------------------

ODD = shared_row_major(16, 32).with_swizzle(Swizzle(1, 3, 5))  # no hardware swizzle is this


class SharedRoundTrip(tilus.Script):
    def __init__(self, layout):
        super().__init__()
        self.layout = layout

    def __call__(self, x_ptr: ~float32, y_ptr: ~float16):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        gx = self.global_view(x_ptr, dtype=float32, shape=[13, 29])
        gy = self.global_view(y_ptr, dtype=float16, shape=[13, 29])
        s = self.shared_tensor(dtype=float16, shape=[16, 32], layout=self.layout)  # ERR
        self.store_shared(
            s, self.cast(self.load_global(gx, offsets=[0, 0], shape=[16, 32]), float16)
        )
        self.sync()
        self.store_global(gy, self.load_shared(s) * 2.0, offsets=[0, 0])


@pytest.mark.parametrize(
    "layout",
    [ODD, SharedLayout.create([16, 32], [16, 2, 16], [16, 256, 1])],
    ids=["xor", "strided"],
)
def test_a_general_layout_runs_on_the_interpreter(layout):
    x = np.random.default_rng().standard_normal((13, 29)).astype(np.float32)
    y = np.full((13, 29), np.nan, np.float16)
    with tilus.option.scoped(interpret=True):
        SharedRoundTrip(layout)(x, y)
    np.testing.assert_array_equal(y, x.astype(np.float16) * np.float16(2))


def test_cuda_honours_a_hardware_swizzle_given_as_swizzle():
    lay = SharedLayout.create([16, 32], [16, 32], [32, 1], Swizzle(3, 2, 3))  # 64B for f16
    k = SharedRoundTrip(lay)
    plan = infer_layouts(k.program(k.configs[0], {}).fn)
    (view,) = [v for t, v in plan.shared.items() if t.name == "s"]
    assert view.layout.swizzle == 64 and not view.layout.general


def test_cuda_refuses_a_non_hardware_swizzle_at_its_line():
    k = SharedRoundTrip(ODD)
    with pytest.raises(tilus.TilusCompileError, match="no hardware swizzle matches") as e:
        infer_layouts(k.program(k.configs[0], {}).fn)
    assert e.value.loc.line == err_line(SharedRoundTrip)
