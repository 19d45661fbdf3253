"""Vectorized global loads/stores of register runs that are not a power of two long (5 or 6
16-bit elements a thread): each run moves in words that divide it, every element arrives."""

from __future__ import annotations

import numpy as np
import pytest

import tilus
from tests.cuda.conftest import needs_nvrtc
from tests.helpers_cpu_cuda import available, emulate
from tilus import float16, int32
from tilus.ir.function import UNALIGNED_ARG
from tilus.utils import cdiv

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


class Shifted(tilus.Script):
    """``y[:, k:k + 64] = x[:, k:k + 64] + 1`` of rows of 256 (a runtime column offset ``k``,
    divisibility stated with ``assume`` or not)."""

    def __init__(self, assume):
        super().__init__()
        self.assume_k = assume

    def __call__(self, m: int32, k: int32, x_ptr: ~float16, y_ptr: ~float16):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        if self.assume_k:
            self.assume(k % 8 == 0)
        gx = self.global_view(x_ptr, dtype=float16, shape=[m, 256])
        gy = self.global_view(y_ptr, dtype=float16, shape=[m, 256])
        x = self.load_global(gx, offsets=[0, k], shape=[8, 64])
        self.store_global(gy, x + 1.0, offsets=[0, k])


def _source(kernel, const_args=None):
    from tilus.backends.cuda.codegen.kernel import generate

    cfg = kernel.configs[0] if kernel.configs else {}
    return generate(kernel.program(cfg, const_args or {})).source


def test_base_pointer_alignment_needs_a_known_multiple_offset():
    """With ``assume(k % 8 == 0)`` (and a compile-time row stride) a 16-byte run's alignment
    is checked on the view's base pointer alone; without it, on each run's address."""
    any_alignment = {UNALIGNED_ARG: True}  # the build for pointers of any alignment
    with_fact, without = (
        _source(Shifted(True), any_alignment),
        _source(Shifted(False), any_alignment),
    )
    assert "(((uint64_t)gx) & 15) == 0" in with_fact and "(((uint64_t)gy) & 15) == 0" in with_fact
    assert "(uint64_t)gx)" not in without and "(uint64_t)gy)" not in without
    assert "(((uint64_t)tl_vp" in without
    # the usual build: the pointers are 16-byte aligned (checked at launch), so with the fact
    # no address is tested at all; without it the runs still test their own addresses
    assert "& 15" not in _source(Shifted(True))
    assert "(((uint64_t)tl_vp" in _source(Shifted(False))


@needs_nvrtc
@needs_gxx
@pytest.mark.parametrize("k", [0, 8, 3])
def test_shifted_runs_on_the_emulator(k):
    """Both forms are right at aligned offsets; the unaligned one (k = 3, no assume) takes the
    element-wise path and is right too."""
    m = 6  # rows 6 and 7 of the tile are past the view: not stored
    x = np.random.default_rng().standard_normal((m, 256)).astype(np.float16)
    for kernel in ([Shifted(True)] if k % 8 == 0 else []) + [Shifted(False)]:
        y = np.full_like(x, np.nan)
        emulate(kernel, (m, k, x, y), [1])
        want = np.full_like(x, np.nan)
        want[:, k : k + 64] = x[:, k : k + 64] + np.float16(1)
        assert np.array_equal(np.isnan(y), np.isnan(want))
        assert np.array_equal(y[:, k : k + 64], want[:, k : k + 64])


class Bump(tilus.Script):
    """``y = x + 1`` of [m, n] float16 rows (``n`` a multiple of 8 at compile time, narrower
    than the [rows, 64] tile: its last runs are wholly past the row), loaded directly or
    through shared memory with ``copy_async``."""

    def __init__(self, rows, via_shared):
        super().__init__()
        self.rows, self.via_shared = rows, via_shared

    def __call__(self, m: int32, n: int, x_ptr: ~float16, y_ptr: ~float16):
        self.attrs.blocks = cdiv(m, self.rows)
        self.attrs.warps = 1
        gx = self.global_view(x_ptr, dtype=float16, shape=[m, n])
        gy = self.global_view(y_ptr, dtype=float16, shape=[m, n])
        row: int32 = self.blockIdx.x * self.rows
        if self.via_shared:
            s = self.shared_tensor(dtype=float16, shape=[self.rows, 64])
            self.copy_async(gx, s, offsets=[row, 0])
            self.copy_async_commit_group()
            self.copy_async_wait_all()
            self.sync()
            x = self.load_shared(s)
        else:
            x = self.load_global(gx, offsets=[row, 0], shape=[self.rows, 64])
        self.store_global(gy, x + 1.0, offsets=[row, 0])


def test_whole_runs_test_the_base_alignment_once():
    """Runs that are wholly in or out of a row test the base pointer's alignment once per
    access, not once per run, and check no element's bounds (the slow path moves whole runs);
    in the build for pointers of any alignment (the usual build tests nothing)."""
    for via_shared in (False, True):
        kernel = Bump(8, via_shared)
        src = generate_for(kernel, 40)
        assert src.count("(((uint64_t)gx) & 15") == 1, via_shared
        assert src.count("(((uint64_t)gy) & 15) == 0") == 1
        assert "tl_st_global_if" not in src  # no element-wise predicated store


def generate_for(kernel, n):
    from tilus.backends.cuda.codegen.kernel import generate

    const_args, _ = kernel.bind((6, n, None, None), {})
    return generate(kernel.program({}, {**const_args, UNALIGNED_ARG: True})).source


@needs_nvrtc
@needs_gxx
@pytest.mark.parametrize("rows", [4, 8])  # 8 and 16 registers a thread: straight code, a loop
@pytest.mark.parametrize("via_shared", [False, True])
@pytest.mark.parametrize("shift", [0, 1])  # 1: both pointers 2 bytes past 16-byte alignment
def test_whole_runs_on_both_paths_on_the_emulator(rows, via_shared, shift):
    m, n = 6, 40  # a ragged last row block, and rows shorter than the tile
    rng = np.random.default_rng()
    xb = rng.standard_normal(m * n + 8).astype(np.float16)
    yb = np.full(m * n + 8, np.nan, dtype=np.float16)
    x, y = xb[shift : shift + m * n].reshape(m, n), yb[shift : shift + m * n].reshape(m, n)
    assert (x.ctypes.data % 16 == 0) == (shift == 0)
    emulate(Bump(rows, via_shared), (m, n, x, y), [-(-m // rows)])
    np.testing.assert_array_equal(y, (x.astype(np.float32) + 1).astype(np.float16))
    rest = np.concatenate([yb[:shift], yb[shift + m * n :]])
    assert np.isnan(rest).all()  # nothing written outside the view
