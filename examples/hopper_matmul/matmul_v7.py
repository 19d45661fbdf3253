"""Hopper matmul V7: ping-pong or cooperative warp groups, clusters with multicast, split-K, bf16.

``C = A @ B^T`` (fp16 or bf16 in, fp32 accumulate, the input type out). Changes on top of V6:

1. **Ping-pong.** In V6 both consumer warp groups share one C tile (half of its rows each), so
   both run their epilogue at the same time and the tensor cores idle meanwhile. In V7 each
   consumer warp group computes whole C tiles of ``block_m x block_n``, the two groups taking
   alternate tiles of the block's sequence (group 0 the even ones, group 1 the odd ones). The
   producer fills the ring in sequence order, so a group consumes the ``num_k`` slots of its
   tile and then skips the other group's ``num_k``. An *order barrier* pair hands the tensor
   cores from one group to the other: a group starts its mainloop only when the other group has
   finished its own, so one group's epilogue (cast, shared store, TMA store) runs while the
   other's WGMMAs run. (It also keeps each group's barrier waits at most one phase ahead of the
   ring: a group waits for a slot only when every earlier position has been consumed.)
2. **64-row tiles and split-K** for small M (64-256 rows are 1-4 M tiles): with ``split_k``
   the K tiles of each C tile are cut into up to that many parts, each a work unit of its own
   (the parts of a tile are consecutive units, so they run on different blocks at the same
   time). Every part stores its fp32 sums into a slot of its own in a workspace
   (``global_tensor``; plain stores, nothing to clear) and counts itself in with an atomic add
   (acquire-release, gpu scope) on the tile's counter; the part that counts in last loads the
   other parts' slots, adds them to its own sums, stores C and sets the counter back to 0 (the
   counters must be left clean: ``requires_clean=True``). No block waits for another. The last
   part holds a second register tile, which fits beside accumulators of up to 64 x 64 a thread
   group; ``partials="add"`` keeps one tile instead: every part adds its sums into the tile's
   sums (``red.add``, an L2 atomic per element) and the last one reads the total while clearing
   it (an atomic exchange with zeros), 3% slower at M = 64 on an H200. Split-K is used only when
   M has at most ``SPLIT_M_TILES`` tiles, so the workspace size is known when the kernel is
   built; larger M runs the same config unsplit. Coop configs split too, each consumer group
   combining its half of the tile on its own.
3. **bf16.** ``MatmulV7`` takes fp16 pointers and ``MatmulV7BF16`` bf16 ones; the body is one
   method (``matmul``) that reads the element type from the class.
4. **Clusters of 2 with TMA multicast** (``cluster_n=2``, 128-row tiles): the two blocks of a
   cluster compute neighbouring N tiles of the same M tile, so they need the same A tile; each
   loads one 64-row half of it with a multicast copy that lands in both blocks' slot and
   completes on both blocks' full barrier (every block expects the whole A tile and its own B
   tile), halving the L2-to-SM traffic of A. A slot is then written by both producers, so it is
   free only when both blocks' consumers are done with it: its empty barrier counts one arrival
   from each block (the consumer arrives on its own barrier and, through ``mapa``, on the
   peer's). The pair runs the same unit sequence, so both rings stay in step; a pair whose
   second N tile lies right of C loads zeros for it (TMA fills) and does not store it. A
   ``cluster.sync()`` before the first copy (the peer's barriers exist) and one before exit
   (no block leaves while its peer may still arrive on its barriers) frame the kernel.
5. **Cooperative groups** (``coop=1``, 128-row tiles): V6's split as a config of the same
   kernel: both consumer groups work on every unit, group ``g`` on rows ``[64 g, 64 g + 64)``
   (the A tile is staged in 64-row halves, a slot is freed by both groups). This keeps both
   groups busy when a block has a single unit (M = 256: 128 tiles of 128 x 128 on 132 SMs), and
   allows 128 x 256 tiles (64 x 256 accumulators a group).
6. **C from registers** (``epilogue="direct"``): the group stores its tile with global stores
   instead of through a shared C tile and a TMA store, so the ring gets that shared memory
   (7 instead of 5 stages of 128 x 128: M = 256 then runs 0.89x cuBLAS instead of 0.87x; at
   M = 64, 64 x 32 tiles with 18 stages run 0.99x, with 12 and a TMA store 0.97x): small M reads
   B once from DRAM and runs best with the most B bytes on their way. (Prefetching B into L2
   ahead of the ring with ``tma.prefetch`` measured 7-10% slower at M = 64 and 256, and 128-wide
   K tiles no faster, so neither is a knob.)
7. **One shared C tile** (``epilogue="tma1"``): the two groups take turns on a single shared C
   tile (in coop half of the block's tile) instead of holding one each, so the ring gets the
   other's shared memory (coop 128 x 256: 4 stages instead of 3). A pair of *turn* mbarriers
   orders them: a group waits for its turn, writes the tile, issues its TMA store, waits until
   the store has read the tile (``wait_group(0, read=True)``) and passes the turn on (every
   thread of the group arrives, so each thread's writes are released to the next); a unit
   that stores nothing (a split-K part that is not the last, a cluster's tile past C) passes it
   on too, so both groups see the same sequence of turns.
8. **256-row coop tiles** (``coop=1, block_m=256``): each group computes a 128 x ``block_n``
   half, so 256 x 128 tiles keep both groups on 128 x 128 accumulators; with ``cluster_n=2``
   the pair shares a 256-row A tile (each block multicasts 128 rows), as much L2 traffic saved
   per block as a multicast B of 128 x 256 tiles. Odd widths such as 192 and 224 columns trade
   a ragged last N tile for fewer idle SMs in the last wave (8192 columns: 43 or 37 N tiles).

9. **Stream-K** (``stream_k=1``, see ``matmul_v7_schedule``): persistent blocks each take
   the same number of K tiles instead of whole tiles, so the last wave leaves no SM idle (and
   with fewer tiles than SMs every SM still works); the parts of a tile cut between blocks
   store their fp32 sums in a workspace, and the last to count in on the tile's counter sums
   them and stores C.

10. **Clusters along M** (``cluster_m=2``, an option outside the space): the pair computes
   neighbouring M tiles of the same N tile and shares its B tile, each block multicasting
   ``block_n / 2`` rows of it (a slot's two halves are read as one ``[block_n, block_k]``
   operand through ``reshape_shared``), freed as with ``cluster_n``. cuBLAS runs 2x1
   clusters at M = 256, N = K = 8192, but here, pinned on an H200, the pair ran 0.891x cuBLAS
   against 0.926x for the same coop 128 x 128 tiles unclustered, and 128 x 256 pairs 1.022x at
   8192^3 against 1.038x for ``cluster_n=2``
   (``bench/results/2026-12-04-h200-r77-v7-cluster-m.txt``).

Everything else is V6's: persistent blocks (one per SM), V4's tile order (groups of
``swizzle`` N tiles swept down M, so blocks running together share B tiles in L2), a producer
warp issuing TMA copies, ``setmaxnreg`` (producer 40, consumers 232 registers per thread), and
an epilogue through shared memory with a TMA store that is waited for only before the group's
next tile is written into the same shared tile.

Run ``python examples/hopper_matmul/matmul_v7.py``.
"""

