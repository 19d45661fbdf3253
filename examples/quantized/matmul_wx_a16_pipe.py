"""Pipelined W4A16 matmul on the tensor cores: a TMA ring of packed weight tiles and X tiles.

``Y = X @ dequant(W)^T`` as in ``matmul_wx_a16.py`` (same arguments and packing), computed as
``Y^T = dequant(W) @ X^T`` so that W is the register A operand of WGMMA. A producer warp
copies, per K tile, the packed uint8 weight tile of each consumer warp group (64 rows) and the
X tile (the B operand, K-major) into a ring of ``num_stages`` shared slots with TMA; the
copies run ahead of the consumers by the whole ring. Each consumer warp group loads its
packed tile from shared memory straight into the A fragment's layout, casts it to fp16 with
the magic-number cast (uint4b codes are XOR-ed with 8 first, so the cast's own bias removes
the zero point), and multiplies it by X with WGMMA into a per-group accumulator; at the end
of each scale group that accumulator is scaled by the group's scales (one per row of W) and
added to the result, so the weights are never multiplied in fp16. ``split_k`` blocks share
the K range of a tile when M is one tile (decode), combined as in ``matmul_wx_a16.py``.
"""

from __future__ import annotations

from split_k import SplitKParts

import tilus
from tilus import float16, float32, int32, uint8, uint32, void_p
from tilus.errors import TilusArgumentError
from tilus.ir.layout import reduce, wgmma_acc
from tilus.ir.layout.derived import view_layout
from tilus.utils import cdiv

ROWS = 64  # rows of W per consumer warp group: the WGMMA M


class Ring(tilus.Class):
    """Full/empty mbarrier pairs of a ring of ``num_stages`` slots, and each side's position."""

    def __init__(self, num_stages: int, consumers: int):
        self.num_stages: int = num_stages
        self.full = self.mbarrier.alloc([1] * num_stages)
        self.empty = self.mbarrier.alloc([consumers] * num_stages)
        self.p_stage: int32 = 0
        self.p_phase: uint32 = self.mbarrier.producer_initial_phase
        self.c_stage: int32 = 0
        self.c_phase: uint32 = self.mbarrier.consumer_initial_phase

    def p_advance(self):
        """The producer's next slot."""
        self.p_stage = (self.p_stage + 1) % self.num_stages
        if self.p_stage == 0:
            self.p_phase ^= 1

    def c_advance(self):
        """The consumer's next slot."""
        self.c_stage = (self.c_stage + 1) % self.num_stages
        if self.c_stage == 0:
            self.c_phase ^= 1


#: (block_m, consumers, num_stages, split_k, block_k, scale_w, regs_to_consumers, overlap):
#: decode shapes (X one M tile, split-K over the blocks) and prefill ones (X the wide WGMMA N)
PIPE_SPACE = [
    (16, 1, 4, 8, 128, False, False, False),
    (16, 2, 8, 4, 64, False, False, False),
    (8, 1, 8, 4, 64, False, False, False),
    (16, 1, 8, 8, 64, True, False, True),
    (256, 2, 4, 1, 64, True, True, False),
    (256, 2, 3, 1, 128, True, True, False),
    (128, 2, 4, 1, 64, True, True, True),
]
PIPE_GROUP = "block_m, consumers, num_stages, split_k, block_k, scale_w, regs_to_consumers, overlap"


def pinned(
    block_m=16, consumers=1, num_stages=4, split_k=1, block_k=64, scale_w=False,
    regs_to_consumers=False, overlap=False,
) -> dict:  # fmt: skip
    """Constructor arguments pinning one config (the autotune group is pinned as a whole)."""
    return dict(block_m=block_m, consumers=consumers, num_stages=num_stages, split_k=split_k,
                block_k=block_k, scale_w=scale_w, regs_to_consumers=regs_to_consumers,
                overlap=overlap)  # fmt: skip


