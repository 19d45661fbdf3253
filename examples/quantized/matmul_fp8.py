"""fp8 matmul: ``C = scale * (sa[:, None] * sb[None, :]) * (A @ B^T)``, e4m3 in, bf16 out.

``A [m, k]`` and ``B [n, k]`` are float8_e4m3 (torch ``float8_e4m3fn``), both K-major as the
fp8 WGMMA requires; ``scale`` is the product of the per-tensor scales and ``sa [m]``, ``sb [n]``
are per-row scales of A and B (float32; ``row_scales=False`` leaves them out). The product
accumulates in float32 on the tensor cores (``wgmma.mma_async ... k32.f32.e4m3.e4m3``, K = 32
per instruction) and the scales are applied to the accumulator in the epilogue, before the
rounding to bf16.

The kernel is the Hopper tutorial's V6 (examples/hopper_matmul/matmul_v6.py) with 8-bit
operands: a producer warp fills a ring of shared stages with TMA, two consumer warp groups
each keep one WGMMA group in flight over their half of the M tile, blocks are persistent and
registers move from the producer to the consumers with ``setmaxnreg``. A K tile of 128 fp8
elements is 128 bytes, the rows the 128-byte swizzle of the WGMMA operands spans, so an fp8
stage holds twice the K of an fp16 one in the same bytes.

Two more forms of the same kernel: ``MatmulFP8PingPong`` has V7's structure
(examples/hopper_matmul/matmul_v7.py: each consumer warp group computes whole C tiles, the two
taking turns on the tensor cores, so one group's scaled epilogue overlaps the other's WGMMAs),
and ``MatmulFP8Cluster`` runs V6's structure in clusters of 2 blocks along N that share their
A tile: each block loads one half of it with a TMA multicast into both (every block reads half
the A bytes from L2; each block's empty barriers count both blocks' consumers).
``MatmulFP8ClusterM`` pairs the blocks along M instead and shares the B tile, the larger
operand of a 128 x 256 tile.

Precision: the fp8 WGMMA's sums keep fewer bits than float32, so their error grows with K.
The kernels above sum all of K on the tensor cores, as cuBLAS's ``use_fast_accum=True``, with
its error (8.6e-3 of the largest output at 8192^3); ``MatmulFP8Precise`` adds each K tile's
sums into float32 registers, as ``torch._scaled_mm``'s default, with its error (2.7e-3).
H200, r81: 0.95-1.06x cuBLAS fast and 0.93-1.06x cuBLAS's default respectively.

Run ``python examples/quantized/matmul_fp8.py`` (the interpreter on CPU torch tensors at small
ragged sizes without a GPU; CUDA with one). Results are checked against torch float32
(dequantize, then matmul, then scale); C is poisoned with NaN first.
"""

from __future__ import annotations

import sys
import time
import traceback
from pathlib import Path

import tilus

_HERE = Path(__file__).resolve().parent
for _p in (_HERE.parent, _HERE.parent / "hopper_matmul"):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))
from example_support import cuda_torch, gpu_time, print_table  # noqa: E402
from fp8_support import (  # noqa: E402, F401
    TOLERANCE,
    PromotedSums,
    check,
    quantized_inputs,
    reference,
    run_once,
)
from matmul_v4 import Pipeline  # noqa: E402
from matmul_v6 import MatmulWGMMAV6, sm_count  # noqa: E402
from matmul_v7 import MatmulV7  # noqa: E402

from tilus import (  # noqa: E402
    GlobalTensor,
    SharedTensor,
    bfloat16,
    float8_e4m3,
    float32,
    int32,
    uint32,
)
from tilus.utils import cdiv  # noqa: E402

CPU_SIZES = [(200, 320, 384), (72, 136, 160)]  # (m, n, k): ragged in M, N and K
GPU_SIZES = [(4096, 4096, 4096), (4000, 3000, 4000), (8192, 8192, 8192)]


