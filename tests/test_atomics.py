"""self.atomic and the scatter stores: interpreter results, refusals, sm_90a build, GPU check."""

from __future__ import annotations

import numpy as np
import pytest

import tilus
from tests.cuda.conftest import needs_nvrtc
from tests.helpers_errors import expect_error
from tilus import float16, float32, int32, uint32
from tilus.utils import cdiv

B = 128


class Histogram(tilus.Script):
    """Per block: a shared histogram by scatter-add, then added into the global one; also a
    global max-merge and the running sums (with their old values) of a global accumulator."""

    def __init__(self, bins=16):
        super().__init__()
        self.bins = bins

    def __call__(self, n: int32, x_ptr: ~int32, h_ptr: ~int32, m_ptr: ~int32, acc_ptr: ~float32,
                 v_ptr: ~float32, old_ptr: ~float32):  # fmt: skip
        self.attrs.blocks = [cdiv(n, B)]
        self.attrs.warps = 4
        base = self.blockIdx.x * B
        x = self.load_global(self.global_view(x_ptr, dtype=int32, shape=[n]), offsets=[base],
                             shape=[B])  # fmt: skip
        valid = self.register_tensor(dtype=int32, shape=[B], init=lambda i: base + i)
        idx = self.where(valid < n, x % self.bins, -1)  # -1: out of range, skipped
        sh = self.shared_tensor(dtype=int32, shape=[self.bins])
        self.store_shared(sh, self.register_tensor(dtype=int32, shape=[self.bins], init=0))
        self.sync()
        ones = self.register_tensor(dtype=int32, shape=[B], init=1)
        self.atomic.shared_scatter_add(sh, dim=0, indices=idx, values=ones)
        self.sync()
        with self.single_warp():
            part = self.load_shared(sh)
            self.atomic.global_add(self.global_view(h_ptr, dtype=int32, shape=[self.bins]), part)
        gm = self.global_view(m_ptr, dtype=int32, shape=[1])
        big = self.where(valid < n, x, -(2**30))
        zero = self.register_tensor(dtype=int32, shape=[B], init=0)
        self.atomic.global_scatter_max(gm, dim=0, indices=zero, values=big)
        v = self.load_global(self.global_view(v_ptr, dtype=float32, shape=[n]), offsets=[base],
                             shape=[B])  # fmt: skip
        old = self.atomic.global_add(self.global_view(acc_ptr, dtype=float32, shape=[B]), v)
        self.store_global(self.global_view(old_ptr, dtype=float32, shape=[n]), old,
                          offsets=[base])  # fmt: skip


def _inputs(n, bins=16):
    rng = np.random.default_rng()
    x = rng.integers(0, 1000, n).astype(np.int32)
    v = rng.integers(-8, 8, n).astype(np.float32)  # small integers: sums exact in any order
    return x, v


def _run(n, x, v, bins=16, device=None):
    arrays = [
        x,
        np.zeros(bins, np.int32),
        np.full(1, -(2**31), np.int32),
        np.zeros(B, np.float32),
        v,
        np.full(n, np.nan, np.float32),
    ]
    if device is not None:
        import torch

        arrays = [torch.from_numpy(a).to(device) for a in arrays]
    Histogram(bins)(n, *arrays)
    return [a.cpu().numpy() if hasattr(a, "cpu") else a for a in arrays]


def test_histogram_on_the_interpreter():
    n = 300  # not a multiple of the block
    x, v = _inputs(n)
    _, h, m, acc, _, old = _run(n, x, v)
    np.testing.assert_array_equal(h, np.bincount(x % 16, minlength=16))
    assert m[0] == x.max()
    pad = np.zeros(cdiv(n, B) * B, np.float32)
    pad[:n] = v
    per_block = pad.reshape(-1, B)
    np.testing.assert_array_equal(acc, per_block.sum(0))
    # blocks run in order on the interpreter: block k sees the sum of blocks < k
    want_old = np.concatenate([np.zeros((1, B)), np.cumsum(per_block, 0)[:-1]]).reshape(-1)[:n]
    np.testing.assert_array_equal(old, want_old)


