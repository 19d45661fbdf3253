"""Cluster kernels shared by the interpreter and CUDA tests (``BUG:`` markers name the lines a
protocol error is reported at)."""

from __future__ import annotations

import tilus
from tilus import float16, float32, int32, uint32
from tilus.utils import cdiv


class MulticastCopy(tilus.Script):
    """Each pair of blocks (a 2-block cluster) copies one [64, 64] tile of ``x`` to each block's
    slot of ``y``: block rank r loads rows [32 r, 32 r + 32) with a TMA multicast to both, so
    each block receives the whole tile from two loads. ``bug`` breaks one rule."""

    def __init__(self, bug: str = "none"):
        super().__init__()
        self.bug = bug

    def __call__(self, rows: int32, x: ~float16, y: ~float16):
        self.attrs.cluster_blocks = 2
        self.attrs.blocks = 2 * cdiv(rows, 64)
        self.attrs.warps = 4
        rank = self.cluster.blockRank
        row0: int32 = 64 * (self.blockIdx.x // 2)
        gx = self.global_view(x, dtype=float16, shape=[rows, 64])
        gy = self.global_view(y, dtype=float16, shape=[2 * cdiv(rows, 64) * 64, 64])
        s = self.shared_tensor(dtype=float16, shape=[2, 32, 64])
        bars = self.mbarrier.alloc(counts=[1])
        if self.bug == "one_sided":
            if rank == 0:
                self.cluster.sync()  # BUG:one_sided
        elif self.bug != "alloc_sync":
            self.cluster.sync()
        with self.single_thread():
            self.mbarrier.arrive_and_expect_tx(bars[0], transaction_bytes=s.nbytes)
            self.tma.global_to_shared(  # BUG:alloc_sync
                src=gx,
                dst=s[rank],
                offsets=[row0 + 32 * rank, 0],
                mbarrier=bars[0],
                multicast_mask=0b11,
            )
            if self.bug != "no_wait":
                self.mbarrier.wait(bars[0], phase=0)
        self.sync()
        tile = self.load_shared(s)  # BUG:no_wait
        self.store_global(gy, self.reshape(tile, [64, 64]), offsets=[64 * self.blockIdx.x, 0])
        self.cluster.sync()


class RemoteArrive(tilus.Script):
    """Each block of a pair arrives on the other's barrier (``form``: a mapped tile, a mapped
    element, or ``arrive_and_expect_tx_remote`` of 0 bytes), waits on its own, and writes its
    cluster coordinates. ``form="exited"``: rank 1 leaves at once, rank 0 arrives after."""

    def __init__(self, form: str = "mapa"):
        super().__init__()
        self.form = form

    def __call__(self, n: int32, out: ~int32):
        self.attrs.cluster_blocks = [2, 1]
        self.attrs.blocks = [2, n]
        self.attrs.warps = 1
        rank = self.cluster.blockRank
        other = 1 - rank
        bars = self.mbarrier.alloc(counts=[32])
        self.cluster.sync()
        if self.form == "exited":
            if rank == 0:
                self.mbarrier.arrive_and_expect_tx_remote(bars[0], 0, 1)  # BUG:exited
            return
        if self.form == "mapa":
            remote = self.cluster.map_shared_addr(bars, other)
            self.mbarrier.arrive(remote[0], scope="cluster")
        elif self.form == "mapa_scalar":
            remote = self.cluster.map_shared_addr(bars[0], other)
            self.mbarrier.arrive(remote, scope="cluster")
        else:
            self.mbarrier.arrive_and_expect_tx_remote(bars[0], 0, other)
        self.mbarrier.wait(bars[0], phase=0)
        g = self.global_view(out, dtype=int32, shape=[n, 2, 3])
        info = self.register_tensor(dtype=int32, shape=[3], init=0)
        info[0] = self.cluster.blockIdx.x
        info[1] = self.cluster.clusterDim.x
        info[2] = rank
        self.store_global(g, info, offsets=[self.blockIdx.y, self.blockIdx.x, 0], dims=[2])
        self.cluster.sync()


class ClusterMatmul(tilus.Script):
    """``C = A @ B^T`` (fp16 in, fp32 accumulate) with a 2-block cluster along M: the two
    blocks of a pair compute C tiles of the same columns, so each loads half of the B tile
    and multicasts it to both (half the L2 traffic for B). One shared stage; a cluster.sync()
    per K step keeps a block from overwriting its peer's B before the peer has used it."""

    def __init__(self, block_m: int = 64, block_n: int = 64, block_k: int = 32, bug: str = ""):
        super().__init__()
        self.block_m, self.block_n, self.block_k = block_m, block_n, block_k
        self.bug = bug

    def __call__(
        self, m_size: int32, n_size: int, k_size: int, a: ~float16, b: ~float16, c: ~float32
    ):
        bm, bn, bk = self.block_m, self.block_n, self.block_k
        self.attrs.cluster_blocks = [2, 1]
        self.attrs.blocks = [2 * cdiv(m_size, 2 * bm), cdiv(n_size, bn)]
        self.attrs.warps = 4
        rank = self.cluster.blockRank
        offset_m: int32 = bm * self.blockIdx.x
        offset_n: int32 = bn * self.blockIdx.y
        ga = self.global_view(a, dtype=float16, shape=[m_size, k_size])
        gb = self.global_view(b, dtype=float16, shape=[n_size, k_size])
        sa = self.shared_tensor(dtype=float16, shape=[bm, bk])
        sb = self.shared_tensor(dtype=float16, shape=[2, bn // 2, bk])
        acc = self.register_tensor(dtype=float32, shape=[bm, bn], init=0.0)
        loaded = self.mbarrier.alloc(counts=[1])
        phase: uint32 = 0
        self.cluster.sync()  # the peer's barrier and tiles exist before we multicast into them
        for offset_k in range(0, k_size, bk):
            with self.single_thread():
                self.mbarrier.arrive_and_expect_tx(
                    loaded[0], transaction_bytes=sa.nbytes + sb.nbytes
                )
                self.tma.global_to_shared(
                    src=ga, dst=sa, offsets=[offset_m, offset_k], mbarrier=loaded[0]
                )
                self.tma.global_to_shared(  # BUG:step_sync
                    src=gb,
                    dst=sb[rank],
                    offsets=[offset_n + rank * (bn // 2), offset_k],
                    mbarrier=loaded[0],
                    multicast_mask=0b11,
                )
                self.mbarrier.wait(loaded[0], phase=phase)
            self.sync()
            ta = self.load_shared(sa)
            tb = self.reshape(self.load_shared(sb), [bn, bk])
            acc = self.dot(ta, tb.transpose(), acc)
            if self.bug == "step_sync":
                self.sync()  # this block is done with sa and sb, but the peer may not be
            else:
                self.cluster.sync()  # both blocks are done with sb before either refills it
            phase ^= 1
        gc = self.global_view(c, dtype=float32, shape=[m_size, n_size])
        self.store_global(gc, acc, offsets=[offset_m, offset_n])


class ClusterGrid(tilus.Script):
    """A grid of ``n`` blocks in clusters of 2 (``n`` odd is refused at the launch)."""

    def __call__(self, n: int32, out: ~int32):
        self.attrs.blocks = n
        self.attrs.cluster_blocks = (2, 1, 1)  # ERR
        self.attrs.warps = 1
        self.cluster.sync()
        g = self.global_view(out, dtype=int32, shape=[n])
        self.store_global(
            g,
            self.register_tensor(dtype=int32, shape=[1], init=self.cluster.blockRank),
            offsets=[self.blockIdx.x],
        )


class ClusterMatmulWgmma(tilus.Script):
    """``ClusterMatmul`` with the compute on WGMMA (sm_90a): V1 of the Hopper tutorial
    in 2-block clusters along M, each block loading half of the shared B tile and multicasting
    it to both. The halves are the two [bn / 2, bk] slices of ``sb``; each feeds its own WGMMA
    into its half of the accumulator (``acc[h]`` is C's columns [h bn / 2, (h + 1) bn / 2))."""

    def __init__(self, block_m: int = 64, block_n: int = 128, block_k: int = 64):
        super().__init__()
        self.block_m, self.block_n, self.block_k = block_m, block_n, block_k

    def __call__(
        self, m_size: int32, n_size: int, k_size: int, a: ~float16, b: ~float16, c: ~float32
    ):
        bm, bn, bk = self.block_m, self.block_n, self.block_k
        self.attrs.cluster_blocks = [2, 1]
        self.attrs.blocks = [2 * cdiv(m_size, 2 * bm), cdiv(n_size, bn)]
        self.attrs.warps = 4
        rank = self.cluster.blockRank
        offset_m: int32 = bm * self.blockIdx.x
        offset_n: int32 = bn * self.blockIdx.y
        ga = self.global_view(a, dtype=float16, shape=[m_size, k_size])
        gb = self.global_view(b, dtype=float16, shape=[n_size, k_size])
        sa = self.shared_tensor(dtype=float16, shape=[bm, bk])
        sb = self.shared_tensor(dtype=float16, shape=[2, bn // 2, bk])
        acc0 = self.register_tensor(dtype=float32, shape=[bm, bn // 2], init=0.0)
        acc1 = self.register_tensor(dtype=float32, shape=[bm, bn // 2], init=0.0)
        loaded = self.mbarrier.alloc(counts=[1])
        phase: uint32 = 0
        self.cluster.sync()
        for offset_k in range(0, k_size, bk):
            with self.single_thread():
                self.mbarrier.arrive_and_expect_tx(
                    loaded[0], transaction_bytes=sa.nbytes + sb.nbytes
                )
                self.tma.global_to_shared(
                    src=ga, dst=sa, offsets=[offset_m, offset_k], mbarrier=loaded[0]
                )
                self.tma.global_to_shared(
                    src=gb,
                    dst=sb[rank],
                    offsets=[offset_n + rank * (bn // 2), offset_k],
                    mbarrier=loaded[0],
                    multicast_mask=0b11,
                )
                self.mbarrier.wait(loaded[0], phase=phase)
            self.sync()
            self.wgmma.fence()
            self.wgmma.mma(sa, sb[0].transpose(), acc0)
            self.wgmma.mma(sa, sb[1].transpose(), acc1)
            self.wgmma.commit_group()
            self.wgmma.wait_group(0)
            self.cluster.sync()  # both blocks are done with sb before either refills it
            phase ^= 1
        gc = self.global_view(c, dtype=float32, shape=[m_size, n_size])
        self.store_global(gc, acc0, offsets=[offset_m, offset_n])
        half: int32 = offset_n + bn // 2
        self.store_global(gc, acc1, offsets=[offset_m, half])


class MulticastRefill(tilus.Script):
    """A pair of blocks receives a [64, 64] tile of ``x`` by two multicast halves (as
    ``MulticastCopy``); only rank 1 reads it (``load_shared``, out to ``y``); then, after a
    cluster.sync(), rank 0 alone multicasts rows [64, 96) of ``x`` over both blocks' first
    half, which each block copies out too. The refill writes rank 1's tile through the async
    proxy over rank 1's generic read: the fence that orders them is rank 0's."""

    def __call__(self, x: ~float16, y: ~float16):
        self.attrs.cluster_blocks = 2
        self.attrs.blocks = 2
        self.attrs.warps = 4
        rank = self.cluster.blockRank
        gx = self.global_view(x, dtype=float16, shape=[96, 64])
        gy = self.global_view(y, dtype=float16, shape=[4, 64, 64])
        s = self.shared_tensor(dtype=float16, shape=[2, 32, 64])
        bars = self.mbarrier.alloc(counts=[1, 1])
        self.cluster.sync()
        with self.single_thread():
            self.mbarrier.arrive_and_expect_tx(bars[0], transaction_bytes=s.nbytes)
            self.tma.global_to_shared(
                src=gx, dst=s[rank], offsets=[32 * rank, 0], mbarrier=bars[0], multicast_mask=0b11
            )
            self.mbarrier.wait(bars[0], phase=0)
        self.sync()
        if rank == 1:
            tile = self.load_shared(s)  # READ:peer
            self.store_global(gy, self.reshape(tile, [1, 64, 64]), offsets=[1, 0, 0])
        self.cluster.sync()  # rank 1's read is done before rank 0 refills its tile
        with self.single_thread():
            self.mbarrier.arrive_and_expect_tx(bars[1], transaction_bytes=s.nbytes // 2)
            if rank == 0:
                self.tma.global_to_shared(  # LOAD:refill
                    src=gx, dst=s[0], offsets=[64, 0], mbarrier=bars[1], multicast_mask=0b11
                )
            self.mbarrier.wait(bars[1], phase=0)
        self.sync()
        again = self.load_shared(s)
        self.store_global(gy, self.reshape(again, [1, 64, 64]), offsets=[2 + rank, 0, 0])
        self.cluster.sync()