# (num_stages, block_m, block_n): the rings that fit beside the bf16 C tiles (a 128 x 256 x 128
# stage is 48 KB: three of them; 128 x 192, 40 KB: four). 192-wide tiles cut 8192 into 43 N
# tiles: 2752 tiles fill 20.8 waves of 132 SMs (128 x 256: 15.5, 128 x 128: 31.03 waves); the
# tuner picks them at 8192^3 on the H200: 1.04x torch._scaled_mm (r47), 0.98x before (r24)
@tilus.autotune("num_stages, block_m, block_n", [(3, 128, 128), (4, 128, 128), (5, 128, 128),
                                                 (3, 128, 256), (4, 128, 192)])  # fmt: skip
@tilus.autotune("block_k", [128])
@tilus.autotune("swizzle", [4, 8])
class MatmulFP8(PromotedSums, MatmulWGMMAV6):
    """Persistent warp-specialized fp8 e4m3 x e4m3 -> bf16 matmul with scales in the epilogue."""

    def __init__(
        self, num_stages, block_m, block_n, block_k, swizzle, num_sms=None, row_scales=True
    ):
        super().__init__(num_stages, block_m, block_n, block_k, swizzle, num_sms)
        self.row_scales = row_scales

    def epilogue_scale(self, acc, gsa, gsb, scale, offset_m, offset_n):
        """``acc * scale`` times the rows' scales of A (a column) and of B (a row)."""
        y = acc * scale
        if self.row_scales:
            rows, cols = acc.shape
            ra = self.load_global(gsa, offsets=[offset_m, 0], shape=[rows, 1])
            rb = self.load_global(gsb, offsets=[0, offset_n], shape=[1, cols])
            y = y * ra * rb
        return y

    def consume_fp8(
        self,
        half: int,
        pipe: Pipeline,
        sa: SharedTensor,
        sb: SharedTensor,
        gc: GlobalTensor,
        gsa: GlobalTensor,
        gsb: GlobalTensor,
        scale: float32,
        k_size: int,
        num_m: int32,
        num_n: int,
    ):
        """Consumer warp group ``half`` over the block's C tiles (V6's, with the scales)."""
        block_m_half = self.block_m // 2
        sc = self.shared_tensor(dtype=bfloat16, shape=[block_m_half, self.block_n])
        for tile in self.range(self.blockIdx.x, num_m * num_n, self.num_sms):
            m_tile, n_tile = self.tile_coords(tile, num_m, num_n)
            offset_m: int32 = m_tile * self.block_m + half * block_m_half
            offset_n: int32 = n_tile * self.block_n
            acc = self.register_tensor(dtype=float32, shape=[block_m_half, self.block_n], init=0.0)
            if self.promote:
                self.mainloop_promoted(half, pipe, sa, sb, acc, k_size)
            else:
                self.mainloop(half, pipe, sa, sb, acc, k_size)
            y = self.epilogue_scale(acc, gsa, gsb, scale, offset_m, offset_n)
            with self.single_thread():  # the same elected thread that issued the last store
                self.tma.wait_group(0, read=True)  # the previous tile's store has read sc
            self.sync()
            self.store_shared(sc, self.cast(y, dtype=bfloat16))
            self.fence.proxy_async(space="shared")  # the generic writes become visible to TMA
            self.sync()
            with self.single_thread():
                self.tma.shared_to_global(sc, gc, offsets=[offset_m, offset_n])
                self.tma.commit_group()
        with self.single_thread():
            self.tma.wait_group(0, read=True)  # sc is read: the block may exit

    def __call__(
        self,
        m_size: int32,
        n_size: int,
        k_size: int,
        a_ptr: ~float8_e4m3,
        b_ptr: ~float8_e4m3,
        sa_ptr: ~float32,
        sb_ptr: ~float32,
        scale: float32,
        c_ptr: ~bfloat16,
    ):
        num_stages = self.num_stages
        block_m, block_n, block_k = self.block_m, self.block_n, self.block_k
        num_m = cdiv(m_size, block_m)
        num_n = cdiv(n_size, block_n)
        self.attrs.blocks = min(num_m * num_n, self.num_sms)
        self.attrs.warps = 12  # two consumer warp groups + a producer warp group

        ga = self.global_view(a_ptr, dtype=float8_e4m3, shape=[m_size, k_size])
        gb = self.global_view(b_ptr, dtype=float8_e4m3, shape=[n_size, k_size])
        gc = self.global_view(c_ptr, dtype=bfloat16, shape=[m_size, n_size])
        gsa = self.global_view(sa_ptr, dtype=float32, shape=[m_size, 1])
        gsb = self.global_view(sb_ptr, dtype=float32, shape=[1, n_size])
        sa = self.shared_tensor(dtype=float8_e4m3, shape=[num_stages, 2, block_m // 2, block_k])
        sb = self.shared_tensor(dtype=float8_e4m3, shape=[num_stages, block_n, block_k])
        pipe = Pipeline(num_stages, producer_arrivals=1, consumer_arrivals=2)

        with self.warp_group(8, 4):  # producer warp group: threads 256-383
            self.setmaxnreg(40)
            with self.single_warp(0):
                for tile in self.range(self.blockIdx.x, num_m * num_n, self.num_sms):
                    m_tile, n_tile = self.tile_coords(tile, num_m, num_n)
                    self.produce(pipe, sa, sb, ga, gb, k_size, m_tile * block_m, n_tile * block_n)
                for _ in self.range(min(num_stages, cdiv(k_size, block_k))):
                    pipe.producer_acquire()
                    pipe.producer_advance()

        with self.warp_group(0, 4):  # consumer warp group 0: rows [0, block_m / 2) of each tile
            self.setmaxnreg(232)
            self.consume_fp8(0, pipe, sa, sb, gc, gsa, gsb, scale, k_size, num_m, num_n)
        with self.warp_group(4, 4):  # consumer warp group 1: rows [block_m / 2, block_m)
            self.setmaxnreg(232)
            self.consume_fp8(1, pipe, sa, sb, gc, gsa, gsb, scale, k_size, num_m, num_n)


# the MatmulFP8 rings whose two accumulators (the sums and a K tile's part) fit the consumers'
# 232 registers without a spill: 64 x 128 a group (64 x 192 spills 164 bytes)
@tilus.autotune("num_stages, block_m, block_n", [(3, 128, 128), (4, 128, 128), (5, 128, 128)])
class MatmulFP8Precise(MatmulFP8):
    """:class:`MatmulFP8` with the tensor cores' sums promoted to float32 every K tile (128
    K), as cuBLAS's ``torch._scaled_mm`` does by default: the error of a long-K product stays
    that of one K tile's sum instead of growing with K."""

    promote = True


class ClusterPipeline(Pipeline):
    """:class:`Pipeline` of one block of a 2-block cluster whose slots the peer's producer also
    writes into (a multicast half of the A tile): a slot is empty when the consumers of *both*
    blocks are done with it, so each consumer warp group releases it on its own block's barrier
    and on the peer's (``consumer_arrivals`` counts both blocks' groups)."""

    def __init__(self, num_stages: int, consumer_arrivals: int, peer: int32):
        super().__init__(num_stages, producer_arrivals=1, consumer_arrivals=consumer_arrivals)
        self.peer: int32 = peer  # the other block's cluster rank

    def consumer_release(self, stage: int32):
        """Release ``stage`` here and in the peer block (one elected thread)."""
        with self.single_thread():
            self.mbarrier.arrive(self.empty[stage])
            self.mbarrier.arrive_and_expect_tx_remote(self.empty[stage], 0, self.peer)


@tilus.autotune("num_stages, block_m, block_n", [(3, 128, 256), (3, 128, 128), (4, 128, 128)])
@tilus.autotune("block_k", [128])
@tilus.autotune("swizzle", [4, 8])
class MatmulFP8Cluster(MatmulFP8):
    """:class:`MatmulFP8` in clusters of 2 blocks along N: the two blocks of a cluster compute
    the C tiles ``(m, 2 p)`` and ``(m, 2 p + 1)``, which read the same A tile; each block loads
    one half of it with a TMA multicast into both blocks' shared memory, so A costs each block
    half the L2 traffic."""

    def b_tiles(self):
        """The shared B ring."""
        shape = [self.num_stages, self.block_n, self.block_k]
        return self.shared_tensor(dtype=float8_e4m3, shape=shape)

    def pair_tiles(self, pair: int32, num_m: int32, num_n: int):
        """(m tile, n tile) of this block's C tile of pair ``pair``."""
        m_tile, n_pair = self.tile_coords(pair, num_m, cdiv(num_n, 2))
        return m_tile, 2 * n_pair + self.cluster.blockRank

    def num_pairs(self, num_m: int32, num_n: int):
        """Tile pairs of the launch."""
        return num_m * cdiv(num_n, 2)

    def produce_pair(self, pipe, sa, sb, ga, gb, k_size: int, offset_m: int32, offset_n: int32):
        """The producer warp over the K tiles of this block's C tile: its own B tile, and its
        half of the shared A tile multicast to both blocks (each block's full barrier counts
        both A halves and its B tile)."""
        rank = self.cluster.blockRank
        half_m = self.block_m // 2
        for offset_k in self.range(0, k_size, self.block_k, unroll=self.num_stages):
            pipe.producer_acquire()  # both blocks' consumers released the slot
            stage = pipe.producer_stage
            with self.single_thread():
                self.mbarrier.arrive_and_expect_tx(
                    pipe.producer_barrier(), transaction_bytes=sa[stage].nbytes + sb[stage].nbytes
                )
            self.tma.global_to_shared(
                src=ga,
                dst=sa[stage, rank],
                offsets=[offset_m + rank * half_m, offset_k],
                mbarrier=pipe.producer_barrier(),
                multicast_mask=0b11,
            )
            self.tma.global_to_shared(
                src=gb,
                dst=sb[stage],
                offsets=[offset_n, offset_k],
                mbarrier=pipe.producer_barrier(),
            )
            pipe.producer_advance()

    def consume_pairs(self, half: int, pipe, sa, sb, gc, gsa, gsb, scale: float32, k_size: int,
                      num_m: int32, num_n: int):  # fmt: skip
        """Consumer warp group ``half`` over the cluster's tile pairs (this block's tile of each)."""
        block_m_half = self.block_m // 2
        clusters = self.num_sms // 2
        sc = self.shared_tensor(dtype=bfloat16, shape=[block_m_half, self.block_n])
        for pair in self.range(self.blockIdx.x // 2, self.num_pairs(num_m, num_n), clusters):
            m_tile, n_tile = self.pair_tiles(pair, num_m, num_n)
            offset_m: int32 = m_tile * self.block_m + half * block_m_half
            offset_n: int32 = n_tile * self.block_n
            acc = self.register_tensor(dtype=float32, shape=[block_m_half, self.block_n], init=0.0)
            self.mainloop(half, pipe, sa, sb, acc, k_size)
            y = self.epilogue_scale(acc, gsa, gsb, scale, offset_m, offset_n)
            with self.single_thread():
                self.tma.wait_group(0, read=True)  # the previous tile's store has read sc
            self.sync()
            self.store_shared(sc, self.cast(y, dtype=bfloat16))
            self.fence.proxy_async(space="shared")
            self.sync()
            with self.single_thread():
                self.tma.shared_to_global(sc, gc, offsets=[offset_m, offset_n])
                self.tma.commit_group()
        with self.single_thread():
            self.tma.wait_group(0, read=True)

    def __call__(
        self,
        m_size: int32,
        n_size: int,
        k_size: int,
        a_ptr: ~float8_e4m3,
        b_ptr: ~float8_e4m3,
        sa_ptr: ~float32,
        sb_ptr: ~float32,
        scale: float32,
        c_ptr: ~bfloat16,
    ):
        num_stages = self.num_stages
        block_m, block_n, block_k = self.block_m, self.block_n, self.block_k
        num_m = cdiv(m_size, block_m)
        num_n = cdiv(n_size, block_n)
        num_pairs = self.num_pairs(num_m, num_n)
        clusters = self.num_sms // 2
        self.attrs.cluster_blocks = 2
        self.attrs.blocks = 2 * min(num_pairs, clusters)
        self.attrs.warps = 12

        ga = self.global_view(a_ptr, dtype=float8_e4m3, shape=[m_size, k_size])
        gb = self.global_view(b_ptr, dtype=float8_e4m3, shape=[n_size, k_size])
        gc = self.global_view(c_ptr, dtype=bfloat16, shape=[m_size, n_size])
        gsa = self.global_view(sa_ptr, dtype=float32, shape=[m_size, 1])
        gsb = self.global_view(sb_ptr, dtype=float32, shape=[1, n_size])
        sa = self.shared_tensor(dtype=float8_e4m3, shape=[num_stages, 2, block_m // 2, block_k])
        sb = self.b_tiles()
        pipe = ClusterPipeline(num_stages, 4, 1 - self.cluster.blockRank)
        self.cluster.sync()  # the peer's barriers exist before anything lands in them

        with self.warp_group(8, 4):
            self.setmaxnreg(40)
            with self.single_warp(0):
                for pair in self.range(self.blockIdx.x // 2, num_pairs, clusters):
                    m_tile, n_tile = self.pair_tiles(pair, num_m, num_n)
                    self.produce_pair(
                        pipe, sa, sb, ga, gb, k_size, m_tile * block_m, n_tile * block_n
                    )
                for _ in self.range(min(num_stages, cdiv(k_size, block_k))):
                    pipe.producer_acquire()  # both blocks' consumers are done with every slot
                    pipe.producer_advance()
        with self.warp_group(0, 4):
            self.setmaxnreg(232)
            self.consume_pairs(0, pipe, sa, sb, gc, gsa, gsb, scale, k_size, num_m, num_n)
        with self.warp_group(4, 4):
            self.setmaxnreg(232)
            self.consume_pairs(1, pipe, sa, sb, gc, gsa, gsb, scale, k_size, num_m, num_n)
        self.cluster.sync()  # no block exits while its peer may still arrive on its barriers


@tilus.autotune("num_stages, block_m, block_n", [(3, 128, 256), (4, 128, 128)])
@tilus.autotune("block_k", [128])
@tilus.autotune("swizzle", [4, 8])
class MatmulFP8ClusterM(MatmulFP8Cluster):
    """:class:`MatmulFP8Cluster` with the pair along M: the two blocks compute the C tiles
    ``(2 p, n)`` and ``(2 p + 1, n)``, which read the same B tile; each block loads one half of
    its rows (``sb[stage, rank]``) with a TMA multicast into both blocks (B is the larger
    operand of a 128 x 256 tile: a third of the L2 traffic saved). The consumers run one WGMMA
    per B half into two accumulators, so every C tile is stored in two halves."""

    def pair_tiles(self, pair: int32, num_m: int32, num_n: int):
        """(m tile, n tile) of this block's C tile of pair ``pair``."""
        m_pair, n_tile = self.tile_coords(pair, cdiv(num_m, 2), num_n)
        return 2 * m_pair + self.cluster.blockRank, n_tile

    def num_pairs(self, num_m: int32, num_n: int):
        """Tile pairs of the launch."""
        return cdiv(num_m, 2) * num_n

    def b_tiles(self):
        """The shared B ring: two halves of ``block_n / 2`` rows a stage."""
        shape = [self.num_stages, 2, self.block_n // 2, self.block_k]
        return self.shared_tensor(dtype=float8_e4m3, shape=shape)

    def produce_pair(self, pipe, sa, sb, ga, gb, k_size: int, offset_m: int32, offset_n: int32):
        """The producer warp: this block's A tile, and its half of the shared B tile's rows
        multicast to both blocks."""
        rank = self.cluster.blockRank
        half_n = self.block_n // 2
        for offset_k in self.range(0, k_size, self.block_k, unroll=self.num_stages):
            pipe.producer_acquire()  # both blocks' consumers released the slot
            stage = pipe.producer_stage
            with self.single_thread():
                self.mbarrier.arrive_and_expect_tx(
                    pipe.producer_barrier(), transaction_bytes=sa[stage].nbytes + sb[stage].nbytes
                )
            for half in self.range(2, unroll=2):
                self.tma.global_to_shared(
                    src=ga,
                    dst=sa[stage, half],
                    offsets=[offset_m + half * (self.block_m // 2), offset_k],
                    mbarrier=pipe.producer_barrier(),
                )
            self.tma.global_to_shared(
                src=gb,
                dst=sb[stage, rank],
                offsets=[offset_n + rank * half_n, offset_k],
                mbarrier=pipe.producer_barrier(),
                multicast_mask=0b11,
            )
            pipe.producer_advance()

    def mainloop2(self, half: int, pipe, sa, sb, acc0, acc1, k_size: int):
        """V5's mainloop with the B tile in two halves: two WGMMAs a K tile, one group."""
        prev_stage: int32 = 0
        for offset_k in self.range(0, k_size, self.block_k, unroll=self.num_stages):
            pipe.consumer_acquire()
            stage = pipe.consumer_stage
            self.wgmma.fence()
            self.wgmma.mma(sa[stage, half], sb[stage, 0].transpose(), acc0)
            self.wgmma.mma(sa[stage, half], sb[stage, 1].transpose(), acc1)
            self.wgmma.commit_group()
            self.wgmma.wait_group(1)
            if offset_k > 0:
                pipe.consumer_release(prev_stage)
            prev_stage = pipe.consumer_stage
            pipe.consumer_advance()
        self.wgmma.wait_group(0)
        pipe.consumer_release(prev_stage)

    def consume_pairs(self, half: int, pipe, sa, sb, gc, gsa, gsb, scale: float32, k_size: int,
                      num_m: int32, num_n: int):  # fmt: skip
        """Consumer warp group ``half`` over the cluster's tile pairs, C in two column halves."""
        bmh, bnh = self.block_m // 2, self.block_n // 2
        clusters = self.num_sms // 2
        sc = self.shared_tensor(dtype=bfloat16, shape=[2, bmh, bnh])
        for pair in self.range(self.blockIdx.x // 2, self.num_pairs(num_m, num_n), clusters):
            m_tile, n_tile = self.pair_tiles(pair, num_m, num_n)
            offset_m: int32 = m_tile * self.block_m + half * bmh
            offset_n: int32 = n_tile * self.block_n
            acc0 = self.register_tensor(dtype=float32, shape=[bmh, bnh], init=0.0)
            acc1 = self.register_tensor(dtype=float32, shape=[bmh, bnh], init=0.0)
            self.mainloop2(half, pipe, sa, sb, acc0, acc1, k_size)
            y0 = self.epilogue_scale(acc0, gsa, gsb, scale, offset_m, offset_n)
            y1 = self.epilogue_scale(acc1, gsa, gsb, scale, offset_m, offset_n + bnh)
            with self.single_thread():
                self.tma.wait_group(0, read=True)  # the previous tile's stores have read sc
            self.sync()
            self.store_shared(sc[0], self.cast(y0, dtype=bfloat16))
            self.store_shared(sc[1], self.cast(y1, dtype=bfloat16))
            self.fence.proxy_async(space="shared")
            self.sync()
            with self.single_thread():
                self.tma.shared_to_global(sc[0], gc, offsets=[offset_m, offset_n])
                self.tma.shared_to_global(sc[1], gc, offsets=[offset_m, offset_n + bnh])
                self.tma.commit_group()
        with self.single_thread():
            self.tma.wait_group(0, read=True)


# (block_m, block_n, num_stages, swizzle) of the ping-pong kernel: whole C tiles per consumer
# warp group (128 x 128 or 64 x 256: 128 accumulator registers a thread) and the deepest ring
# that fits beside the group's two bf16 C tiles (an fp8 stage is (block_m + block_n) x 128 B).
@tilus.autotune(
    "block_m, block_n, num_stages, swizzle",
    [(128, 128, 4, 8), (128, 128, 5, 8), (128, 128, 4, 4), (64, 256, 4, 8), (64, 256, 4, 4)],
)
@tilus.autotune("block_k", [128])
class MatmulFP8PingPong(MatmulV7):
    """fp8 on V7's structure (examples/hopper_matmul/matmul_v7.py): persistent blocks, two
    consumer warp groups taking alternate whole C tiles, handing the tensor cores to each other
    (so one group's scaled epilogue and TMA store overlap the other's WGMMAs); no split-K."""

    dtype = float8_e4m3

    def __init__(
        self, num_stages, block_m, block_n, block_k, swizzle, num_sms=None, row_scales=True
    ):
        super().__init__(num_stages, block_m, block_n, block_k, swizzle, split_k=1, num_sms=num_sms)
        self.row_scales = row_scales

    def consume_fp8(self, group: int, pipe, order, sa, sb, gc, gsa, gsb, scale: float32,
                    k_size: int, num_m: int32, num_n: int):  # fmt: skip
        """Consumer warp group ``group``: the block's tiles ``group``, ``group + 2``, ..."""
        bm, bn = self.block_m, self.block_n
        num_units = num_m * num_n
        k_tiles = cdiv(k_size, self.block_k)
        order_phase: uint32 = 1 - group  # group 0 starts first
        sc = self.shared_tensor(dtype=bfloat16, shape=[bm, bn])
        if group == 1 and self.blockIdx.x < num_units:  # after group 0's first tile's slots
            self.skip(pipe, k_tiles)
        for unit in self.range(self.blockIdx.x + group * self.num_sms, num_units,
                               2 * self.num_sms):  # fmt: skip
            m_tile, n_tile = self.tile_coords(unit, num_m, num_n)
            acc = self.register_tensor(dtype=float32, shape=[bm, bn], init=0.0)
            self.mbarrier.wait(order[group], phase=order_phase)  # the other group's turn ended
            order_phase ^= 1
            self.mainloop_pp(group, pipe, sa, sb, acc, None, k_tiles, None)
            with self.single_thread():
                self.mbarrier.arrive(order[1 - group])  # hand the tensor cores over
            if unit + self.num_sms < num_units:  # skip the other group's next tile
                self.skip(pipe, k_tiles)
            if self.row_scales:  # scaled in place: no second accumulator-sized tile
                ra = self.load_global(gsa, offsets=[m_tile * bm, 0], shape=[bm, 1])
                acc *= ra * scale
                acc *= self.load_global(gsb, offsets=[0, n_tile * bn], shape=[1, bn])
            else:
                acc *= scale
            with self.single_thread():  # the previous tile's TMA store has read sc
                self.tma.wait_group(0, read=True)
            self.sync()
            self.store_shared(sc, self.cast(acc, dtype=bfloat16))
            self.fence.proxy_async(space="shared")  # generic writes visible to TMA
            self.sync()
            with self.single_thread():
                self.tma.shared_to_global(sc, gc, offsets=[m_tile * bm, n_tile * bn])
                self.tma.commit_group()
        with self.single_thread():
            self.tma.wait_group(0, read=True)  # sc is read: the block may exit

    def __call__(
        self,
        m_size: int32,
        n_size: int,
        k_size: int,
        a_ptr: ~float8_e4m3,
        b_ptr: ~float8_e4m3,
        sa_ptr: ~float32,
        sb_ptr: ~float32,
        scale: float32,
        c_ptr: ~bfloat16,
    ):
        self.launch(m_size, n_size)
        num_stages, block_m, block_n = self.num_stages, self.block_m, self.block_n
        num_m = cdiv(m_size, block_m)
        num_n = cdiv(n_size, block_n)
        ga = self.global_view(a_ptr, dtype=float8_e4m3, shape=[m_size, k_size])
        gb = self.global_view(b_ptr, dtype=float8_e4m3, shape=[n_size, k_size])
        gc = self.global_view(c_ptr, dtype=bfloat16, shape=[m_size, n_size])
        gsa = self.global_view(sa_ptr, dtype=float32, shape=[m_size, 1])
        gsb = self.global_view(sb_ptr, dtype=float32, shape=[1, n_size])
        sa = self.shared_tensor(dtype=float8_e4m3, shape=[num_stages, block_m, self.block_k])
        sb = self.shared_tensor(dtype=float8_e4m3, shape=[num_stages, block_n, self.block_k])
        pipe = Pipeline(num_stages, producer_arrivals=1, consumer_arrivals=1)
        order = self.mbarrier.alloc([1, 1])  # order[g]: the other group left the tensor cores

        with self.warp_group(8, 4):  # producer warp group: threads 256-383
            self.setmaxnreg(40)
            with self.single_warp(0):
                filled = self.produce_all(pipe, sa, sb, ga, gb, k_size, num_m, num_n)
                for _ in self.range(min(num_stages, filled)):  # drain the slots in use
                    pipe.producer_acquire()
                    pipe.producer_advance()
        with self.warp_group(0, 4):  # consumer warp group 0: the block's even tiles
            self.setmaxnreg(232)
            self.consume_fp8(0, pipe, order, sa, sb, gc, gsa, gsb, scale, k_size, num_m, num_n)
        with self.warp_group(4, 4):  # consumer warp group 1: the odd tiles
            self.setmaxnreg(232)
            self.consume_fp8(1, pipe, order, sa, sb, gc, gsa, gsb, scale, k_size, num_m, num_n)


def main() -> int:
    """Check MatmulFP8 (interpreter on CPU, CUDA on a GPU) and print a table."""
    try:
        import torch
    except ImportError:
        print("matmul_fp8 needs torch (float8_e4m3fn tensors)")
        return 1
    gpu = cuda_torch()
    rows, status = [], 0
    if gpu is None:
        # a few configs, pinned; num_sms=2 so that each block runs several tiles
        cases = [
            (cfg, rs, MatmulFP8(num_sms=2, row_scales=rs, **cfg))
            for cfg, rs in [
                (dict(num_stages=3, block_m=128, block_n=128, block_k=128, swizzle=4), True),
                (dict(num_stages=3, block_m=128, block_n=256, block_k=128, swizzle=8), False),
            ]
        ]
        for m, n, k in CPU_SIZES:
            for cfg, rs, kernel in cases:
                start = time.perf_counter()
                try:
                    ok, err, note, _, _ = run_once(kernel, torch, m, n, k, "cpu", rs)
                except Exception as e:  # noqa: BLE001 - report the failure, do not hide it
                    traceback.print_exception(e)
                    ok, err, note = False, float("nan"), type(e).__name__
                secs = time.perf_counter() - start
                status |= 0 if ok else 1
                what = " ".join(f"{a}={b}" for a, b in cfg.items()) + f" row_scales={rs}"
                rows.append([f"{m}x{n}x{k}", what, f"{err:.1e}", f"{secs:.1f} s",
                             "ok" if ok else f"FAIL {note}"])  # fmt: skip
        print("fp8 matmul on the tilus interpreter")
        print_table(["m x n x k", "config", "max err", "time", "status"], rows)
        return status
    kernel = MatmulFP8()
    for m, n, k in GPU_SIZES:
        try:
            ok, err, note, c, ins = run_once(kernel, gpu, m, n, k, "cuda")
            a8, b8, sa, sb, scale = ins
            args = (m, n, k, a8, b8, sa, sb, scale, c)
            secs = gpu_time(gpu, lambda args=args: kernel(*args))
            tflops = f"{2 * m * n * k / secs / 1e12:.0f}"
        except Exception as e:  # noqa: BLE001 - report the failure, do not hide it
            traceback.print_exception(e)
            ok, err, note, tflops = False, float("nan"), type(e).__name__, "-"
        status |= 0 if ok else 1
        rows.append([f"{m}x{n}x{k}", f"{err:.1e}", tflops, "ok" if ok else f"FAIL {note}"])
    print(f"fp8 matmul on {gpu.cuda.get_device_name()} (num_sms={sm_count()})")
    print_table(["m x n x k", "max err", "TFLOPS", "status"], rows)
    return status


if __name__ == "__main__":
    sys.exit(main())
