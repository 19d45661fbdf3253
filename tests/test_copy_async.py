"""copy_async (cp.async): interpreter semantics and checks, refusals, sm_90a build, GPU check."""

from __future__ import annotations

import numpy as np
import pytest

import tilus
from tests.cuda.conftest import needs_nvrtc
from tests.helpers_errors import err_line, expect_error
from tilus import float16, float32, int32
from tilus.errors import TilusRuntimeError
from tilus.utils import cdiv


class TwoStage(tilus.Script):
    """Each block copies two [bm, bn] tiles (rows r and r + bm) through shared memory in two
    commit groups and writes them out; out-of-bounds parts of the tiles read zero."""

    def __init__(self, bm=16, bn=64, dtype=float16, evict=None):
        super().__init__()
        self.bm, self.bn, self.dtype, self.evict = bm, bn, dtype, evict

    def __call__(self, m: int32, n: int32, x_ptr: ~float16, y_ptr: ~float16):
        self.attrs.blocks = [cdiv(m, 2 * self.bm), cdiv(n, self.bn)]
        self.attrs.warps = 4
        r = self.blockIdx.x * 2 * self.bm
        c = self.blockIdx.y * self.bn
        gx = self.global_view(x_ptr, dtype=self.dtype, shape=[m, n])
        gy = self.global_view(y_ptr, dtype=self.dtype, shape=[m, n])
        s = self.shared_tensor(dtype=self.dtype, shape=[2, self.bm, self.bn])
        self.copy_async(gx, s[0], offsets=[r, c], evict=self.evict)
        self.copy_async_commit_group()
        self.copy_async(gx, s[1], offsets=[r + self.bm, c])
        self.copy_async_commit_group()
        self.copy_async_wait_group(1)
        self.sync()
        a = self.load_shared(s[0])
        self.store_global(gy, a, offsets=[r, c])
        self.copy_async_wait_all()
        self.sync()
        b = self.load_shared(s[1])
        self.store_global(gy, b, offsets=[r + self.bm, c])


def _x(m, n, device=None):
    x = np.random.default_rng().standard_normal((m, n)).astype(np.float16)
    y = np.full((m, n), np.nan, np.float16)
    if device is None:
        return x, y
    import torch

    return torch.from_numpy(x).to(device), torch.from_numpy(y).to(device)


def test_two_stages_on_the_interpreter():
    m, n = 45, 100  # neither a multiple of the tiles
    x, y = _x(m, n)
    TwoStage()(m, n, x, y)
    np.testing.assert_array_equal(y, x)
    x, y = _x(m, n)
    TwoStage(bm=8, bn=8, evict="evict_first")(m, n, x, y)  # 16-byte rows, the L2 hint
    np.testing.assert_array_equal(y, x)


