"""Persistent warp-specialized W4A16 prefill matmul: Y^T tiles of 128 weight rows x X rows.

``Y = X @ dequant(W)^T`` as in ``matmul_wx_a16.py`` (same arguments and packing), computed as
``Y^T = dequant(W) @ X^T`` so that the weights are the register A operand of WGMMA and X (the
large operand at prefill) the shared B operand, ``block_m`` X rows wide (the WGMMA N, up to
256). The grid is one block per SM; block ``b`` computes tiles ``b``, ``b + num_sms``, ... in
an L2-friendly order (groups of ``swizzle`` X tiles swept across the weight tiles, so blocks
running together share both operands' K slices in L2). A producer warp (its warp group lends
registers to the consumers with ``setmaxnreg``) copies, per K tile, the packed weights of both
consumer warp groups (64 rows each) and the X tile into a ring of ``num_stages`` shared slots
with TMA, running on across tiles. Each consumer warp group loads its packed tile straight
into the A fragment's layout, casts it with the magic-number cast, multiplies it by the
group's scale in fp16 (one fp32 accumulator for all of K) and issues the WGMMA; one WGMMA
group stays in flight (``wait_group(1)``), so the next 64-K step's cast runs while the tensor
cores work on the current one, and a slot is freed as soon as the WGMMA that read it retired.
With ``cluster=2`` the two blocks of a cluster take neighbouring weight tiles of one X tile
and each multicasts half of the X tile into both blocks' slot (half the X bytes an SM pulls
from L2; a slot is free when both blocks' consumers are done with it). With ``lag`` the
second consumer group trails the first by whole scale groups, so that their epilogues do not
leave the tensor cores idle at the same time. The epilogue stores the Y^T tile transposed:
``epilogue="direct"`` straight from registers through a transposed view of Y, ``"tma"``
through shared Y tiles and TMA stores waited for only before the next tile reuses them (the
producer meanwhile fills the ring with the next tile's first K steps either way). With
``prepacked`` the weights come in the byte order of :func:`prepack_torch`, in which each
thread's A-fragment bytes of a 64-K step are one 16-byte shared load (plain bytes: 16
single-byte loads), relabeled to logical K by a register reshape and permute.
"""

from __future__ import annotations

from matmul_wx_a16_pipe import Ring  # the same full/empty ring

import tilus
from tilus import float16, float32, int32, uint8, uint32, void_p
from tilus.errors import TilusArgumentError
from tilus.ir.layout import reduce, wgmma_acc
from tilus.ir.layout.derived import view_layout
from tilus.ir.layout.register import Factor, RegisterLayout
from tilus.target import sm_count
from tilus.utils import cdiv