class Ops(tilus.Script):
    """Each op of the element-wise forms on one shared and one global tile."""

    def __call__(self, d_ptr: ~uint32, v_ptr: ~uint32, c_ptr: ~uint32, o_ptr: ~uint32):
        self.attrs.blocks = [1]
        self.attrs.warps = 2
        gv = self.global_view(v_ptr, dtype=uint32, shape=[64])
        v = self.load_global(gv, offsets=[0], shape=[64])
        c = self.load_global(self.global_view(c_ptr, dtype=uint32, shape=[64]), offsets=[0],
                             shape=[64])  # fmt: skip
        gd = self.global_view(d_ptr, dtype=uint32, shape=[6, 64])
        go = self.global_view(o_ptr, dtype=uint32, shape=[6, 64])
        init = self.load_global(gd, offsets=[0, 0], shape=[64], dims=[1])
        s = self.shared_tensor(dtype=uint32, shape=[64])
        self.store_shared(s, init)
        self.sync()
        o0 = self.atomic.shared_add(s, v)
        o1 = self.atomic.shared_sub(s, v, sem="acq_rel")
        o2 = self.atomic.shared_max(s, c)
        o3 = self.atomic.shared_min(s, v)
        o4 = self.atomic.shared_cas(s, c, v)
        o5 = self.atomic.shared_exch(s, c, scope="cluster")
        for k, o in enumerate((o0, o1, o2, o3, o4, o5)):
            self.store_global(go, o, offsets=[k, 0], dims=[1])
        self.sync()
        self.store_global(gd, self.load_shared(s), offsets=[1, 0], dims=[1])
        self.atomic.global_sub(gd, self.register_tensor(dtype=uint32, shape=[6, 64], init=3),
                               sem="release")  # fmt: skip


def test_each_op():
    rng = np.random.default_rng()
    d = rng.integers(0, 2**32, (6, 64), dtype=np.uint64).astype(np.uint32)
    v = rng.integers(0, 2**32, 64, dtype=np.uint64).astype(np.uint32)
    c = rng.integers(0, 2**32, 64, dtype=np.uint64).astype(np.uint32)
    c[::3] = v[::3]
    o = np.zeros((6, 64), np.uint32)
    d0 = d.copy()
    Ops()(d, v, c, o)
    x = d0[0].astype(np.uint64)
    want = []
    for f in (
        lambda x: (x + v) % 2**32,
        lambda x: (x - v) % 2**32,
        lambda x: np.maximum(x, c),
        lambda x: np.minimum(x, v),
        lambda x: np.where(x == c, v, x),
        lambda x: c.astype(np.uint64),
    ):
        want.append(x.copy())
        x = f(x)
    np.testing.assert_array_equal(o, np.array(want, np.uint32))
    final = d0.astype(np.int64)
    final[1] = x
    np.testing.assert_array_equal(d, ((final - 3) % 2**32).astype(np.uint32))


class Scatter(tilus.Script):
    """Scatter stores: the tile's rows through shared memory reversed, then to rows ``perm``
    of the output (``perm`` is given per element, [32, 16]; rows past 40 are skipped)."""

    def __call__(self, perm_ptr: ~int32, x_ptr: ~float16, y_ptr: ~float16):
        self.attrs.blocks = [1]
        self.attrs.warps = 4
        x = self.load_global(self.global_view(x_ptr, dtype=float16, shape=[32, 16]),
                             offsets=[0, 0], shape=[32, 16])  # fmt: skip
        p = self.load_global(self.global_view(perm_ptr, dtype=int32, shape=[32, 16]),
                             offsets=[0, 0], shape=[32, 16])  # fmt: skip
        rev = self.register_tensor(dtype=int32, shape=[32, 16], init=lambda i, j: 31 - i)
        s = self.shared_tensor(dtype=float16, shape=[32, 16])
        self.store_shared_scatter(s, dim=0, indices=rev, values=x)
        self.sync()
        y = self.load_shared(s)
        gy = self.global_view(y_ptr, dtype=float16, shape=[40, 16])
        self.store_global_scatter(gy, dim=0, indices=p, values=y)


def _scatter_inputs():
    rng = np.random.default_rng()
    perm = rng.permutation(44)[:32].astype(np.int32)  # some rows land past the 40 of y
    x = rng.standard_normal((32, 16)).astype(np.float16)
    return np.repeat(perm[:, None], 16, 1).copy(), x


def test_scatter_stores():
    p, x = _scatter_inputs()
    y = np.full((40, 16), np.nan, np.float16)
    Scatter()(p, x, y)
    want = np.full((40, 16), np.nan, np.float16)
    for r in range(32):
        if p[r, 0] < 40:
            want[p[r, 0]] = x[31 - r]
    np.testing.assert_array_equal(y, want)