class ZeroFill(tilus.Script):
    def __call__(self, n: int32, x_ptr: ~float32, y_ptr: ~float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 1
        s = self.shared_tensor(dtype=float32, shape=[64])
        gx = self.global_view(x_ptr, dtype=float32, shape=[n])
        self.copy_async(gx, s, offsets=[n - 40])
        self.copy_async_wait_all()
        t = self.load_shared(s)
        self.store_global(self.global_view(y_ptr, dtype=float32, shape=[64]), t, offsets=[0])


def test_out_of_bounds_reads_zero():
    x = np.random.default_rng().standard_normal(50).astype(np.float32)
    y = np.full(64, np.nan, np.float32)
    ZeroFill()(50, x, y)
    np.testing.assert_array_equal(y[:40], x[10:])
    np.testing.assert_array_equal(y[40:], 0)


class ReadBeforeWait(tilus.Script):
    def __call__(self, x_ptr: ~float32, y_ptr: ~float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 1
        s = self.shared_tensor(dtype=float32, shape=[32])
        gx = self.global_view(x_ptr, dtype=float32, shape=[32])
        self.copy_async(gx, s, offsets=[0])
        self.copy_async_commit_group()
        t = self.load_shared(s)  # ERR
        self.copy_async_wait_group(0)
        self.store_global(self.global_view(y_ptr, dtype=float32, shape=[32]), t, offsets=[0])


class WaitTooLittle(tilus.Script):
    def __call__(self, x_ptr: ~float32, y_ptr: ~float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 1
        s = self.shared_tensor(dtype=float32, shape=[2, 32])
        gx = self.global_view(x_ptr, dtype=float32, shape=[64])
        self.copy_async(gx, s[0], offsets=[0])
        self.copy_async_commit_group()
        self.copy_async(gx, s[1], offsets=[32])
        self.copy_async_commit_group()
        self.copy_async_wait_group(1)
        t = self.load_shared(s[0])
        u = self.load_shared(s[1])  # ERR
        self.copy_async_wait_all()
        gy = self.global_view(y_ptr, dtype=float32, shape=[64])
        self.store_global(gy, t, offsets=[0])
        self.store_global(gy, u, offsets=[32])


class NeverWaited(tilus.Script):
    def __call__(self, x_ptr: ~float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 1
        s = self.shared_tensor(dtype=float32, shape=[32])
        self.copy_async(self.global_view(x_ptr, dtype=float32, shape=[32]), s, offsets=[0])  # ERR


class Unchecked(tilus.Script):
    def __call__(self, n: int32, x_ptr: ~float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 1
        s = self.shared_tensor(dtype=float32, shape=[32])
        gx = self.global_view(x_ptr, dtype=float32, shape=[n])
        self.copy_async(gx, s, offsets=[n - 16], check_bounds=False)  # ERR
        self.copy_async_wait_all()


def test_protocol_errors_name_the_line():
    x = np.ones(64, np.float32)
    y = np.zeros(64, np.float32)
    for k, frag in (
        (ReadBeforeWait, "has not been waited for"),
        (WaitTooLittle, "has not been waited for"),
        (NeverWaited, "never waited for"),
    ):
        with pytest.raises(TilusRuntimeError, match=frag) as info:
            k()(x, y) if k is not NeverWaited else k()(x)
        assert info.value.loc.line == err_line(k)
    with pytest.raises(TilusRuntimeError, match="check_bounds=False") as info:
        Unchecked()(40, x)
    assert info.value.loc.line == err_line(Unchecked)


class OddRow(tilus.Script):
    def __call__(self, x_ptr: ~float16):
        self.attrs.blocks = [1]
        self.attrs.warps = 1
        s = self.shared_tensor(dtype=float16, shape=[8, 3])
        gx = self.global_view(x_ptr, dtype=float16, shape=[8, 3])
        self.copy_async(gx, s, offsets=[0, 0])  # ERR
        self.copy_async_wait_all()


class Columns(tilus.Script):
    def __call__(self, x_ptr: ~float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 1
        s = self.shared_tensor(dtype=float32, shape=[8])
        gx = self.global_view(x_ptr, dtype=float32, shape=[8, 8])
        self.copy_async(gx, s, offsets=[0, 0], dims=[0])  # ERR
        self.copy_async_wait_all()


class BadEvict(tilus.Script):
    def __call__(self, x_ptr: ~float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 1
        s = self.shared_tensor(dtype=float32, shape=[8])
        gx = self.global_view(x_ptr, dtype=float32, shape=[8])
        self.copy_async(gx, s, offsets=[0], evict="evict_last")  # ERR
        self.copy_async_wait_all()


class Strided(tilus.Script):
    def __call__(self, x_ptr: ~float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 1
        s = self.shared_tensor(dtype=float32, shape=[8])
        gx = self.global_view(x_ptr, dtype=float32, shape=[8], strides=[2])
        self.copy_async(gx, s, offsets=[0])  # ERR
        self.copy_async_wait_all()


def test_refusals_name_the_line():
    expect_error(OddRow, fragment="4, 8 or 16 bytes per thread.*6 bytes")
    expect_error(Columns, fragment="innermost dim")
    expect_error(BadEvict, fragment="evict must be")


@needs_nvrtc
def test_strided_rows_are_refused_by_the_cuda_backend():
    with pytest.raises(tilus.TilusCompileError, match="innermost stride is 1") as info:
        tilus.compile(Strided(), None)
    assert info.value.loc.line == err_line(Strided)


@needs_nvrtc
def test_builds_for_sm90a_with_ldgsts():
    from tilus.runtime.sass import sass_opcodes

    for kw in ({}, {"bm": 8, "bn": 8, "evict": "evict_first"}, {"dtype": float16, "bn": 2}):
        ck = tilus.compile(TwoStage(**kw), 45, 100, None, None, target="sm_90a")
        ops = sass_opcodes(ck.sass())
        assert ops.get("LDGSTS"), ops
        assert ops.get("LDGDEPBAR") and ops.get("DEPBAR"), ops
        assert not ops.get("LDL") and not ops.get("STL")
    assert (
        "createpolicy"
        in tilus.compile(TwoStage(bm=8, bn=8, evict="evict_first"), 45, 100, None, None).source
    )


@pytest.mark.gpu
def test_gpu_matches_the_interpreter():
    from tests.cuda.conftest import _gpu_available

    if not _gpu_available():
        pytest.skip("needs torch with a Hopper GPU")
    for kw, (m, n) in (({}, (77, 130)), ({"bm": 8, "bn": 8, "evict": "evict_first"}, (45, 19))):
        x, y = _x(m, n, "cuda")
        TwoStage(**kw)(m, n, x, y)
        xi, yi = _x(m, n)
        xi[...] = x.cpu().numpy()
        TwoStage(**kw)(m, n, xi, yi)
        np.testing.assert_array_equal(y.cpu().numpy(), yi)
        np.testing.assert_array_equal(yi, xi)


class NoSyncAfterWait(tilus.Script):
    """Each thread's chunks are its own after the wait: a single thread reading the whole
    tile needs the group's sync() first."""

    def __init__(self, synced=False):
        super().__init__()
        self.synced = synced

    def __call__(self, x_ptr: ~float32, y_ptr: ~float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 1
        s = self.shared_tensor(dtype=float32, shape=[64])
        self.copy_async(self.global_view(x_ptr, dtype=float32, shape=[64]), s, offsets=[0])
        self.copy_async_wait_all()
        if self.synced:
            self.sync()
        with self.single_thread():
            t = self.load_shared(s)  # ERR
            self.store_global(self.global_view(y_ptr, dtype=float32, shape=[64]), t, offsets=[0])


def test_the_landed_copy_needs_a_sync_before_other_threads_read_it():
    x = np.random.default_rng().standard_normal(64).astype(np.float32)
    y = np.zeros(64, np.float32)
    with pytest.raises(TilusRuntimeError, match="race on .*copy_async") as info:
        NoSyncAfterWait()(x, y)
    assert info.value.loc.line == err_line(NoSyncAfterWait)
    NoSyncAfterWait(synced=True)(x, y)
    np.testing.assert_array_equal(y, x)