ROWS = 64  # rows of W per consumer warp group: the WGMMA M
KSTEP = 64  # K of one WGMMA group (a slot of block_k holds block_k / KSTEP of them)
GROUPS = 2  # consumer warp groups: a tile has GROUPS * ROWS weight rows
SMEM_LIMIT = 227 * 1024  # dynamic shared memory of a Hopper block
#: with ``prepacked``: a 64-K step's packed weight bytes in the order of ``prepack_torch``, in
#: which each 16-row group's 512 bytes are [g, q, j, rh] (lane ``4 g + q`` of a warp holds
#: logical rows ``g`` and ``g + 8``, bytes ``q + 4 j``): lane ``4 g + q`` of warp ``w`` then
#: reads the 16 bytes at storage row ``16 w + 2 g + q // 2``, bytes ``16 (q % 2) ..`` (one
#: 16-byte load), in the A fragment's register order (``j``, then the row half ``rh``)
PREPACKED_WORDS = RegisterLayout(
    shape=(ROWS, KSTEP // 8),
    threads=(Factor(0, 4, 16), Factor(0, 8, 2), Factor(0, 2, 1), Factor(1, 2, 4)),
    locals=(Factor(1, 4, 1),),
)


def prepack_torch(torch, w_packed):
    """Plain packed 4-bit weights (uint8 [N, K / 2], K a multiple of 64) in the prefill
    kernel's byte order (for ``prepacked=True``; N padded with zero rows to a multiple of 16):
    in each 16-row x 64-K chunk the byte of logical row ``8 rh + g``, byte ``q + 4 j`` goes
    to storage row ``2 g + q // 2``, byte ``16 (q % 2) + 2 j + rh``."""
    n, kb = w_packed.shape
    if kb % (KSTEP // 2):
        raise TilusArgumentError(f"prepack: K = {2 * kb} is not a multiple of {KSTEP}")
    pad = -n % 16
    if pad:
        w_packed = torch.cat([w_packed, w_packed.new_zeros(pad, kb)])
        n += pad
    t = w_packed.reshape(n // 16, 2, 8, kb // 32, 8, 2, 2)  # [R, rh, g, C, j, qh, ql]
    t = t.permute(0, 2, 5, 3, 6, 4, 1)  # [R, g, qh, C, ql, j, rh]
    return t.reshape(n, kb).contiguous()


#: (block_m, block_k, num_stages, swizzle, epilogue, thread_arrive, cluster, lag): X rows of a
#: tile (the WGMMA N), K of a ring slot, slots, X tiles of a raster group, the epilogue, how a
#: slot is freed, the blocks of a cluster (2: neighbouring weight tiles of one X tile, each
#: block multicasting half of it, which halves the X bytes an SM pulls from L2) and the scale
#: groups consumer group 1 trails group 0 by. The space holds the configs that passed the GPU
#: tests on an H200 (2026-12-02) and were timed there (bench/results/2026-12-02-h200-r51-w4big-
#: prefill.txt; ratio to fp16 cuBLAS at M = 4096, N = K = 8192 / N = 28672, K = 4096): the
#: first 0.75 / 0.71, the cluster one 0.72 / 0.69, the TMA-epilogue one 0.72 / 0.69. The
#: pipelined kernel's best measured 0.78 / 0.75 beside them, so ``matmul_wx_a16`` does not run
#: this kernel by default (``PREFILL_MIN_M``). Faster but outside the space: ``epilogue="tma"``
#: with ``thread_arrive=True`` (0.81 / 0.81, checked at those two shapes only) and
#: ``prepacked=True`` (one 16-byte shared load a thread a step; its GPU test passed in the
#: tiers of bench/results/2026-12-02-h200-r52-gpu-tier-llm-shapes.txt, not timed).
PREFILL_SPACE = [
    (256, 64, 6, 4, "direct", False, 1, 0),
    (256, 64, 6, 4, "direct", False, 2, 0),
    (256, 64, 4, 4, "tma", False, 2, 1),
]
PREFILL_GROUP = "block_m, block_k, num_stages, swizzle, epilogue, thread_arrive, cluster, lag"


def pinned(block_m=256, block_k=64, num_stages=4, swizzle=4, epilogue="direct",
           thread_arrive=False, cluster=1, lag=0) -> dict:  # fmt: skip
    """Constructor arguments pinning one config (the autotune group is pinned as a whole)."""
    return dict(block_m=block_m, block_k=block_k, num_stages=num_stages, swizzle=swizzle,
                epilogue=epilogue, thread_arrive=thread_arrive, cluster=cluster,
                lag=lag)  # fmt: skip


def smem_bytes(block_m: int, block_k: int, num_stages: int, epilogue: str) -> int:
    """Shared bytes of a config: the ring (packed W and X tiles) and the shared Y tiles."""
    ring = num_stages * (GROUPS * ROWS * block_k // 2 + block_m * block_k * 2)
    return ring + (GROUPS * block_m * ROWS * 2 if epilogue == "tma" else 0)


@tilus.autotune(PREFILL_GROUP, PREFILL_SPACE)
class MatmulWxA16Prefill(tilus.Script):
    """``Y[M, N] = X[M, K] @ dequant(W[N, K])^T``, persistent, for large M (prefill);
    ``num_sms`` (default: the GPU's SM count) is the number of persistent blocks."""

    def __init__(
        self, wdtype=tilus.uint4b, group: int = 128, block_m: int = 256, block_k: int = 64,
        num_stages: int = 4, swizzle: int = 4, epilogue: str = "direct",
        thread_arrive: bool = False, cluster: int = 1, lag: int = 0, prepacked: bool = False,
        num_sms=None,
    ):  # fmt: skip
        super().__init__()
        if wdtype not in (tilus.uint4b, tilus.int4b):
            raise TilusArgumentError(f"wdtype must be uint4b or int4b, got {wdtype}")
        if block_k % KSTEP or group % block_k:
            raise TilusArgumentError(
                f"block_k {block_k} must be a multiple of {KSTEP} dividing the group {group}"
            )
        if group % (2 * KSTEP):  # the two alternating A tiles of a scale group (see consume)
            raise TilusArgumentError(f"group must be a multiple of {2 * KSTEP}, got {group}")
        if block_m % 8 or not 8 <= block_m <= 256:
            raise TilusArgumentError(f"block_m must be a multiple of 8 in [8, 256], got {block_m}")
        if thread_arrive and epilogue == "direct":  # measured: wrong results on an H200
            raise TilusArgumentError(
                "thread_arrive needs epilogue='tma' (its group sync each tile): with the direct "
                "epilogue the consumer warps drift apart across tiles and the results are wrong"
            )
        if cluster not in (1, 2) or (cluster == 2 and (thread_arrive or block_m % 16)):
            raise TilusArgumentError(
                f"cluster must be 1 or 2 (2 with thread_arrive=False and block_m a multiple of "
                f"16), got cluster {cluster}, thread_arrive {thread_arrive}, block_m {block_m}"
            )
        if lag < 0 or lag * group // KSTEP >= num_stages:
            raise TilusArgumentError(
                f"lag {lag}: the second consumer group may trail by fewer K steps than the "
                f"{num_stages} slots ({lag * group // KSTEP} steps)"
            )
        if epilogue not in ("direct", "tma"):
            raise TilusArgumentError(f"epilogue must be 'direct' or 'tma', got {epilogue!r}")
        if smem_bytes(block_m, block_k, num_stages, epilogue) > SMEM_LIMIT:
            raise TilusArgumentError(
                f"block_m {block_m}, block_k {block_k}, {num_stages} stages, epilogue "
                f"{epilogue!r}: {smem_bytes(block_m, block_k, num_stages, epilogue)} bytes of "
                f"shared memory, more than the {SMEM_LIMIT} a block has"
            )
        self.wdtype, self.group, self.block_m, self.block_k = wdtype, group, block_m, block_k
        self.num_stages, self.swizzle, self.epilogue = num_stages, swizzle, epilogue
        self.thread_arrive, self.cluster_n, self.lag = thread_arrive, cluster, lag
        self.prepacked = prepacked
        self.num_sms = num_sms if num_sms is not None else sm_count()
        # persistent clusters: cluster q runs units q, q + num_clusters, ... in each of its blocks
        self.num_clusters = max(self.num_sms // cluster, 1)
        self.half = block_m // cluster  # X rows of a part (the pair's blocks load one each)
        self.ktiles = list(range(group // block_k))  # host lists: loops over them are unrolled
        self.groups = list(range(GROUPS))
        self.steps = list(range(block_k // KSTEP))

    def tile_coords(self, tile: int32, num_w: int, num_x: int32):
        """(weight tile, X tile) of linear tile ``tile``: groups of ``swizzle`` X tiles, the
        X tile fastest inside a group, swept across the weight tiles (a narrower last group
        when the X tiles are not a multiple of ``swizzle``)."""
        sw = self.swizzle
        full_groups = num_x // sw
        last_width = num_x - full_groups * sw
        grp, pos = self.fast_divmod(tile, num_w * sw)
        w_tile: int32 = 0
        dx: int32 = 0
        if grp < full_groups:
            w_tile, dx = self.fast_divmod(pos, sw)
        else:  # only reached when last_width > 0
            w_tile, dx = self.fast_divmod(pos, max(last_width, 1))
        return w_tile, grp * sw + dx

    def __call__(
        self, m_size: int32, n_size: int, k_size: int,
        x_ptr: ~float16, w_ptr: void_p, s_ptr: ~float16, y_ptr: ~float16,
    ):  # fmt: skip
        bm, bk, g, ns = self.block_m, self.block_k, self.group, self.num_stages
        msg = f"K = {k_size} is not a multiple of the scale group {g}"
        self.static_assert(k_size % g == 0, msg)  # CHECK:group
        num_w = cdiv(n_size, GROUPS * ROWS)
        num_x = cdiv(m_size, bm)
        num_u = cdiv(num_w, self.cluster_n)  # a unit: an X tile times a cluster's weight tiles
        self.attrs.blocks = min(num_u * num_x, self.num_clusters) * self.cluster_n
        if self.cluster_n > 1:
            self.attrs.cluster_blocks = self.cluster_n
        self.attrs.warps = 4 * GROUPS + 4  # the consumer warp groups and a producer warp group
        gx = self.global_view(x_ptr, dtype=float16, shape=[m_size, k_size])
        gw = self.global_view(w_ptr, dtype=uint8, shape=[n_size, k_size // 2])
        gs = self.global_view(s_ptr, dtype=float16, shape=[n_size, k_size // g])
        if self.epilogue == "tma":  # Y itself, stored from shared Y tiles
            msg = f"epilogue 'tma' needs N a multiple of 8 (16-byte rows of Y), got {n_size}"
            self.static_assert(n_size % 8 == 0, msg)  # CHECK:tma_rows
            gy = self.global_view(y_ptr, dtype=float16, shape=[m_size, n_size])
        else:  # Y^T [N, M] over Y's storage, stored from the Y^T tiles in registers
            gy = self.global_view(y_ptr, dtype=float16, shape=[n_size, m_size], strides=[1, n_size])
        steps = bk // KSTEP  # the 64-K steps of a slot, each a shared tile of its own
        if self.prepacked:  # 32-bit words: a thread's 16 bytes are one load
            rows = cdiv(n_size, 16) * 16  # the padded rows (a 16-row group's bytes are mixed)
            gw = self.global_view(w_ptr, dtype=uint32, shape=[rows, k_size // 8])
            sw = self.shared_tensor(dtype=uint32, shape=[ns, GROUPS, steps, ROWS, KSTEP // 8])
        else:
            sw = self.shared_tensor(dtype=uint8, shape=[ns, GROUPS, steps, ROWS, KSTEP // 2])
        # the X tile in parts of `half` rows: in a cluster each block multicasts one part
        sx = self.shared_tensor(dtype=float16, shape=[ns, steps, self.cluster_n, self.half, KSTEP])
        # arrivals that free a slot: every consumer thread, or one a group (of both blocks)
        per_group = 128 if self.thread_arrive else self.cluster_n
        ring = Ring(ns, GROUPS * per_group)
        lag_bar = None  # consumer group 1 starts once group 0 has done `lag` scale groups
        if self.lag > 0:
            lag_bar = self.mbarrier.alloc([1])
        peer_empty = None
        if self.cluster_n > 1:  # the peer's empty barriers; both blocks' exist after the sync
            peer_empty = self.cluster.map_shared_addr(ring.empty, 1 - self.cluster.blockRank)
            self.cluster.sync()
        with self.warp_group(4 * GROUPS, 4):  # the producer warp group lends its registers
            self.setmaxnreg(40)
            with self.single_warp(0):
                self.produce(ring, sw, sx, gw, gx, k_size, num_u, num_x)
        for c in self.groups:
            with self.warp_group(4 * c, 4):
                self.setmaxnreg(232)
                self.consume(c, ring, peer_empty, lag_bar, sw, sx, gs, gy, k_size, num_u, num_x)
        if self.cluster_n > 1:  # no block exits while its peer may still arrive on its barriers
            self.cluster.sync()

    def rank(self):
        """The block's rank in its cluster (0 without clusters)."""
        return self.cluster.blockRank if self.cluster_n > 1 else 0

    def unit_tile(self, unit: int32, num_u: int, num_x: int32):
        """(weight tile, X tile) of the block in work unit ``unit``."""
        w_unit, x_tile = self.tile_coords(unit, num_u, num_x)
        return w_unit * self.cluster_n + self.rank(), x_tile

    def produce(self, ring, sw, sx, gw, gx, k_size: int, num_u: int, num_x: int32):
        """The producer warp: for every tile of the block, per K tile, wait for a free slot
        and copy into it both consumer groups' packed weight tiles and the X tile; then wait
        until the consumers have freed every slot (no copy is in flight at exit)."""
        bk = self.block_k
        first = self.blockIdx.x // self.cluster_n
        for unit in self.range(first, num_u * num_x, self.num_clusters):
            w_tile, x_tile = self.unit_tile(unit, num_u, num_x)
            on: int32 = w_tile * (GROUPS * ROWS)
            om: int32 = x_tile * self.block_m
            for k0 in self.range(0, k_size, bk):
                self.mbarrier.wait(ring.empty[ring.p_stage], phase=ring.p_phase, sem="relaxed")
                st = ring.p_stage
                with self.single_thread():
                    self.mbarrier.arrive_and_expect_tx(
                        ring.full[st], transaction_bytes=sw[st].nbytes + sx[st].nbytes
                    )
                for j in self.steps:
                    kj = k0 + j * KSTEP
                    for c in self.groups:
                        if self.prepacked:  # the step's first 32-bit word
                            self.tma.global_to_shared(src=gw, dst=sw[st, c, j],
                                                      offsets=[on + c * ROWS, kj // 8],
                                                      mbarrier=ring.full[st])  # fmt: skip
                        else:
                            self.tma.global_to_shared(src=gw, dst=sw[st, c, j],
                                                      offsets=[on + c * ROWS, kj // 2],
                                                      mbarrier=ring.full[st])  # fmt: skip
                    if self.cluster_n == 1:
                        self.tma.global_to_shared(src=gx, dst=sx[st, j, 0], offsets=[om, kj],
                                                  mbarrier=ring.full[st])  # fmt: skip
                    else:  # this block's part of the X tile, into both blocks' slot
                        r = self.rank()
                        self.tma.global_to_shared(src=gx, dst=sx[st, j, r],
                                                  offsets=[om + r * self.half, kj],
                                                  mbarrier=ring.full[st],
                                                  multicast_mask=0b11)  # fmt: skip
                ring.p_advance()
        tiles = cdiv(num_u * num_x - first, self.num_clusters)
        for _ in self.range(min(self.num_stages, tiles * (k_size // bk))):
            self.mbarrier.wait(ring.empty[ring.p_stage], phase=ring.p_phase, sem="relaxed")
            ring.p_advance()

    def release(self, ring, peer_empty, stage: int32):
        """Free ring slot ``stage`` once the WGMMA that read it retired (``wait_group``) and
        every thread of the group loaded its packed weights from it: with ``thread_arrive``
        every thread arrives on its own (no group-wide barrier on the mainloop's path);
        without it the group syncs and one thread arrives (in a cluster, on both blocks'
        barriers)."""
        if self.thread_arrive:
            self.mbarrier.arrive(ring.empty[stage])
        else:
            self.sync()
            with self.single_thread():
                self.mbarrier.arrive(ring.empty[stage])
                if self.cluster_n > 1:  # the peer multicasts into this slot too
                    # relaxed: the slot's X part is read by the retired WGMMAs alone (a
                    # cluster-scope release would fence the mainloop's path)
                    self.mbarrier.arrive(peer_empty[stage], sem="relaxed", scope="cluster")

    def consume(self, c: int, ring, peer_empty, lag_bar, sw, sx, gs, gy, k_size: int,
                num_u: int, num_x: int32):  # fmt: skip
        """Consumer warp group ``c``: rows ``[64 c, 64 c + 64)`` of every tile of the block. A
        slot's K tile is multiplied in 64-K steps, each its own WGMMA group; a scale group has
        an even number of steps, so the two A tiles of one iteration alternate and the one in
        flight is never overwritten. With ``lag`` group 1 trails group 0 by that many scale
        groups (within the ring), so each group's epilogue overlaps the other's last or first
        WGMMAs instead of both leaving the tensor cores idle at once."""
        bm, hm = self.block_m, self.half
        a_bytes = view_layout(wgmma_acc(ROWS, KSTEP), 4, 8, [ROWS, KSTEP // 2])
        s_layout = reduce(wgmma_acc(ROWS, KSTEP), [1], keepdims=True)
        sy = None
        if self.epilogue == "tma":
            sy = self.shared_tensor(dtype=float16, shape=[self.cluster_n, hm, ROWS])
        last_group = k_size // self.group - 1
        first = self.blockIdx.x // self.cluster_n
        if self.lag > 0 and c == 1 and first < num_u * num_x:
            self.mbarrier.wait(lag_bar[0], phase=0)
        for unit in self.range(first, num_u * num_x, self.num_clusters):
            w_tile, x_tile = self.unit_tile(unit, num_u, num_x)
            row: int32 = w_tile * (GROUPS * ROWS) + c * ROWS
            om: int32 = x_tile * bm
            # one accumulator per part of the X tile (a cluster's block multiplies both parts)
            acc = self.register_tensor(dtype=float32, shape=[ROWS, hm], init=0.0)
            acc1 = None
            if self.cluster_n > 1:
                acc1 = self.register_tensor(dtype=float32, shape=[ROWS, hm], init=0.0)
            s = self.load_global(gs, offsets=[row, 0], shape=[ROWS, 1])
            self.annotate_layout(s, s_layout)
            for gi in self.range(last_group + 1):
                # the next group's scales, loaded a group ahead (the last group reloads its own)
                s_next = self.load_global(gs, offsets=[row, min(gi + 1, last_group)],
                                          shape=[ROWS, 1])  # fmt: skip
                self.annotate_layout(s_next, s_layout)
                for kt in self.ktiles:  # unrolled: each step has its own A tile
                    st = ring.c_stage
                    self.mbarrier.wait(ring.full[st], phase=ring.c_phase)
                    for j in self.steps:
                        if self.prepacked:  # one 16-byte load a thread, the bytes relabeled
                            qw = self.load_shared(sw[st, c, j])
                            self.annotate_layout(qw, PREPACKED_WORDS)
                            qp = self.view(qw, dtype=uint8)
                            # storage [w, g, q_hi, q_lo, j, rh] -> logical [w, rh, g, j, q_hi, q_lo]
                            q6 = self.reshape(qp, [4, 8, 2, 2, 8, 2])
                            q6 = q6.permute([0, 5, 1, 4, 2, 3])
                            qb = self.reshape(q6, [ROWS, KSTEP // 2])
                        else:
                            qb = self.load_shared(sw[st, c, j])
                        self.annotate_layout(qb, a_bytes)  # the bytes of the A fragment
                        if self.wdtype == tilus.uint4b:  # c - 8 is int4b(c ^ 8): the cast's bias
                            qb = qb ^ 0x88
                        w = self.cast(self.view(qb, dtype=tilus.int4b), float16) * s
                        self.wgmma.fence()
                        self.wgmma.mma(w, sx[st, j, 0].transpose(), acc)
                        if self.cluster_n > 1:
                            self.wgmma.mma(w, sx[st, j, 1].transpose(), acc1)
                        self.wgmma.commit_group()
                        self.wgmma.wait_group(1)  # every earlier step has retired
                        if j == 0:  # so has the previous slot's last step: free that slot
                            if kt > 0 or gi > 0:  # (the tile's first slot has none)
                                prev = (st + self.num_stages - 1) % self.num_stages
                                self.release(ring, peer_empty, prev)
                    ring.c_advance()
                self.assign(s, s_next)
                if self.lag > 0 and c == 0:
                    if unit == first and gi == min(self.lag, last_group + 1) - 1:
                        with self.single_thread():
                            self.mbarrier.arrive(lag_bar[0])  # group 1 may start
            self.wgmma.wait_group(0)
            self.release(ring, peer_empty, (ring.c_stage + self.num_stages - 1) % self.num_stages)
            if self.epilogue == "tma":
                self.store_tma(sy, gy, acc, acc1, om, row)
            else:
                self.store_global(gy, self.cast(acc, float16), offsets=[row, om])
                if self.cluster_n > 1:
                    self.store_global(gy, self.cast(acc1, float16), offsets=[row, om + hm])
        if self.epilogue == "tma":
            with self.single_thread():
                self.tma.wait_group(0, read=True)  # sy is read: the block may exit

    def store_tma(self, sy, gy, acc, acc1, om: int32, row: int32):
        """The Y tile ``acc^T`` (and in a cluster ``acc1^T`` below it) at ``(om, row)`` of Y
        through the shared tiles ``sy`` and TMA stores (clipped at Y's edges), waited for only
        before the next tile overwrites ``sy``."""
        with self.single_thread():  # the same elected thread that issued the last store
            self.tma.wait_group(0, read=True)
        self.sync()
        self.store_shared(sy[0], self.transpose(self.cast(acc, float16)))
        if self.cluster_n > 1:
            self.store_shared(sy[1], self.transpose(self.cast(acc1, float16)))
        self.fence.proxy_async(space="shared")  # the generic writes become visible to TMA
        self.sync()
        with self.single_thread():
            self.tma.shared_to_global(sy[0], gy, offsets=[om, row])
            if self.cluster_n > 1:
                self.tma.shared_to_global(sy[1], gy, offsets=[om + self.half, row])
            self.tma.commit_group()