@tilus.autotune(PIPE_GROUP, PIPE_SPACE)
class MatmulWxA16Pipe(SplitKParts, tilus.Script):
    """``Y[M, N] = X[M, K] @ dequant(W[N, K])^T`` with a TMA ring and register-A WGMMA."""

    def __init__(
        self, wdtype=tilus.uint4b, group: int = 128, block_m: int = 16, consumers: int = 1,
        num_stages: int = 4, split_k: int = 1, block_k: int = 64, scale_w: bool = False,
        regs_to_consumers: bool = False, overlap: bool = False,
    ):  # fmt: skip
        super().__init__()
        if wdtype not in (tilus.uint4b, tilus.int4b):
            raise TilusArgumentError(f"wdtype must be uint4b or int4b, got {wdtype}")
        if group % block_k:
            raise TilusArgumentError(f"group {group} must be a multiple of block_k {block_k}")
        self.wdtype, self.group, self.block_m, self.block_k = wdtype, group, block_m, block_k
        self.consumers, self.num_stages, self.split_k = consumers, num_stages, split_k
        self.scale_w, self.regs_to_consumers = scale_w, regs_to_consumers
        if overlap and not scale_w:
            raise TilusArgumentError("overlap needs scale_w (one accumulator for every tile)")
        if overlap and (group // block_k) % 2:
            raise TilusArgumentError("overlap needs an even number of K tiles a scale group")
        self.overlap, self.ktiles = overlap, list(range(group // block_k))
        self.groups = list(range(consumers))  # a host list: loops over it are unrolled

    def __call__(
        self, m_size: int32, n_size: int, k_size: int,
        x_ptr: ~float16, w_ptr: void_p, s_ptr: ~float16, y_ptr: ~float16,
    ):  # fmt: skip
        bm, bk, g, nc, ns = self.block_m, self.block_k, self.group, self.consumers, self.num_stages
        bn = ROWS * nc
        msg = f"K = {k_size} is not a multiple of the scale group {g}"
        self.static_assert(k_size % g == 0, msg)  # CHECK:group
        num_n = cdiv(n_size, bn)
        self.attrs.blocks = [num_n, cdiv(m_size, bm), self.split_k]
        # the consumer warp groups and the producer warp (or warp group)
        self.attrs.warps = 4 * nc + (4 if self.regs_to_consumers else 1)
        gx = self.global_view(x_ptr, dtype=float16, shape=[m_size, k_size])
        gw = self.global_view(w_ptr, dtype=uint8, shape=[n_size, k_size // 2])
        gs = self.global_view(s_ptr, dtype=float16, shape=[n_size, k_size // g])
        gyt = self.global_view(y_ptr, dtype=float16, shape=[n_size, m_size], strides=[1, n_size])
        split: int32 = 1
        if m_size <= bm:
            split = self.split_k
        part: int32 = self.blockIdx.z
        groups = k_size // g
        g_lo: int32 = part * groups // split
        g_hi: int32 = (part + 1) * groups // split
        on: int32 = bn * self.blockIdx.x
        om: int32 = bm * self.blockIdx.y
        sw = self.shared_tensor(dtype=uint8, shape=[ns, nc, ROWS, bk // 2])
        sx = self.shared_tensor(dtype=float16, shape=[ns, bm, bk])
        ring = Ring(ns, nc)
        ws, cnt = None, None
        if self.split_k > 1:
            ws = self.global_tensor(float32, [num_n * nc * self.split_k * ROWS, bm],
                                    requires_clean=False)  # fmt: skip
            cnt = self.global_tensor(int32, [num_n * nc], requires_clean=True)
        if part < split:
            if self.regs_to_consumers:  # a producer warp group lends its registers
                with self.warp_group(4 * nc, 4):
                    self.setmaxnreg(40)
                    with self.single_warp(0):
                        self.produce(ring, sw, sx, gw, gx, on, om, g_lo * g, g_hi * g)
            else:
                with self.single_warp(4 * nc):
                    self.produce(ring, sw, sx, gw, gx, on, om, g_lo * g, g_hi * g)
            for c in self.groups:
                with self.warp_group(4 * c, 4):
                    if self.regs_to_consumers:
                        self.setmaxnreg(232)
                    acc = self.consume(c, ring, sw, sx, gs, on + c * ROWS, g_lo, g_hi)
                    store: int32 = 1
                    if self.split_k > 1:
                        if split > 1:
                            store = self.add_parts(acc, ws, cnt, self.blockIdx.x * nc + c, part,
                                                   split)  # fmt: skip
                    if store == 1:
                        self.store_global(gyt, self.cast(acc, float16), offsets=[on + c * ROWS, om])

    def produce(self, ring, sw, sx, gw, gx, on: int32, om: int32, k_lo: int32, k_hi: int32):
        """The producer warp: per K tile, wait for a free slot and copy into it the packed
        weight tile of every consumer warp group and the X tile."""
        for k0 in self.range(k_lo, k_hi, self.block_k):
            self.mbarrier.wait(ring.empty[ring.p_stage], phase=ring.p_phase, sem="relaxed")
            st = ring.p_stage
            with self.single_thread():
                self.mbarrier.arrive_and_expect_tx(
                    ring.full[st], transaction_bytes=sw[st].nbytes + sx[st].nbytes
                )
            for c in self.groups:
                self.tma.global_to_shared(src=gw, dst=sw[st, c], offsets=[on + c * ROWS, k0 // 2],
                                          mbarrier=ring.full[st])  # fmt: skip
            self.tma.global_to_shared(src=gx, dst=sx[st], offsets=[om, k0], mbarrier=ring.full[st])
            ring.p_advance()

    def consume(self, c: int, ring, sw, sx, gs, row: int32, g_lo: int32, g_hi: int32):
        """Consumer warp group ``c``: the fp32 tile ``dequant(W)[row:, groups] @ X^T``."""
        bm, bk = self.block_m, self.block_k
        a_bytes = view_layout(wgmma_acc(ROWS, bk), 4, 8, [ROWS, bk // 2])
        acc = self.register_tensor(dtype=float32, shape=[ROWS, bm], init=0.0)
        prev: int32 = -1  # with overlap: the slot whose mma is still in flight
        for gi in self.range(g_lo, g_hi):
            s = self.load_global(gs, offsets=[row, gi], shape=[ROWS, 1])
            if self.scale_w:  # the fp16 weights scaled before the mma, straight into acc
                self.annotate_layout(s, reduce(wgmma_acc(ROWS, bk), [1], keepdims=True))
                part = acc
            else:  # the group's products apart, scaled in fp32 after
                self.annotate_layout(s, reduce(wgmma_acc(ROWS, bm), [1], keepdims=True))
                part = self.register_tensor(dtype=float32, shape=[ROWS, bm], init=0.0)
            for _ in self.ktiles:  # unrolled: each K tile of the group has its own w tile
                st = ring.c_stage
                self.mbarrier.wait(ring.full[st], phase=ring.c_phase)
                qb = self.load_shared(sw[st, c])
                self.annotate_layout(qb, a_bytes)  # the bytes of the A fragment
                if self.wdtype == tilus.uint4b:  # c - 8 is int4b(c ^ 8): the cast's own bias
                    qb = qb ^ 0x88
                w = self.cast(self.view(qb, dtype=tilus.int4b), float16)
                if self.scale_w:
                    w = w * s
                self.wgmma.fence()
                self.wgmma.mma(w, sx[st].transpose(), part)
                self.wgmma.commit_group()
                if self.overlap:  # one mma in flight: the previous tile's slot is freed now
                    self.wgmma.wait_group(1)
                    if prev >= 0:
                        self.sync()  # every thread of the group has read the slot
                        with self.single_thread():
                            self.mbarrier.arrive(ring.empty[prev])
                    prev = st
                else:
                    self.wgmma.wait_group(0)
                    self.sync()  # every thread of the group has read the slot
                    with self.single_thread():
                        self.mbarrier.arrive(ring.empty[st])
                ring.c_advance()
            if not self.scale_w:
                acc += part * self.cast(s, float32)
        if self.overlap:
            self.wgmma.wait_group(0)
            if prev >= 0:
                self.sync()
                with self.single_thread():
                    self.mbarrier.arrive(ring.empty[prev])
        return acc