class NoShortAtomics(tilus.Script):
    def __call__(self, d_ptr: ~float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 1
        g = self.global_view(d_ptr, dtype=float32, shape=[32])
        v = self.register_tensor(dtype=float32, shape=[32], init=1.0)
        self.atomic.global_max(g, v)  # ERR


class RegisterDst(tilus.Script):
    def __call__(self, d_ptr: ~int32):
        self.attrs.blocks = [1]
        self.attrs.warps = 1
        v = self.register_tensor(dtype=int32, shape=[32], init=1)
        self.atomic.shared_add(v, v)  # ERR


class BadShape(tilus.Script):
    def __call__(self, d_ptr: ~int32):
        self.attrs.blocks = [1]
        self.attrs.warps = 1
        s = self.shared_tensor(dtype=int32, shape=[16])
        v = self.register_tensor(dtype=int32, shape=[32], init=1)
        self.atomic.shared_add(s, v)  # ERR


class BadSem(tilus.Script):
    def __call__(self, d_ptr: ~int32):
        self.attrs.blocks = [1]
        self.attrs.warps = 1
        s = self.shared_tensor(dtype=int32, shape=[32])
        v = self.register_tensor(dtype=int32, shape=[32], init=1)
        self.atomic.shared_add(s, v, sem="seq_cst")  # ERR


class ReplicatedResult(tilus.Script):
    def __call__(self, d_ptr: ~int32, o_ptr: ~int32):
        self.attrs.blocks = [1]
        self.attrs.warps = 4
        g = self.global_view(d_ptr, dtype=int32, shape=[8])
        v = self.register_tensor(dtype=int32, shape=[8], init=1)
        old = self.atomic.global_add(g, v)  # ERR
        self.store_global(self.global_view(o_ptr, dtype=int32, shape=[8]), old, offsets=[0])


def test_refusals_name_the_line():
    expect_error(NoShortAtomics, fragment="global memory has no atomic max on float32")
    expect_error(RegisterDst, fragment="destination must be a shared tensor")
    expect_error(BadShape, fragment="dim 0 is 32 in the tile but 16")
    expect_error(BadSem, fragment="sem must be one of")


@needs_nvrtc
def test_replicated_results_are_refused_by_cuda():
    from tests.helpers_errors import err_line

    with pytest.raises(tilus.TilusCompileError, match="replicated") as info:
        tilus.compile(ReplicatedResult(), None, None)
    assert info.value.loc.line == err_line(ReplicatedResult)


@needs_nvrtc
def test_builds_for_sm90a_with_atom_and_red():
    from tilus.runtime.sass import sass_opcodes

    ck = tilus.compile(Histogram(), 300, None, None, None, None, None, None)
    ops = sass_opcodes(ck.sass())
    # shared scatter-add and the unused global adds become reductions; the accumulator's
    # add returns its old values
    assert ops.get("ATOMS") and ops.get("REDG") and ops.get("ATOMG"), ops
    assert "tl_red_global_add_int32" in ck.source and "tl_atom_global_add_float32" in ck.source
    ops = sass_opcodes(tilus.compile(Ops(), None, None, None, None).sass())
    assert ops.get("ATOMS") and ops.get("REDG"), ops
    assert not ops.get("LDL") and not ops.get("STL")
    assert sass_opcodes(tilus.compile(Scatter(), None, None, None).sass()).get("STG")


@pytest.mark.gpu
def test_gpu_matches_the_interpreter():
    from tests.cuda.conftest import _gpu_available

    if not _gpu_available():
        pytest.skip("needs torch with a Hopper GPU")
    n = 1000
    x, v = _inputs(n)
    got = _run(n, x, v, device="cuda")
    want = _run(n, x, v)
    for k in (1, 2, 3):  # histogram, max, accumulator: independent of the order
        np.testing.assert_array_equal(got[k], want[k])
    # old values: each block's are the partial sum of the blocks before it in some order
    old = got[5].reshape(-1)
    assert np.isfinite(old[:n]).all()
    rng = np.random.default_rng()
    d = rng.integers(0, 2**32, (6, 64), dtype=np.uint64).astype(np.uint32)
    v = rng.integers(0, 2**32, 64, dtype=np.uint64).astype(np.uint32)
    c = rng.integers(0, 2**32, 64, dtype=np.uint64).astype(np.uint32)
    c[::3] = v[::3]
    import torch

    outs = []
    for dev in ("cuda", None):
        args = [d.copy(), v, c, np.zeros((6, 64), np.uint32)]
        if dev:
            args = [torch.from_numpy(a.astype(np.int64)).to(torch.uint32).to(dev) for a in args]
        Ops()(*args)
        outs.append([a.cpu().numpy() if hasattr(a, "cpu") else a for a in args])
    for a, b in zip(*outs):
        np.testing.assert_array_equal(a, b)
    p, x = _scatter_inputs()
    y = torch.full((40, 16), float("nan"), dtype=torch.float16, device="cuda")
    Scatter()(torch.from_numpy(p).cuda(), torch.from_numpy(x).cuda(), y)
    yi = np.full((40, 16), np.nan, np.float16)
    Scatter()(p, x, yi)
    np.testing.assert_array_equal(y.cpu().numpy(), yi)
