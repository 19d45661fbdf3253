"""Thread-block clusters on the interpreter: multicast TMA, remote arrives, cluster.sync, and
the protocol errors (races, deadlocks, peers that exited) at their lines."""

from __future__ import annotations

import numpy as np
import pytest

import tilus
from tests.cluster_kernels import (
    ClusterGrid,
    ClusterMatmul,
    ClusterMatmulWgmma,
    MulticastCopy,
    MulticastRefill,
    RemoteArrive,
)
from tests.helpers_errors import err_line, expect_error
from tilus import int32
from tilus.testing import marker_line


def _copy(bug="none", rows=100, seed=None):
    x = np.random.default_rng().uniform(-1, 1, size=(rows, 64)).astype(np.float16)
    nb = 2 * -(-rows // 64)
    y = np.full((nb * 64, 64), np.nan, dtype=np.float16)
    with tilus.option.scoped(interpret=True, schedule_seed=seed):
        MulticastCopy(bug)(rows, x, y)
    return x, y, nb


@pytest.mark.parametrize("rows, seed", [(100, None), (64, 0), (200, 1), (130, 2)])
def test_multicast_delivers_both_halves_to_both_blocks(rows, seed):
    x, y, nb = _copy(rows=rows, seed=seed)
    padded = np.zeros((nb // 2 * 64, 64), np.float16)
    padded[:rows] = x
    for blk in range(nb):  # both blocks of a pair hold the pair's whole tile
        np.testing.assert_array_equal(y[64 * blk : 64 * blk + 64], padded[64 * (blk // 2) :][:64])


@pytest.mark.parametrize(
    "bug, fragment",
    [
        ("no_wait", "race: load_shared reads shared tile `s` while a TMA write into it"),
        ("alloc_sync", "no mbarrier at offset"),
        ("one_sided", "waits in cluster.sync()"),
    ],
)
def test_cluster_protocol_errors_are_reported_at_the_line(bug, fragment):
    with pytest.raises(tilus.TilusRuntimeError) as info:
        _copy(bug)
    err = info.value
    assert fragment in str(err), str(err)
    assert err.loc.line == marker_line(MulticastCopy, f"BUG:{bug}"), str(err)


def test_a_one_sided_cluster_sync_is_a_deadlock_listing_both_blocks():
    with pytest.raises(tilus.TilusRuntimeError) as info:
        _copy("one_sided")
    text = str(info.value) + "\n".join(getattr(info.value, "notes", None) or [])
    assert "deadlock in the cluster of block (0, 0, 0)" in text
    assert "rank 1: 128 thread(s) missing" in text, text


@pytest.mark.parametrize("form", ["mapa", "mapa_scalar", "remote"])
def test_remote_arrives_count_on_the_peer_barrier(form):
    out = np.full((3, 2, 3), -1, np.int32)
    with tilus.option.scoped(interpret=True):
        RemoteArrive(form)(3, out)
    # (cluster blockIdx.x, clusterDim.x, blockRank) of each block
    assert out.tolist() == [[[0, 2, 0], [1, 2, 1]]] * 3


def test_an_arrive_on_a_block_that_exited_is_refused():
    out = np.zeros((1, 2, 3), np.int32)
    with pytest.raises(tilus.TilusRuntimeError) as info:
        with tilus.option.scoped(interpret=True):
            RemoteArrive("exited")(1, out)
    assert "which has already exited" in str(info.value)
    assert info.value.loc.line == marker_line(RemoteArrive, "BUG:exited")


@pytest.mark.parametrize("m, n, k", [(128, 64, 64), (200, 96, 80)])
@pytest.mark.parametrize("seed", [None, 3])
@pytest.mark.parametrize("kernel", [ClusterMatmul, ClusterMatmulWgmma])
def test_cluster_matmul_multicasting_b(kernel, m, n, k, seed):
    rng = np.random.default_rng()
    a = rng.uniform(-1, 1, (m, k)).astype(np.float16)
    b = rng.uniform(-1, 1, (n, k)).astype(np.float16)
    c = np.full((m, n), np.nan, np.float32)
    with tilus.option.scoped(interpret=True, schedule_seed=seed):
        kernel()(m, n, k, a, b, c)
    ref = a.astype(np.float32) @ b.astype(np.float32).T
    np.testing.assert_allclose(c, ref, rtol=1e-3, atol=1e-3)


def test_refilling_a_peer_tile_without_a_cluster_sync_is_a_race():
    a = np.ones((128, 64), np.float16)
    b = np.ones((64, 64), np.float16)
    c = np.zeros((128, 64), np.float32)
    with pytest.raises(tilus.TilusRuntimeError) as info:
        with tilus.option.scoped(interpret=True):
            ClusterMatmul(bug="step_sync")(128, 64, 64, a, b, c)
    assert "race: TMA write into shared tile `sb" in str(info.value), str(info.value)
    assert info.value.loc.line == marker_line(ClusterMatmul, "BUG:step_sync")


def test_a_grid_that_is_not_whole_clusters_is_refused_naming_the_argument():
    out = np.zeros(5, np.int32)
    with pytest.raises(tilus.TilusArgumentError) as info:
        with tilus.option.scoped(interpret=True):
            ClusterGrid()(5, out)
    msg = str(info.value)
    assert "grid [5, 1, 1] (from n=5) is not a multiple of the cluster shape [2, 1, 1]" in msg
    assert f":{err_line(ClusterGrid)}" in msg
    out = np.full(6, -1, np.int32)
    with tilus.option.scoped(interpret=True):
        ClusterGrid()(6, out)
    assert out.tolist() == [0, 1] * 3


# --- refusals at compile time, at the user's line ------------------------------------------


class _TooBig(tilus.Script):
    def __call__(self, n: int32, out: ~int32):
        self.attrs.blocks = 16
        self.attrs.cluster_blocks = 16  # ERR
        self.attrs.warps = 1


class _TooBig2D(tilus.Script):
    def __call__(self, n: int32, out: ~int32):
        self.attrs.blocks = [3, 3]
        self.attrs.cluster_blocks = [3, 3]  # ERR
        self.attrs.warps = 1


class _RuntimeShape(tilus.Script):
    def __call__(self, n: int32, out: ~int32):
        self.attrs.blocks = 2
        self.attrs.cluster_blocks = [n]  # ERR
        self.attrs.warps = 1


class _ShapeAfterUse(tilus.Script):
    def __call__(self, n: int32, out: ~int32):
        self.attrs.blocks = 2
        self.attrs.warps = 1
        _ = self.cluster.clusterDim
        self.attrs.cluster_blocks = 2  # ERR


class _MulticastWithoutCluster(tilus.Script):
    def __call__(self, n: int32, out: ~int32):
        self.attrs.blocks = 2
        self.attrs.warps = 1
        bars = self.mbarrier.alloc(counts=[1])
        self.mbarrier.arrive_and_expect_tx_multicast(bars[0], 16, 0b11)  # ERR


class _SyncInSingleThread(tilus.Script):
    def __call__(self, n: int32, out: ~int32):
        self.attrs.blocks = 2
        self.attrs.cluster_blocks = 2
        self.attrs.warps = 1
        with self.single_thread():
            self.cluster.sync()  # ERR


class _RankOutOfRange(tilus.Script):
    def __call__(self, n: int32, out: ~int32):
        self.attrs.blocks = 2
        self.attrs.cluster_blocks = 2
        self.attrs.warps = 1
        bars = self.mbarrier.alloc(counts=[1])
        self.cluster.map_shared_addr(bars, 2)  # ERR


class _MaskOutOfRange(tilus.Script):
    def __call__(self, n: int32, out: ~int32):
        self.attrs.blocks = 2
        self.attrs.cluster_blocks = 2
        self.attrs.warps = 1
        bars = self.mbarrier.alloc(counts=[1])
        self.mbarrier.arrive_and_expect_tx_multicast(bars[0], 16, 0b100)  # ERR


class _CtaScopeRemote(tilus.Script):
    def __call__(self, n: int32, out: ~int32):
        self.attrs.blocks = 2
        self.attrs.cluster_blocks = 2
        self.attrs.warps = 1
        bars = self.mbarrier.alloc(counts=[1])
        self.mbarrier.arrive_and_expect_tx_remote(bars[0], 16, 1, scope="cta")  # ERR


@pytest.mark.parametrize(
    "kernel, fragment",
    [
        (_TooBig, "over the portable cluster size limit of 8"),
        (_TooBig2D, r"cluster_blocks \[3, 3, 1\] has 9 blocks"),
        (_RuntimeShape, "1 to 3 compile-time ints"),
        (_ShapeAfterUse, "must be set before self.cluster is used"),
        (_MulticastWithoutCluster, "multicast needs a cluster"),
        (_SyncInSingleThread, "must be executed by whole warps"),
        (_RankOutOfRange, r"target_rank 2 is outside the cluster's ranks \[0, 2\)"),
        (_MaskOutOfRange, "must be a nonzero mask of the cluster's 2 ranks"),
        (_CtaScopeRemote, "needs scope='cluster'"),
    ],
)
def test_bad_cluster_programs_are_refused_at_the_line(kernel, fragment):
    with tilus.option.scoped(interpret=True):
        expect_error(kernel, tilus.TilusProgramError, fragment)


class _PeerBarrierWithCtaScope(tilus.Script):
    def __call__(self, n: int32, out: ~int32):
        self.attrs.blocks = 2
        self.attrs.cluster_blocks = 2
        self.attrs.warps = 1
        bars = self.mbarrier.alloc(counts=[1])
        self.cluster.sync()
        peer = self.cluster.map_shared_addr(bars[0], 1 - self.cluster.blockRank)
        self.mbarrier.arrive(peer)  # ERR
        self.cluster.sync()


def test_a_mapped_barrier_needs_cluster_scope_at_run_time():
    with tilus.option.scoped(interpret=True):
        err = expect_error(_PeerBarrierWithCtaScope, tilus.TilusRuntimeError, "scope='cluster'")
    assert "shared::cluster address" in str(err)


class _ConstantGridOfPartialClusters(tilus.Script):
    def __call__(self, n: int32, out: ~int32):
        self.attrs.blocks = [3, 2]  # ERR
        self.attrs.cluster_blocks = [2, 2]
        self.attrs.warps = 1


def test_a_constant_grid_of_partial_clusters_is_refused_at_the_grid():
    with tilus.option.scoped(interpret=True):
        expect_error(_ConstantGridOfPartialClusters, tilus.TilusProgramError, "not a multiple")


def test_the_cluster_shape_is_in_the_program_text():
    from tilus.ir.printer import print_ir

    (_, prog), *_ = ClusterGrid().runnable_programs({}, False)
    assert "cluster_blocks [2, 1, 1]" in print_ir(prog.fn)  # so it is in the cache key


def _refill(seed=None, cls=MulticastRefill):
    x = np.random.default_rng().uniform(-1, 1, size=(96, 64)).astype(np.float16)
    y = np.full((4, 64, 64), np.nan, np.float16)
    with tilus.option.scoped(interpret=True, schedule_seed=seed):
        cls()(x, y)
    return x, y


@pytest.mark.parametrize("seed", [None, 4])
def test_a_multicast_refill_of_a_tile_a_peer_read_is_fenced(seed):
    # the proxy_fences pass fences rank 0's refill; the fence orders rank 1's read too
    x, y = _refill(seed)
    np.testing.assert_array_equal(y[1], x[:64])
    for r in (2, 3):
        np.testing.assert_array_equal(y[r], np.concatenate([x[64:96], x[32:64]]))


def test_without_the_pass_a_multicast_over_a_peer_read_is_reported(monkeypatch):
    from tilus.passes import pipeline

    monkeypatch.setattr(pipeline, "insert_proxy_fences", lambda fn, smem: fn)
    # a class of its own: the kernel lowered with the pass by the test above is cached
    unfenced = type("MulticastRefillUnfenced", (MulticastRefill,), {})
    with pytest.raises(tilus.TilusRuntimeError) as info:
        _refill(cls=unfenced)
    err = info.value
    assert "missing fence.proxy_async: tma.global_to_shared" in str(err), str(err)
    assert err.loc.line == marker_line(MulticastRefill, "LOAD:refill"), str(err)
    assert f":{marker_line(MulticastRefill, 'READ:peer')}" in str(err), str(err)