import sys

import harness
from matmul_v4 import Pipeline
from matmul_v6 import sm_count
from matmul_v7_schedule import SPLIT_M_TILES, V7Schedule

import tilus
from tilus import SharedTensor, bfloat16, float16, float32, int32, uint32
from tilus.utils import cdiv


# (block_m, block_n, num_stages, split_k, swizzle, cluster_n, coop, epilogue, stream_k): tiles of one
# consumer warp group (coop: of both) with the deepest ring that fits beside the C tiles (one
# shared by both groups with "tma1", none with "direct"). Large shapes: coop 128 x 256 and
# 256 x 128 with one shared C tile and 4 stages, alone and in clusters of 2. Measured on an H200
# (bench/v7_probe.py, pinned, fp16, bench/results/2026-12-02-h200-r51-v7-probe.txt): at 8192^3
# 1.062x-1.086x cuBLAS (the same tiles with a C tile per group and 3 stages 1.018x, 0.975x), at
# 4096 x 4096 x 14336 1.039x-1.084x (0.961x, 0.990x), at 3000 x 4096 x 4096 0.977x-0.985x;
# ping-pong 128 x 128 tiles (5 stages) stay for mid sizes. Small M streams B from DRAM once, so
# what counts is a unit on every SM with the most B bytes in flight: M = 64, N = K = 4096 runs
# best as 128 unsplit 64 x 32 tiles with 18 stages (0.99x; 64 x 64 unsplit 0.93x, split in 2
# 0.90x) and M = 256, N = K = 8192 as 128 x 128 tiles with 7 stages, C stored from registers
# (0.905x; coop 128 x 256 0.61x). 128 x 64 gives M = 256 two units a block (one group's
# epilogue overlaps the other's mainloop), coop 128 x 128 both groups on a block's one unit.
# With block_k 128 (two 64-column TMA boxes a stage, so each B row is read 256 contiguous bytes
# at a time), 64 x 32 tiles (8 stages) ran 1.030x cuBLAS at M = 64, N = K = 4096 and 64 x 64
# (6 stages) 1.038x at N = K = 8192, against 0.96-0.98x and 0.98x with block_k 64 (pinned, r60:
# bench/results/2026-12-02-h200-r60-v7-small-m-bk128.txt); at M = 256 it ran slower.
# Split-K (64 x 64 in 2 and 4 parts) stays for K-heavy shapes with few tiles. A split tile
# larger than 64 x 64 spills within the 168 registers ptxas gives every thread of a 384-thread
# block (and 64 x 256 tiles stored from registers spill 108 bytes: not in the space).
# Stream-K (stream_k=1) is not in the space. On large shapes, pinned on an H200, it ran 0.4%
# faster than the same tiles at 8192^3 but 15% slower at 4096 x 4096 x 14336 and 3000 x 4096
# x 4096 (its blocks work on tiles twice as far apart, so long-K panels fall out of L2;
# bench/results/2026-12-02-h200-r53-v7-stream-k.txt). With fewer tiles than SMs (M = 64-256)
# it fills every SM, but its best there ran 0.58x cuBLAS at 256 x 8192 x 8192 and 0.81x at 64 x
# 8192 x 8192, against 0.93x and 0.97x for the unsplit tiles
# (bench/results/2026-12-02-h200-r56-r58-v7-stream-k-small-m.txt).
@tilus.autotune(
    "block_m, block_n, block_k, num_stages, split_k, swizzle, cluster_n, coop, epilogue, stream_k",
    [
        (128, 256, 64, 4, 1, 8, 1, 1, "tma1", 0),
        (128, 256, 64, 4, 1, 4, 2, 1, "tma1", 0),
        (256, 128, 64, 4, 1, 8, 1, 1, "tma1", 0),
        (256, 128, 64, 4, 1, 4, 2, 1, "tma1", 0),
        (128, 128, 64, 5, 1, 8, 1, 0, "tma", 0),
        (128, 128, 64, 7, 1, 1, 1, 0, "direct", 0),
        (128, 128, 64, 6, 1, 1, 1, 1, "tma", 0),
        (128, 64, 64, 8, 1, 2, 1, 0, "tma", 0),
        (64, 128, 64, 6, 1, 2, 1, 0, "tma", 0),
        (64, 64, 64, 14, 1, 8, 1, 0, "direct", 0),
        (64, 64, 64, 8, 2, 8, 1, 0, "tma", 0),
        (64, 64, 64, 8, 4, 8, 1, 0, "tma", 0),
        (64, 32, 64, 18, 1, 8, 1, 0, "direct", 0),
        (64, 32, 64, 12, 1, 8, 1, 0, "tma", 0),
        (64, 64, 128, 6, 1, 8, 1, 0, "tma", 0),
        (64, 32, 128, 8, 1, 8, 1, 0, "tma", 0),
    ],
)
class MatmulV7(V7Schedule):
    """Persistent ping-pong matmul with TMA-store epilogues and split-K (fp16 pointers);
    ``num_sms`` (default: the GPU's SM count) is the number of persistent blocks."""

    dtype = float16

    def __init__(
        self, num_stages, block_m, block_n, block_k, swizzle, split_k=1, cluster_n=1, coop=0,
        num_sms=None, partials="store", epilogue="tma", stream_k=0, cluster_m=1,
    ):  # fmt: skip
        super().__init__(num_stages, block_m, block_n, block_k, swizzle)
        if coop and block_m not in (128, 256):
            raise tilus.TilusArgumentError(f"coop needs 128- or 256-row tiles, got {block_m}")
        if not coop and block_m > 128:
            raise tilus.TilusArgumentError(f"block_m > 128 needs coop, got {block_m}")
        if cluster_n not in (1, 2) or (cluster_n == 2 and (split_k != 1 or block_m < 128)):
            raise tilus.TilusArgumentError(
                f"cluster_n must be 1 or 2 (2 with 128-row tiles and no split-K), got {cluster_n}"
            )
        if cluster_m not in (1, 2) or (cluster_m == 2 and (split_k != 1 or cluster_n != 1)):
            raise tilus.TilusArgumentError(
                f"cluster_m must be 1 or 2 (2 without split-K and cluster_n), got {cluster_m}"
            )
        if cluster_m == 2 and block_n % 16:
            raise tilus.TilusArgumentError(
                f"cluster_m=2 multicasts block_n / 2 rows of B: block_n must be a multiple of "
                f"16, got {block_n}"
            )
        if partials not in ("store", "add"):
            raise tilus.TilusArgumentError(f"partials must be 'store' or 'add', got {partials!r}")
        if epilogue not in ("tma", "tma1", "direct"):
            raise tilus.TilusArgumentError(
                f"epilogue must be 'tma', 'tma1' or 'direct', got {epilogue!r}"
            )
        if stream_k not in (0, 1) or (stream_k and (split_k != 1 or cluster_n * cluster_m != 1)):
            raise tilus.TilusArgumentError(
                f"stream_k must be 0 or 1 (1 without split-K and clusters), got {stream_k}"
            )
        self.stream_k = stream_k
        self.split_k = split_k
        self.parted = split_k > 1 or bool(stream_k)  # tiles may be split into K parts
        self.partials = partials
        self.epilogue = epilogue
        self.cluster_n = cluster_n
        self.cluster_m = cluster_m
        self.cluster_size = cluster_m * cluster_n  # blocks of a cluster
        self.coop = coop
        # the A tile in 64-row halves: the cluster's blocks load one each, coop groups use one each
        self.halves = cluster_n == 2 or coop
        self.num_sms = self.num_sms_arg(num_sms)
        # persistent clusters: cluster c runs units c, c + num_clusters, ... in each of its blocks
        self.num_clusters = max(self.num_sms // self.cluster_size, 1)

    @staticmethod
    def num_sms_arg(num_sms):
        """The persistent blocks: ``num_sms``, or the GPU's SM count when None."""
        return num_sms if num_sms is not None else sm_count()

    def produce_all(self, pipe, sa, sb, ga, gb, k_size: int, num_m: int32, num_n: int):
        """The producer warp: every unit of the block in sequence, its K tiles in ring order;
        returns how many slots it filled."""
        split = self.splits(num_m, k_size)
        filled: int32 = 0
        first, units, step = self.unit_span(num_m, num_n, k_size, split)
        for unit in self.range(first, units, step):
            m_tile, n_tile, k_lo, k_cnt, _, _, _ = self.unit_work(unit, num_m, num_n, k_size, split)
            filled += k_cnt
            for kk in self.range(k_cnt, unroll=self.num_stages):
                offset_k = (k_lo + kk) * self.block_k
                pipe.producer_acquire()
                stage = pipe.producer_stage
                with self.single_thread():
                    self.mbarrier.arrive_and_expect_tx(
                        pipe.producer_barrier(),
                        transaction_bytes=sa[stage].nbytes + sb[stage].nbytes,
                    )
                if not self.halves:
                    self.tma.global_to_shared(
                        src=ga,
                        dst=sa[stage],
                        offsets=[m_tile * self.block_m, offset_k],
                        mbarrier=pipe.producer_barrier(),
                    )
                elif self.cluster_n == 1:  # coop: the two halves
                    for h in self.range(2, unroll=2):
                        self.tma.global_to_shared(
                            src=ga,
                            dst=sa[stage, h],
                            offsets=[m_tile * self.block_m + h * (self.block_m // 2), offset_k],
                            mbarrier=pipe.producer_barrier(),
                        )
                else:  # half of the pair's A tile
                    self.multicast_half(ga, sa[stage], m_tile * self.block_m, offset_k, pipe)
                if self.cluster_m == 1:
                    self.tma.global_to_shared(
                        src=gb,
                        dst=sb[stage],
                        offsets=[n_tile * self.block_n, offset_k],
                        mbarrier=pipe.producer_barrier(),
                    )
                else:  # half of the pair's B tile
                    self.multicast_half(gb, sb[stage], n_tile * self.block_n, offset_k, pipe)
                pipe.producer_advance()
        return filled

    def multicast_half(self, src, dst, row0: int32, offset_k: int32, pipe):
        """This block's half of a cluster pair's tile ``dst`` ([2, rows, block_k], whose first
        row is ``row0`` of ``src``), loaded once and multicast into both blocks' slot (and
        their full barriers)."""
        rank = self.cluster.blockRank
        self.tma.global_to_shared(
            src=src,
            dst=dst[rank],
            offsets=[row0 + rank * dst.shape[1], offset_k],
            mbarrier=pipe.producer_barrier(),
            multicast_mask=0b11,
        )

    def release(self, pipe, stage: int32, peer_empty):
        """Free ring slot ``stage``: in a cluster, in both blocks (the peer's producer
        multicasts into this block's slot too)."""
        if self.cluster_size == 1:
            pipe.consumer_release(stage)
        else:
            with self.single_thread():
                self.mbarrier.arrive(pipe.empty[stage])
                # relaxed: the WGMMAs that read the slot have retired (wait_group); a release
                # at cluster scope would fence the mainloop's critical path (with it, cluster
                # configs ran 3x slower on an H200, this fence being the likely cause)
                self.mbarrier.arrive(peer_empty[stage], sem="relaxed", scope="cluster")

    def mainloop_pp(self, group: int, pipe, sa: SharedTensor, sb: SharedTensor, acc, acc_hi,
                    num_k: int32, peer_empty):  # fmt: skip
        """``acc += A_tile @ B_tile^T`` over ``num_k`` ring slots, one WGMMA group in flight
        (V5's loop on whole tiles). In a cluster the A tile is two 64-row halves: ``acc``
        takes rows 0-63 and ``acc_hi`` rows 64-127 (the same WGMMAs as one 128-row tile);
        with ``coop`` group ``g`` takes half ``g`` into ``acc``."""
        prev_stage: int32 = 0
        for i in self.range(num_k, unroll=self.num_stages):
            pipe.consumer_acquire()
            self.wgmma.fence()
            if self.cluster_m == 1:
                b_tile = sb[pipe.consumer_stage].transpose()
            else:  # the two multicast halves are one [block_n, block_k] tile
                whole = self.reshape_shared(sb[pipe.consumer_stage], [self.block_n, self.block_k])
                b_tile = whole.transpose()
            if not self.halves:
                self.wgmma.mma(sa[pipe.consumer_stage], b_tile, acc)
            elif self.coop:
                self.wgmma.mma(sa[pipe.consumer_stage, group], b_tile, acc)
            else:
                self.wgmma.mma(sa[pipe.consumer_stage, 0], b_tile, acc)
                self.wgmma.mma(sa[pipe.consumer_stage, 1], b_tile, acc_hi)
            self.wgmma.commit_group()
            self.wgmma.wait_group(1)
            if i > 0:
                self.release(pipe, prev_stage, peer_empty)
            prev_stage = pipe.consumer_stage
            pipe.consumer_advance()
        self.wgmma.wait_group(0)
        self.release(pipe, prev_stage, peer_empty)

    def skip(self, pipe, num_k: int32):
        """Move the consumer position past the other group's ``num_k`` slots."""
        adv: int32 = pipe.consumer_stage + num_k
        pipe.consumer_stage = adv % self.num_stages
        if (adv // self.num_stages) % 2 == 1:
            pipe.consumer_phase ^= 1

    def consume_all(self, group: int, pipe, order, sa, sb, gc, ws, cnt, k_size: int,
                    num_m: int32, num_n: int, peer_empty, sc, turn):  # fmt: skip
        """Consumer warp group ``group``: the block's units ``group``, ``group + 2``, ..."""
        bm, bn = self.block_m, self.block_n
        split = self.splits(num_m, k_size)
        first_unit, num_units, stride = self.unit_span(num_m, num_n, k_size, split)
        order_phase: uint32 = 1 - group  # group 0 starts first
        c_phase: uint32 = 1 - group  # tma1: group 0 stores first
        if self.epilogue == "tma":
            sc = self.c_staging()
        flag = None
        if self.parted:  # the count a split tile's part read when it counted in
            flag = self.shared_tensor(dtype=int32, shape=[1])
        if group == 1 and first_unit < num_units:  # after group 0's first unit's slots
            first = self.unit_work(first_unit, num_m, num_n, k_size, split)
            self.skip(pipe, first[3])
        for unit in self.range(first_unit + group * stride, num_units, 2 * stride):
            m_tile, n_tile, _, k_cnt, entry, part, parts = self.unit_work(
                unit, num_m, num_n, k_size, split
            )
            acc_hi = None
            if self.cluster_n == 1:
                acc = self.register_tensor(dtype=float32, shape=[bm, bn], init=0.0)
            else:
                acc = self.register_tensor(dtype=float32, shape=[bm // 2, bn], init=0.0)
                acc_hi = self.register_tensor(dtype=float32, shape=[bm // 2, bn], init=0.0)
            self.mbarrier.wait(order[group], phase=order_phase)  # the other group's turn ended
            order_phase ^= 1
            self.mainloop_pp(group, pipe, sa, sb, acc, acc_hi, k_cnt, peer_empty)
            with self.single_thread():
                self.mbarrier.arrive(order[1 - group])  # hand the tensor cores over
            if unit + stride < num_units:  # skip the other group's next unit
                other = self.unit_work(unit + stride, num_m, num_n, k_size, split)
                self.skip(pipe, other[3])
            store: int32 = 1
            if self.split_k > 1:
                if parts > 1:
                    store = self.add_parts(acc, ws, cnt, flag, entry, part, parts)
            if n_tile >= num_n or m_tile >= num_m:  # a cluster's second tile past C
                store = 0
            row, col = m_tile * bm, n_tile * bn
            # a split tile's part leaves C to the last part to count in; on its own path,
            # where the epilogue stores nothing, so the accumulator is dead after the publish
            if self.stream_k and parts > 1:
                self.sk_publish(acc, ws, cnt, flag, gc, entry, part, parts, 0, row, col)
                self.epilogue_tile(group, turn, c_phase, 0, sc, gc, acc, acc_hi, row, col)
            else:
                self.epilogue_tile(group, turn, c_phase, store, sc, gc, acc, acc_hi, row, col)
            c_phase ^= 1
        self.finish_stores()

    def consume(self, group: int, pipe, order, sa, sb, gc, ws, cnt, k_size: int, num_m: int32,
                num_n: int, peer_empty, sc, turn):  # fmt: skip
        """Consumer warp group ``group``: ping-pong on alternate units, or ``coop``; ``sc`` and
        ``turn``: the C tile both groups share and its turn barriers (``epilogue="tma1"``)."""
        if self.coop:
            self.consume_coop(group, pipe, sa, sb, gc, ws, cnt, k_size, num_m, num_n, peer_empty,
                              sc, turn)  # fmt: skip
        else:
            self.consume_all(group, pipe, order, sa, sb, gc, ws, cnt, k_size, num_m, num_n,
                             peer_empty, sc, turn)  # fmt: skip

    def consume_coop(self, group: int, pipe, sa, sb, gc, ws, cnt, k_size: int, num_m: int32,
                     num_n: int, peer_empty, sc, turn):  # fmt: skip
        """``coop``: both consumer groups on every unit of the block (V6's split), group ``g``
        on half ``g`` of the tile's rows (``block_m / 2`` of them) with its own shared C tile
        (``tma1``: both on ``sc``); with split-K each group combines its half of the tile's
        parts on its own (own workspace entry and count)."""
        bn = self.block_n
        split = self.splits(num_m, k_size)
        if self.epilogue == "tma":
            sc = self.c_staging()
        flag = None
        if self.parted:  # the count a split tile's part read when it counted in
            flag = self.shared_tensor(dtype=int32, shape=[1])
        c_phase: uint32 = 1 - group  # tma1: group 0 stores first
        first_unit, num_units, stride = self.unit_span(num_m, num_n, k_size, split)
        for unit in self.range(first_unit, num_units, stride):
            m_tile, n_tile, _, k_cnt, entry, part, parts = self.unit_work(
                unit, num_m, num_n, k_size, split
            )
            acc = self.register_tensor(dtype=float32, shape=[self.block_m // 2, bn], init=0.0)
            self.mainloop_pp(group, pipe, sa, sb, acc, None, k_cnt, peer_empty)
            row = m_tile * self.block_m + group * (self.block_m // 2)
            store: int32 = 1
            if self.split_k > 1:
                if parts > 1:
                    store = self.add_parts(acc, ws, cnt, flag, 2 * entry + group, part, parts)
            if n_tile >= num_n or m_tile >= num_m:  # a cluster's second tile past C
                store = 0
            col = n_tile * bn
            if self.stream_k and parts > 1:  # as in consume_all
                self.sk_publish(acc, ws, cnt, flag, gc, entry, part, parts, group, row, col)
                self.epilogue_tile(group, turn, c_phase, 0, sc, gc, acc, None, row, col)
            else:
                self.epilogue_tile(group, turn, c_phase, store, sc, gc, acc, None, row, col)
            c_phase ^= 1
        self.finish_stores()

    def launch(self, m_size: int32, n_size: int):
        """Grid and block size (set in ``__call__``, from the parameters themselves)."""
        num_tiles = cdiv(m_size, self.block_m * self.cluster_m) * cdiv(
            n_size, self.block_n * self.cluster_n
        )
        # with split-K, a block per unit of the largest split (blocks without units exit)
        self.attrs.blocks = min(num_tiles * self.split_k, self.num_clusters) * self.cluster_size
        if self.stream_k:  # every block takes a run of K tiles
            self.attrs.blocks = self.num_sms
        if self.cluster_size > 1:
            self.attrs.cluster_blocks = self.cluster_size
        self.attrs.warps = 12  # two consumer warp groups + a producer warp group

    def matmul(self, m_size: int32, n_size: int, k_size: int, ga, gb, gc):
        """The kernel body, for either element type (``self.dtype``)."""
        dt, num_stages = self.dtype, self.num_stages
        block_m, block_n, block_k = self.block_m, self.block_n, self.block_k
        num_m = cdiv(m_size, block_m)
        num_n = cdiv(n_size, block_n)
        if not self.halves:
            sa = self.shared_tensor(dtype=dt, shape=[num_stages, block_m, block_k])
        else:  # the 64-row halves (loaded by the cluster's two blocks, used by coop groups)
            sa = self.shared_tensor(dtype=dt, shape=[num_stages, 2, block_m // 2, block_k])
        if self.cluster_m == 1:
            sb = self.shared_tensor(dtype=dt, shape=[num_stages, block_n, block_k])
        else:  # the halves of B loaded by the cluster's two blocks
            sb = self.shared_tensor(dtype=dt, shape=[num_stages, 2, block_n // 2, block_k])
        groups = 2 if self.coop else 1  # consumer groups that read each slot
        pipe = Pipeline(
            num_stages, producer_arrivals=1, consumer_arrivals=groups * self.cluster_size
        )
        order = None  # order[g]: the other group left the tensor cores (ping-pong)
        if not self.coop:
            order = self.mbarrier.alloc([1, 1])
        ws = None
        cnt = None
        if self.parted:  # per tile (coop: per half tile) the K parts' sums and a count
            entries = SPLIT_M_TILES * num_n * (2 if self.coop else 1)
            if self.stream_k:  # per streamed tile (fewer than 2S) a count, per block 2 slots
                entries = 2 * self.num_sms * (2 if self.coop else 1)
            rows = block_m // 2 if self.coop else block_m
            if self.stream_k:  # per block the sums of the split tiles its run starts and ends in
                shape = [entries * rows, block_n]
                ws = self.global_tensor(float32, shape, requires_clean=False)
            elif self.partials == "store":  # a slot per part, overwritten by every launch
                shape = [entries, self.split_k, rows, block_n]
                ws = self.global_tensor(float32, shape, requires_clean=False)
            else:  # one sum per tile, left zero
                ws = self.global_tensor(float32, [entries, rows, block_n], requires_clean=True)
            cnt = self.global_tensor(int32, [entries], requires_clean=True)
        sc = None
        turn = None
        if self.epilogue == "tma1":  # one C tile for both groups and the barriers of its turns
            sc = self.c_staging()
            # every thread of the passing group arrives: each writer of sc releases its own
            # writes to the next group (compute-sanitizer's racecheck follows that edge, not
            # one thread's arrival after a named-barrier sync)
            turn = self.mbarrier.alloc([128, 128])
        peer_empty = None
        if self.cluster_size > 1:  # the peer's empty barriers; both blocks' exist after the sync
            peer_empty = self.cluster.map_shared_addr(pipe.empty, 1 - self.cluster.blockRank)
            self.cluster.sync()

        with self.warp_group(8, 4):  # producer warp group: threads 256-383
            self.setmaxnreg(40)
            with self.single_warp(0):
                filled = self.produce_all(pipe, sa, sb, ga, gb, k_size, num_m, num_n)
                # drain: wait until the consumers have released every slot still in use
                for _ in self.range(min(num_stages, filled)):
                    pipe.producer_acquire()
                    pipe.producer_advance()

        with self.warp_group(0, 4):  # consumer warp group 0: the block's even units
            self.setmaxnreg(232)
            self.consume(
                0, pipe, order, sa, sb, gc, ws, cnt, k_size, num_m, num_n, peer_empty, sc, turn
            )
        with self.warp_group(4, 4):  # consumer warp group 1: the odd units
            self.setmaxnreg(232)
            self.consume(
                1, pipe, order, sa, sb, gc, ws, cnt, k_size, num_m, num_n, peer_empty, sc, turn
            )
        if self.cluster_size > 1:  # no block exits while its peer may still arrive on its barriers
            self.cluster.sync()

    def __call__(
        self,
        m_size: int32,
        n_size: int,
        k_size: int,
        a_ptr: ~float16,
        b_ptr: ~float16,
        c_ptr: ~float16,
    ):
        self.launch(m_size, n_size)
        ga = self.global_view(a_ptr, dtype=self.dtype, shape=[m_size, k_size])
        gb = self.global_view(b_ptr, dtype=self.dtype, shape=[n_size, k_size])
        gc = self.global_view(c_ptr, dtype=self.dtype, shape=[m_size, n_size])
        self.matmul(m_size, n_size, k_size, ga, gb, gc)


class MatmulV7BF16(MatmulV7):
    """:class:`MatmulV7` on bf16 operands (the same space)."""

    dtype = bfloat16

    def __call__(
        self,
        m_size: int32,
        n_size: int,
        k_size: int,
        a_ptr: ~bfloat16,
        b_ptr: ~bfloat16,
        c_ptr: ~bfloat16,
    ):
        self.launch(m_size, n_size)
        ga = self.global_view(a_ptr, dtype=self.dtype, shape=[m_size, k_size])
        gb = self.global_view(b_ptr, dtype=self.dtype, shape=[n_size, k_size])
        gc = self.global_view(c_ptr, dtype=self.dtype, shape=[m_size, n_size])
        self.matmul(m_size, n_size, k_size, ga, gb, gc)


def main() -> int:
    """Check V7 against NumPy and print a table; returns the exit status."""
    return harness.run(MatmulV7)


if __name__ == "__main__":
    sys.exit(main())
