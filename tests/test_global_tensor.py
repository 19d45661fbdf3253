"""global_tensor: a workspace shared by the blocks, the requires_clean exit check, refusals."""

from __future__ import annotations

import numpy as np
import pytest

import tilus
from tests.cuda.conftest import needs_nvrtc
from tests.helpers_errors import err_line, expect_error
from tilus import float32, int32
from tilus.errors import TilusRuntimeError


class LastBlockSum(tilus.Script):
    """Column sums of x: every block adds its row into a scratch accumulator; the block that
    counts last writes the sum out and, with ``clean``, zeroes the scratch again."""

    def __init__(self, clean=True):
        super().__init__()
        self.clean = clean

    def __call__(self, nb: int32, x_ptr: ~float32, y_ptr: ~float32):
        self.attrs.blocks = [nb]
        self.attrs.warps = 1
        gx = self.global_view(x_ptr, dtype=float32, shape=[nb, 32])
        x = self.load_global(gx, offsets=[self.blockIdx.x, 0], shape=[32], dims=[1])
        acc = self.global_tensor(float32, [32], requires_clean=True)  # ERR
        cnt = self.global_tensor(int32, [1], requires_clean=True)
        self.atomic.global_add(acc, x)
        one = self.register_tensor(dtype=int32, shape=[1], init=1)
        old = self.atomic.global_add(cnt, one, sem="acq_rel")
        if old[0] == nb - 1:
            total = self.load_global(acc, offsets=[0], shape=[32])
            self.store_global(self.global_view(y_ptr, dtype=float32, shape=[32]), total,
                              offsets=[0])  # fmt: skip
            if self.clean:
                self.store_global(acc, self.register_tensor(dtype=float32, shape=[32], init=0),
                                  offsets=[0])  # fmt: skip
                self.store_global(cnt, self.register_tensor(dtype=int32, shape=[1], init=0),
                                  offsets=[0])  # fmt: skip


def test_blocks_share_the_scratch():
    nb = 7
    x = np.random.default_rng().integers(-9, 9, (nb, 32)).astype(np.float32)
    for _ in range(2):  # the second launch finds the scratch clean
        y = np.full(32, np.nan, np.float32)
        LastBlockSum()(nb, x, y)
        np.testing.assert_array_equal(y, x.sum(0))


def test_a_dirty_scratch_is_reported_at_its_allocation():
    x = np.ones((3, 32), np.float32)
    with pytest.raises(TilusRuntimeError, match="requires_clean=True.*must zero it") as info:
        LastBlockSum(clean=False)(3, x, np.zeros(32, np.float32))
    assert info.value.loc.line == err_line(LastBlockSum)


class Undefined(tilus.Script):
    def __call__(self, y_ptr: ~float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 1
        t = self.global_tensor(float32, [32], requires_clean=False)
        v = self.load_global(t, offsets=[0], shape=[32])
        self.store_global(self.global_view(y_ptr, dtype=float32, shape=[32]), v, offsets=[0])


def test_unclean_scratch_is_undefined():
    y = np.zeros(32, np.float32)
    Undefined()(y)
    assert np.isnan(y).all()  # the interpreter poisons it


class WithLayout(tilus.Script):
    def __call__(self, y_ptr: ~float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 1
        self.global_tensor(float32, [32], layout="row", requires_clean=True)  # ERR


class BadShape(tilus.Script):
    def __call__(self, y_ptr: ~float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 1
        self.global_tensor(float32, [0, 4], requires_clean=True)  # ERR


def test_refusals_name_the_line():
    expect_error(WithLayout, fragment="layout=")
    expect_error(BadShape, fragment="positive ints")


class StoreOneElement(tilus.Script):
    """A store into one element of a global view, indexed in every dim (a 0-d view)."""

    def __call__(self, n: int32, y_ptr: ~float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 1
        gy = self.global_view(y_ptr, dtype=float32, shape=[n, 4])
        v = self.register_tensor(dtype=float32, shape=[], init=7.0)
        self.store_global(gy[n - 1, 2], v, offsets=[])


def test_a_fully_indexed_view_is_a_view_of_the_buffer():
    # the interpreter once made the element a copy (NumPy's integer indexing) and refused the
    # store as one into a read-only array
    y = np.zeros((3, 4), np.float32)
    with tilus.option.scoped(interpret=True):
        StoreOneElement()(3, y)
    want = np.zeros((3, 4), np.float32)
    want[2, 2] = 7.0
    np.testing.assert_array_equal(y, want)


@needs_nvrtc
def test_builds_for_sm90a_with_a_workspace():
    from tilus.runtime.sass import sass_opcodes

    ck = tilus.compile(LastBlockSum(), None, None, None)
    assert "uint8_t* __restrict__ tl_workspace" in ck.source
    assert "(tl_workspace + 256)" in ck.source  # the counter after the 128-byte accumulator
    ops = sass_opcodes(ck.sass())
    assert ops.get("ATOMG") and ops.get("REDG") and ops.get("SHFL"), ops


@pytest.mark.gpu
def test_gpu_matches_the_interpreter():
    from tests.cuda.conftest import _gpu_available

    if not _gpu_available():
        pytest.skip("needs torch with a Hopper GPU")
    import torch

    nb = 50
    x = np.random.default_rng().integers(-9, 9, (nb, 32)).astype(np.float32)
    xd = torch.from_numpy(x).cuda()
    for _ in range(3):  # each launch leaves the workspace clean for the next
        y = torch.full((32,), float("nan"), device="cuda")
        LastBlockSum()(nb, xd, y)
        np.testing.assert_array_equal(y.cpu().numpy(), x.sum(0))


@pytest.mark.gpu
def test_gpu_streams_get_their_own_workspace():
    """Launches on two streams may overlap: each stream has its own scratch, so neither sees
    the other's partial sums or counter."""
    from tests.cuda.conftest import _gpu_available

    if not _gpu_available():
        pytest.skip("needs torch with a Hopper GPU")
    import torch

    nb = 64
    kernel = LastBlockSum()
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    xs = [torch.randint(-9, 9, (nb, 32), device="cuda").float() for _ in streams]
    ys = [torch.full((20, 32), float("nan"), device="cuda") for _ in streams]
    torch.cuda.synchronize()
    for i in range(20):  # interleaved launches on both streams, free to overlap
        for s, x, y in zip(streams, xs, ys):
            with torch.cuda.stream(s):
                kernel(nb, x, y[i])
    torch.cuda.synchronize()
    for x, y in zip(xs, ys):
        torch.testing.assert_close(y, x.sum(0).expand(20, 32), rtol=0, atol=0)
