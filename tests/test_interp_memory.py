"""Interpreter numerics: global-memory rules (out of bounds, dims=, strides), printing, the grid."""

from __future__ import annotations

import numpy as np
import pytest
from helpers_numerics import (  # noqa: F401
    BM,
    BN,
    assert_close,
    nan_like,
    rand_f32,
    rand_i32,
    rng,
)

import tilus
from tilus import float32, int32
from tilus.utils import cdiv

# --------------------------------------------------------------------------------------------
# global memory: out-of-bounds rules, dims=, strides


class Copy(tilus.Script):
    """Reads tiles of [BM, BN] with OOB zeros, adds one, stores with OOB skipped."""

    def __call__(self, m: int32, n: int32, ld: int32, a_ptr: ~float32, c_ptr: ~float32):
        self.attrs.blocks = [cdiv(m, BM), cdiv(n, BN)]
        self.attrs.warps = 1
        om = self.blockIdx.x * BM
        on = self.blockIdx.y * BN
        ga = self.global_view(a_ptr, dtype=float32, shape=[m, n])
        gc = self.global_view(c_ptr, dtype=float32, shape=[m, n], strides=[ld, 1])
        t = self.load_global(ga, offsets=[om, on], shape=[BM, BN])
        self.store_global(gc, t + 1.0, offsets=[om, on])


class PaddedTiles(tilus.Script):
    """Writes whole tiles (including the zero padding of the loads) into a padded output."""

    def __call__(self, m: int32, n: int32, a_ptr: ~float32, c_ptr: ~float32):
        self.attrs.blocks = [cdiv(m, BM), cdiv(n, BN)]
        self.attrs.warps = 1
        om = self.blockIdx.x * BM
        on = self.blockIdx.y * BN
        ga = self.global_view(a_ptr, dtype=float32, shape=[m, n])
        gc = self.global_view(c_ptr, dtype=float32, shape=[cdiv(m, BM) * BM, cdiv(n, BN) * BN])
        t = self.load_global(ga, offsets=[om, on], shape=[BM, BN])
        self.store_global(gc, t + 1.0, offsets=[om, on])


@pytest.mark.parametrize("m, n", [(37, 21), (16, 8), (5, 3), (33, 17)])
def test_oob_loads_read_zero_and_oob_stores_are_skipped(m, n):
    a = rand_f32((m, n))
    ld = n + 5
    c = nan_like((m, ld))
    Copy()(m, n, ld, a, c)
    assert_close(c[:, :n], a.astype(np.float64) + 1)
    assert np.isnan(c[:, n:]).all()  # the padding columns are never written
    pm, pn = cdiv(m, BM) * BM, cdiv(n, BN) * BN
    p = nan_like((pm, pn))
    PaddedTiles()(m, n, a, p)
    want = np.ones((pm, pn))
    want[:m, :n] += a
    assert_close(p, want)


class NegativeOffsets(tilus.Script):
    def __call__(self, a_ptr: ~float32, c_ptr: ~float32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        ga = self.global_view(a_ptr, dtype=float32, shape=[8, 8])
        gc = self.global_view(c_ptr, dtype=float32, shape=[8, 8])
        t = self.load_global(ga, offsets=[-3, 2], shape=[8, 8])  # rows -3..4, cols 2..9
        self.store_global(gc, t, offsets=[0, 0])
        u = self.register_tensor(dtype=float32, shape=[4, 4], init=-1.0)
        self.store_global(gc, u, offsets=[-2, 6])  # only rows 0..1, cols 6..7 land


def test_oob_with_negative_offsets():
    a = rand_f32((8, 8))
    c = nan_like((8, 8))
    NegativeOffsets()(a, c)
    want = np.zeros((8, 8))
    want[3:, :6] = a[:5, 2:]
    want[:2, 6:] = -1.0
    assert_close(c, want)


class Dims3D(tilus.Script):
    def __init__(self, dims):
        super().__init__()
        self.dims = dims

    def __call__(self, b: int32, i: int32, a_ptr: ~float32, c_ptr: ~float32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        ga = self.global_view(a_ptr, dtype=float32, shape=[3, 5, 6])
        gc = self.global_view(c_ptr, dtype=float32, shape=[3, 5, 6])
        if self.dims == [1, 2]:
            t = self.load_global(ga, offsets=[b, 0, 0], shape=[8, 8], dims=[1, 2])
            self.store_global(gc, t * 2.0, offsets=[b, 0, 0], dims=[1, 2])
        elif self.dims == [0, 2]:
            t = self.load_global(ga, offsets=[0, i, 0], shape=[4, 8], dims=[0, 2])
            self.store_global(gc, t * 2.0, offsets=[0, i, 0], dims=[0, 2])
        else:
            t = self.load_global(ga, offsets=[b, 0, 0], shape=[8, 8], dims=[2, 1])
            self.store_global(gc, t * 2.0, offsets=[b, 0, 0], dims=[2, 1])


@pytest.mark.parametrize("dims", [[1, 2], [0, 2], [2, 1]])
def test_load_store_with_dims_on_a_3d_view(dims):
    a = rand_f32((3, 5, 6))
    c = nan_like((3, 5, 6))
    b, i = int(rng.integers(0, 3)), int(rng.integers(0, 5))
    Dims3D(dims)(b, i, a, c)
    want = np.full((3, 5, 6), np.nan)
    if dims == [0, 2]:
        want[:, i, :] = 2 * a[:, i, :]
    else:
        want[b] = 2 * a[b]
    np.testing.assert_allclose(c, want, rtol=1e-6)


class Transposed(tilus.Script):
    def __call__(self, m: int32, n: int32, a_ptr: ~float32, c_ptr: ~float32):
        self.attrs.blocks = [cdiv(m, BM), cdiv(n, BN)]
        self.attrs.warps = 1
        om = self.blockIdx.x * BM
        on = self.blockIdx.y * BN
        at = self.global_view(a_ptr, dtype=float32, shape=[m, n], strides=[1, m])  # a is [n, m]
        gc = self.global_view(c_ptr, dtype=float32, shape=[m, n])
        t = self.load_global(at, offsets=[om, on], shape=[BM, BN])
        self.store_global(gc, t, offsets=[om, on])


def test_global_view_with_explicit_strides():
    m, n = 29, 19
    a = rand_f32((n, m))
    c = nan_like((m, n))
    Transposed()(m, n, a, c)
    np.testing.assert_array_equal(c, a.T)


# --------------------------------------------------------------------------------------------
# printing


class Prints(tilus.Script):
    def __call__(self, m: int32, x: float32, a_ptr: ~int32):
        self.attrs.blocks = [2, 3]
        self.attrs.warps = 2
        g = self.global_view(a_ptr, dtype=int32, shape=[2, 3])
        self.printf("block %d,%d m=%d x=%.3f\n", self.blockIdx.x, self.blockIdx.y, m, x)
        if self.blockIdx.x == 1 and self.blockIdx.y == 2:
            t = self.load_global(g, offsets=[0, 0], shape=[2, 3])
            self.print_tensor("tile t:", t)


def test_printf_once_per_block_and_print_tensor(capsys):
    a = rand_i32((2, 3), 10, 99)
    Prints()(7, 0.25, a)
    out = capsys.readouterr().out
    lines = [ln for ln in out.splitlines() if ln.startswith("block")]
    assert sorted(lines) == sorted(f"block {x},{y} m=7 x=0.250" for x in range(2) for y in range(3))
    assert "tile t:" in out
    tail = out.split("tile t:")[1]
    for v in a.ravel():
        assert str(v) in tail
    assert out.count("tile t:") == 1


class PrintFmt(tilus.Script):
    def __call__(self, a_ptr: ~float32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        g = self.global_view(a_ptr, dtype=float32, shape=[3])
        t = self.load_global(g, offsets=[0], shape=[3])
        self.print_tensor("t", t, fmt="%.3f")


def test_print_tensor_honours_fmt(capsys):
    PrintFmt()(np.array([2.75, -1.5, 3.125], dtype=np.float32))
    out = capsys.readouterr().out
    assert "2.750" in out and "-1.500" in out and "3.125" in out


class ThreadGroupPrintf(tilus.Script):
    def __call__(self, m: int32):
        self.attrs.blocks = 2
        self.attrs.warps = 4
        with self.thread_group(64, 64):
            self.printf("group %d\n", self.blockIdx.x)
        self.printf("all %d\n", m)


def test_printf_inside_a_thread_group_prints_once_per_block(capsys):
    ThreadGroupPrintf()(5)
    out = capsys.readouterr().out.splitlines()
    assert sorted(out) == ["all 5", "all 5", "group 0", "group 1"]


# --------------------------------------------------------------------------------------------
# the grid, and results written in place


class Grid3D(tilus.Script):
    def __call__(self, counts: ~int32, ids: ~int32):
        self.attrs.blocks = [4, 3, 2]
        self.attrs.warps = 1
        gc = self.global_view(counts, dtype=int32, shape=[2, 3, 4])
        gi = self.global_view(ids, dtype=int32, shape=[2, 3, 4])
        x = self.blockIdx.x
        y = self.blockIdx.y
        z = self.blockIdx.z
        c = self.load_global(gc, offsets=[z, y, x], shape=[1, 1, 1])
        self.store_global(gc, c + 1, offsets=[z, y, x])
        i = self.register_tensor(dtype=int32, shape=[1, 1, 1], init=x + 10 * y + 100 * z)
        self.store_global(gi, i, offsets=[z, y, x])


def test_every_block_of_a_3d_grid_runs_once():
    counts = rand_i32((2, 3, 4))
    before = counts.copy()
    ids = np.full((2, 3, 4), -1, dtype=np.int32)
    Grid3D()(counts, ids)
    np.testing.assert_array_equal(counts, before + 1)
    z, y, x = np.indices((2, 3, 4))
    np.testing.assert_array_equal(ids, x + 10 * y + 100 * z)


class UnpackBlockIdx(tilus.Script):
    def __call__(self, ids: ~int32):
        self.attrs.blocks = [2, 2, 2]
        self.attrs.warps = 1
        gi = self.global_view(ids, dtype=int32, shape=[2, 2, 2])
        x, y, z = self.blockIdx
        i = self.register_tensor(dtype=int32, shape=[1, 1, 1], init=x + 10 * y + 100 * z)
        self.store_global(gi, i, offsets=[z, y, x])


def test_block_idx_unpacks_into_x_y_z():
    ids = np.full((2, 2, 2), -1, dtype=np.int32)
    UnpackBlockIdx()(ids)
    z, y, x = np.indices((2, 2, 2))
    np.testing.assert_array_equal(ids, x + 10 * y + 100 * z)


def test_outputs_are_written_in_place_into_the_callers_array():
    m, n = 20, 9
    a = rand_f32((m, n))
    big = nan_like((m + 4, n))
    view = big[2 : 2 + m]  # a contiguous slice of a bigger array
    Copy()(m, n, n, a, view)
    assert_close(big[2 : 2 + m], a.astype(np.float64) + 1)
    assert np.isnan(big[:2]).all() and np.isnan(big[2 + m :]).all()
