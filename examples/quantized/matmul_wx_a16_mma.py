"""Decode WxA16 on mma.sync: X-bit weights packed offline in fragment order, X up to 16 rows.

``Y = X @ dequant(W)^T`` as in ``matmul_wx_a16.py`` for M <= ``block_m`` (8 or 16) and any
weight type of ``mma_codecs.MMA_TYPES`` (1-8-bit integers, sub-byte floats without inf/NaN
codes), with the weights repacked once by :func:`prepack` so that each lane's share of an
mma.sync A fragment (``m16n8k16``: rows ``lane / 4`` and ``lane / 4 + 8``, K pairs
``2 * (lane % 4)`` and 8 past it, for the 8 K steps of a 128-K chunk) is one contiguous run
of ``2 * bits`` 32-bit words (``mma_codecs.py`` has both packings; the types other than the
4-bit integers go through the backend's paired casts, ``codes_fragment``). For 4-bit
integers it is 32 bytes, one word a K step, in
which nibble ``j + 4 e`` holds ``c + 8`` for element ``e`` of fragment register ``j`` (a
weight ``c``). A lane loads its words (two 16-byte loads) and dequantizes them by magic
numbers in the kernel itself (``fragment``): register ``j``'s two codes lie 16 bits apart, so
one logic op puts both under the exponent of 1024.0 (bits 0-3 and 16-19 for the rows of row
half 0, bits 4-7 and 20-23 for row half 1; the word shifted by 8 for the K half 1), making
the fp16 pair ``1024 + (c + 8)`` or ``1024 + 16 (c + 8)``, and one f16x2 subtraction leaves
``c`` or ``16 c`` exactly (the second half's scales are divided by 16): per word of 8 codes
one shift, four logic ops and four subtractions, no byte permute. X (through a transposed
register view) is the B fragment, and each 128-K chunk's fp32 products are summed in
registers. Each warp owns 16 rows, a block 4 warps (64 rows) or ``warps`` = 8 (128 rows,
so that one X tile serves twice the weights); ``split_k`` blocks share the K range of a row
tile and meet in an fp32 workspace (as in ``matmul_wx_a16.py``). At M = 1 the tensor cores
do 8x the needed products for free; what counts is the instructions a weight byte: a few
per code.

A step is ``unroll`` chunks. By default each step loads its weights at its top and X comes
through a ``stages``-deep cp.async ring (a barrier a step). ``prefetch`` = 1 or 2 keeps the
next steps' codes in registers (loaded before this step's products, so their latency hides
behind a step's work); ``x_steps`` copies X a window of that many steps at a time (one copy
and barrier a window: a decode part is one window); ``unroll_steps`` = 2 lets the compiler
rename the prefetch buffer instead of copying it (the scales come ahead with the codes).
On an H200 these were no faster than the default (see ``MMA_SPACE``), which the autotune
space keeps. ``w_ring`` sends the weights through the X ring instead: each slot also holds
the step's packed chunks, copied by cp.async as 32-bit words (1 KB a warp a chunk, a lane's
32 bytes contiguous) ``stages - 1`` steps ahead, so the bytes in flight cost no registers; a
lane reads its 32 bytes with two 16-byte shared loads and dequantizes them as above (the
registers stay where they are); ``prefetch`` then moves only the scales.
``w_tma`` copies a slot's weights as TMA boxes (one thread, an mbarrier a slot) instead of
16-byte cp.async copies by every thread; ``x_tma`` the X tiles too (on the same barriers,
a hardware-swizzled X tile), so that no cp.async is left in the loop, and no block barrier
either: every thread arrives on the slot's *empty* mbarrier once it has read the slot, and only
the thread that issues the copies waits on it before refilling the slot (1.02-1.09x over the
barrier a step at three of the four decode shapes on an H200, r82). ``kgroups`` = 2 or 4
makes a block that many 4-warp groups over the same 64 rows, taking alternate chunks of each
step from the one TMA ring (one copy stream a block); groups 1.. hand their sums to group 0
through shared memory on an mbarrier, and group 0 finishes the tile. ``producer`` adds a warp
that only issues the ring's copies (each as soon as the slot's last reader has freed it), so
no dequantizing warp issues or waits for the others; ``s_smem`` has each warp group load its
rows' scales over the whole K range once, at the start, into shared memory group-major (a
chunk's scales are then a row read from shared memory, no global load in the loop).
``x_mcast`` runs the blocks in clusters of 2 on neighbouring row tiles, which need the same X
chunks: each block copies every other chunk of a step with a multicast TMA into both blocks'
slot (meant to halve X's L2 traffic: at M = 16 a 64-row block's X bytes equal its weight
bytes), and every reader arrives on the slot's empty barrier in both blocks, since either
block's issuer refills both. Measured slower on an H100 (``mma_space.MMA_MCAST``).

Run ``python examples/quantized/matmul_wx_a16_mma.py`` (interpreter self-check at ragged
sizes).
"""

from __future__ import annotations

import inspect
import sys

import numpy as np
from mma_codecs import (  # noqa: F401  (re-exported: the packing is part of this kernel's API)
    CHUNK,
    MAGIC_BIAS,
    MAGIC_EXP,
    MAGIC_MASK,
    MAGIC_ROW_SCALE,
    MAGIC_SHR,
    MMA_TYPES,
    PACK_ORDER,
    check_type,
    code_dtype,
    code_flip,
    int4_magic,
    lane_words,
    magic_bias,
    magic_mask,
    magic_row_scale,
    magic_shr,
    nibble_order,
    packed_shape,
    prepack,
    prepack_torch,
)
from mma_operands import MmaOperands, words_layout
from mma_space import MMA_KEYS, MMA_SPACE
from split_k import SplitKParts

import tilus
from tilus import float16, float32, int32, uint32, void_p
from tilus.errors import TilusArgumentError
from tilus.ir.layout import reduce, shared_row_major, shared_row_major_swizzle, spatial
from tilus.ir.layout.register import mma_c
from tilus.utils import cdiv


@tilus.autotune(MMA_KEYS, MMA_SPACE)
class MatmulWxA16Mma(MmaOperands, SplitKParts, tilus.Script):
    """``Y[M, N] = X[M, K] @ dequant(W[N, K])^T`` for M <= ``block_m`` with prepacked
    4-bit weights (:func:`prepack`) and group-``group`` fp16 scales [N, K / group]."""

    def __init__(
        self, wdtype=tilus.uint4b, group: int = 128, block_m: int = 8, split_k: int = 4,
        unroll: int = 2, warps: int = 4, stages: int = 3, min_blocks: int = 4,
        unroll_steps: int | None = None, prefetch: int = 0, x_steps: int = 0,
        w_ring: bool = False, w_tma: bool = False, x_tma: bool = False, kgroups: int = 1,
        producer: bool = False, s_smem: bool = False, x_mcast: bool = False,
    ):  # fmt: skip
        super().__init__()
        check_type(wdtype)
        if group % CHUNK:
            raise TilusArgumentError(f"group must be a multiple of {CHUNK}, got {group}")
        if block_m not in (8, 16):
            raise TilusArgumentError(f"block_m must be 8 or 16, got {block_m}")
        if warps not in (4, 8):
            raise TilusArgumentError(f"warps must be 4 or 8 (64 or 128 rows a block), got {warps}")
        self.wdtype, self.group, self.block_m, self.split_k = wdtype, group, block_m, split_k
        self.lane_words = lane_words(wdtype)  # a lane's run of a chunk (8 words at 4 bits)
        self.chunk_words = 32 * self.lane_words  # a 16-row tile's chunk
        # TMA boxes of the ring: a chunk of more than 256 words (5-8 bits) as two box rows
        self.halves = 1 if self.chunk_words <= 256 or not w_tma else 2
        if stages < 2:
            raise TilusArgumentError(f"stages must be at least 2 (the X ring), got {stages}")
        self.unroll, self.warps, self.stages = unroll, warps, stages
        self.min_blocks = min_blocks  # blocks an SM holds at once: caps the registers
        # steps of the main loop unrolled (the next step's weight loads issued early)
        self.unroll_steps = unroll_steps
        # the weights of the ``prefetch`` next steps loaded into registers before this step's
        # products (their latency hidden behind that many steps' work); 0: each step loads
        # its own at its top
        if prefetch not in (0, 1, 2):
            raise TilusArgumentError(f"prefetch must be 0, 1 or 2 steps, got {prefetch}")
        self.prefetch = prefetch
        self.ahead = list(range(prefetch))  # a host list: the register buffers, oldest first
        # X through windows of ``x_steps`` steps (copied whole at each window's start: no
        # barrier a step) rather than the ``stages`` ring (a barrier a step); 0: the ring
        if not isinstance(x_steps, int) or x_steps < 0:
            raise TilusArgumentError(f"x_steps must be an int >= 0, got {x_steps!r}")
        self.x_steps = x_steps
        # the weights through the X ring's cp.async copies (``stages`` deep, in shared memory)
        # rather than loaded into registers at each step; ``prefetch`` then moves the scales
        # only
        if w_ring and x_steps:
            raise TilusArgumentError("w_ring needs the X ring (x_steps=0): the weights share it")
        self.w_ring = bool(w_ring)
        # the ring's weight copies as one TMA box a step (on an mbarrier a slot) rather than
        # 16-byte cp.async copies by every thread
        if w_tma and not w_ring:
            raise TilusArgumentError("w_tma needs w_ring: it is how the ring's weights come")
        self.w_tma = bool(w_tma)
        # the X tiles as TMA boxes too (on the same mbarriers): no cp.async left in the loop
        if x_tma and not w_tma:
            raise TilusArgumentError("x_tma needs w_tma: X joins the weights' TMA boxes")
        self.x_tma = bool(x_tma)
        # warp groups of 4 warps (each all 64 rows) that share a step's chunks: more warps for
        # the dequant and the products while one TMA stream (a block) feeds them
        if kgroups not in (1, 2, 4) or unroll % kgroups:
            raise TilusArgumentError(f"kgroups must be 1, 2 or 4 and divide unroll, got {kgroups}")
        if kgroups > 1 and not x_tma:
            raise TilusArgumentError("kgroups > 1 needs x_tma: the groups meet only on mbarriers")
        self.kgroups = kgroups
        # one more warp that only issues the ring's TMA copies (the readers never wait for
        # each other, and a slot is refilled as soon as its last reader frees it)
        if producer and not x_tma:
            raise TilusArgumentError("producer needs x_tma: it feeds the TMA ring only")
        self.producer = bool(producer)
        # the block's rows' scales of the whole K range loaded once at the start by each warp
        # group and kept in shared memory group-major (a step reads its column as a row): no
        # global load in the loop
        if s_smem and x_steps:
            raise TilusArgumentError("s_smem needs the X ring (x_steps=0)")
        if s_smem and prefetch:
            raise TilusArgumentError(
                "s_smem reads the scales from shared memory: prefetch must be 0"
            )
        self.s_smem = bool(s_smem)
        # clusters of 2 blocks on neighbouring row tiles (the same X tile): each loads half of
        # a step's X chunks and multicasts them into both blocks' slot, to halve X's L2 traffic
        # (at M = 16 a 64-row block reads as many X bytes as weight bytes)
        if x_mcast and (not x_tma or unroll % 2):
            raise TilusArgumentError(
                "x_mcast needs x_tma and an even unroll: the pair's blocks load alternate chunks"
            )
        self.x_mcast = bool(x_mcast)
        self.pair = 2 if x_mcast else 1  # blocks a cluster
        self.kgs = list(range(kgroups))  # a host list: group kg takes every kgroups-th chunk
        self.group_chunks = [list(range(kg, unroll, kgroups)) for kg in self.kgs]
        self.x_prologue = list(range(stages - 1))
        self.chunks = list(range(unroll))  # a host list: the chunks of a step, unrolled

    def __call__(
        self, m_size: int32, n_size: int, k_size: int,
        x_ptr: ~float16, w_ptr: void_p, s_ptr: ~float16, y_ptr: ~float16,
    ):  # fmt: skip
        bm, g, u, nw = self.block_m, self.group, self.unroll, self.warps
        bn = 16 * nw
        msg = f"K = {k_size} is not a multiple of the scale group {g}"
        self.static_assert(k_size % g == 0, msg)  # CHECK:group
        kc = k_size // CHUNK
        # (with x_mcast a whole number of pairs: the last pair's second tile may be past N)
        num_n = cdiv(cdiv(n_size, bn), self.pair) * self.pair
        self.attrs.blocks = [num_n, cdiv(m_size, bm), self.split_k]
        if self.x_mcast:
            self.attrs.cluster_blocks = [2, 1, 1]
        self.attrs.warps = nw * self.kgroups + (1 if self.producer else 0)
        self.attrs.min_blocks = self.min_blocks
        # the packed weights as 32-bit words [G, R, cw]: a chunk of a row tile is cw words
        # (1 KB at 4 bits), a lane's run 2 * bits of them (8: a K step each)
        cw = self.chunk_words
        gw32 = self.global_view(w_ptr, dtype=uint32, shape=[kc, cdiv(n_size, 16), cw],
                                strides=[cw, kc * cw, 1])  # fmt: skip
        gwt = None
        if self.w_tma:  # TMA needs a compact view: [R, G * halves, cw / halves words]
            hv = self.halves
            gwt = self.global_view(w_ptr, dtype=uint32, shape=[cdiv(n_size, 16), kc * hv, cw // hv])
        gs = self.global_view(s_ptr, dtype=float16, shape=[n_size, k_size // g])
        gyt = self.global_view(y_ptr, dtype=float16, shape=[n_size, m_size], strides=[1, n_size])
        split: int32 = 1
        if m_size <= bm:
            split = self.split_k
        part: int32 = self.blockIdx.z
        steps = cdiv(kc, u)
        s_lo: int32 = part * steps // split
        s_hi: int32 = (part + 1) * steps // split
        on: int32 = bn * self.blockIdx.x
        om: int32 = bm * self.blockIdx.y
        ws, cnt = None, None
        if self.split_k > 1:
            ws = self.global_tensor(float32, [num_n * self.split_k * bn, bm], requires_clean=False)
            cnt = self.global_tensor(int32, [num_n], requires_clean=True)
        # a warp a 16-row slice of the accumulator (the split choose_warps makes)
        s_layout = reduce(mma_c(bn, bm, nw, 1, nw), [1], keepdims=True)
        wbar = None
        ebar = None
        rbar = None
        if self.w_tma:  # barriers live at the kernel's top level
            wbar = self.mbarrier.alloc(counts=[1] * self.stages)  # a slot's weights landed
        if self.x_tma:  # a slot read by every thread: the copy of a later step may refill it
            # (in a pair the peer's readers too: this block's issuer refills both blocks' slot)
            ebar = self.mbarrier.alloc(counts=[32 * nw * self.kgroups * self.pair] * self.stages)
        if self.kgroups > 1:  # the other groups' sums are in shared memory for group 0
            rbar = self.mbarrier.alloc(counts=[32 * nw * (self.kgroups - 1)])
        peer = None
        if self.x_mcast:  # the peer's empty barriers (this block's readers free its slots too)
            peer = self.cluster.map_shared_addr(ebar, 1 - self.cluster.blockRank)
        scl = None
        if self.s_smem:  # (the view, a tile [K / group, rows] a warp group)
            ng = k_size // g
            msg = f"s_smem: K / group = {ng} is more than 256 (the scales' shared tile)"
            self.static_assert(ng <= 256, msg)  # CHECK:s_smem
            ssm = self.shared_tensor(dtype=float16, shape=[self.kgroups, ng, bn])
            self.annotate_layout(ssm, shared_row_major(self.kgroups, ng, bn))  # rows read whole
            scl = (gs, ssm)
        if part < split:
            # X tiles through a cp.async ring (ns - 1 steps ahead), read as B fragments with
            # ldmatrix; X chunk-major: [K / 128, M, 128]
            ns = self.stages
            gxk = self.global_view(x_ptr, dtype=float16, shape=[kc, m_size, CHUNK],
                                   strides=[CHUNK, k_size, 1])  # fmt: skip
            gxt = None
            if self.x_tma:  # TMA needs a compact view
                gxt = self.global_view(x_ptr, dtype=float16, shape=[m_size, k_size])
            sx = None
            sw = None
            if not self.x_steps:
                sx = self.shared_tensor(dtype=float16, shape=[ns, u, bm, CHUNK])
                if not self.x_tma:  # (for TMA the backend picks a hardware swizzle)
                    # 16-byte chunks XOR-ed with the row: an ldmatrix's 8 rows hit all banks
                    self.annotate_layout(sx, shared_row_major_swizzle([ns, u, bm, CHUNK], 2))
                if self.w_ring:
                    if self.halves == 1:
                        sw = self.shared_tensor(dtype=uint32, shape=[ns, u, nw, cw])
                    else:  # a TMA box's rows are at most 256 words: a chunk as two halves
                        sw = self.shared_tensor(dtype=uint32, shape=[ns, u, nw, 2, cw // 2])
            if self.x_mcast:  # both blocks' barriers and ring exist before either copies
                self.cluster.sync()
            loop = (gw32, gs, gxk, sx, sw, s_lo, s_hi, on, om, kc, s_layout, wbar, ebar, gwt, gxt,
                    scl, peer)  # fmt: skip
            fin = (ws, cnt, part, split, gyt, on, om, rbar)
            if self.producer:
                readers = 32 * nw * self.kgroups
                with self.thread_group(readers, 32):  # the last warp: the ring's copies
                    for st in self.range(s_lo, s_hi):
                        t: int32 = st - s_lo
                        # the slot's reader of step t - ns must be done (none before t = ns)
                        self.fill_x(None, sx, st, t % ns, s_hi, om, kc, None, sw, on, wbar, gwt,
                                    gxt, (ebar, t - ns + 1))  # fmt: skip
                with self.thread_group(0, readers):
                    self.tile_sums(loop, fin, False)
            else:
                self.tile_sums(loop, fin, True)
        if self.x_mcast:  # no block exits while its peer may still copy into it or arrive
            self.cluster.sync()

    def tile_sums(self, loop, fin, issuer: bool):
        """The block's tile: its warp group (or groups, on alternate chunks of each step, the
        sums of groups 1.. handed to group 0 through shared memory) over the part's steps, then
        the split-K meeting and the store; ``issuer``: group 0 issues the ring's copies too."""
        ws, cnt, part, split, gyt, on, om, rbar = fin
        nw = self.warps
        if self.kgroups == 1:
            acc = self.part_sums(self.chunks, issuer, *loop)
            self.finish_parts(acc, ws, cnt, part, split, gyt, on, om)
        else:
            # the groups take alternate chunks of each step; groups 1.. leave their sums in
            # shared memory for group 0, which adds them and finishes the tile
            red = self.shared_tensor(dtype=float32, shape=[self.kgroups - 1, 16 * nw, self.block_m])
            for kg in self.kgs:
                with self.thread_group(32 * nw * kg, 32 * nw):
                    acc = self.part_sums(self.group_chunks[kg], issuer and kg == 0, *loop, kg=kg)
                    if kg > 0:
                        self.store_shared(red[kg - 1], acc)
                        self.mbarrier.arrive(rbar[0])
                    else:
                        self.mbarrier.wait(rbar[0], phase=0)
                        for j in self.kgs[1:]:
                            acc += self.load_shared(red[j - 1])
                        self.finish_parts(acc, ws, cnt, part, split, gyt, on, om)

    def part_sums(self, chunks, issuer, gw32, gs, gxk, sx, sw, s_lo: int32, s_hi: int32,
                  on: int32, om: int32, kc: int, s_layout, wbar, ebar, gwt, gxt, scl, peer,
                  kg: int = 0):  # fmt: skip
        """The fp32 sums [64, block_m] of the part's steps over the chunks ``chunks`` of each
        step (all of them, or a warp group's share); ``issuer``: this thread group issues the
        ring's copies; ``scl``: with ``s_smem``, the scales' view and shared tiles; ``peer``:
        with ``x_mcast``, the pair's other block's empty barriers; ``kg``: the warp group's
        index."""
        bm, u, ns = self.block_m, self.unroll, self.stages
        acc = self.register_tensor(dtype=float32, shape=[16 * self.warps, bm], init=0.0)
        rsc = None
        if int4_magic(self.wdtype):  # each row's share of MAGIC_ROW_SCALE, as the scales lie
            rsc = self.register_tensor(dtype=float32, shape=[16 * self.warps, 1],
                                       init=magic_row_scale)  # fmt: skip
            self.annotate_layout(rsc, s_layout)
        # with prefetch: the next steps' codes and scales in registers (buffer j: step
        # st + j); the scales too, else each step still waits a load's latency for them
        wbuf = []
        sbuf = []
        for j in self.ahead:
            row = []
            srow = []
            k_pre: int32 = (s_lo + j) * u
            if s_lo + j >= s_hi:
                k_pre = (s_hi - 1) * u  # past the part: its last step again (cached)
            for c0 in chunks:
                if not self.w_ring:
                    row.append(self.wcodes(gw32, on, k_pre + c0))
                srow.append(self.wscales(gs, on, k_pre + c0, s_layout))
            wbuf.append(row)
            sbuf.append(srow)
        if self.x_steps:
            # X in windows of x_steps steps, each copied whole at its start: no barrier
            # in the steps (at decode a part is one window)
            wx = self.x_steps
            sxa = self.shared_tensor(dtype=float16, shape=[wx * u, bm, CHUNK])
            self.annotate_layout(sxa, shared_row_major_swizzle([wx * u, bm, CHUNK], 2))
            for w0 in self.range(s_lo, s_hi, wx):
                self.copy_async(gxk, sxa, offsets=[w0 * u, om, 0])
                self.copy_async_commit_group()
                self.copy_async_wait_all()
                self.sync()
                w_end: int32 = w0 + wx
                if w_end > s_hi:
                    w_end = s_hi
                for st in self.range(w0, w_end, unroll=self.unroll_steps):
                    ws_, ss = self.step_weights(chunks, gw32, gs, st, s_hi, on, wbuf,
                                                sbuf, s_layout)  # fmt: skip
                    xs = []
                    for c in chunks:
                        xs.append(sxa[(st - w0) * u + c])
                    self.products(ws_, ss, xs, acc, rsc)
                self.sync()  # every warp is done with the window before it is refilled
        else:
            for i in self.x_prologue if issuer else []:
                self.fill_x(gxk, sx, s_lo + i, i, s_hi, om, kc, gw32, sw, on, wbar, gwt, gxt)
            if self.s_smem:  # after the ring's first copies: this group's copy of the scales
                gs = self.stage_scales(scl, on, kg)
            for st in self.range(s_lo, s_hi, unroll=self.unroll_steps):
                t: uint32 = st - s_lo  # unsigned: its % and // by the ring size are bit ops
                ws_, ss = self.step_weights(chunks, gw32, gs, st, s_hi, on, wbuf,
                                            sbuf, s_layout)  # fmt: skip
                if self.x_tma:
                    # no copy by the threads: the TMA issuer alone waits until every thread
                    # is done with the slot it refills (step t - 1's), the others go on
                    if issuer:
                        self.fill_x(None, sx, st + ns - 1, (t + ns - 1) % ns, s_hi, om, kc,
                                    None, sw, on, wbar, gwt, gxt, (ebar, t))  # fmt: skip
                else:
                    self.copy_async_wait_group(ns - 2)  # this thread's copies of step t
                    self.sync()  # everyone's landed, and everyone is done with the slot
                    self.fill_x(gxk, sx, st + ns - 1, (t + ns - 1) % ns, s_hi, om, kc, gw32,
                                sw, on, wbar, gwt, gxt)  # fmt: skip
                if self.w_tma:  # a slot's (t // ns)-th use: that parity
                    self.mbarrier.wait(wbar[t % ns], phase=(t // ns) % 2)
                xs = []
                for c in chunks:
                    xs.append(sx[t % ns, c])
                    if self.w_ring:
                        ws_.append(self.ring_words(sw[t % ns, c]))
                self.products(ws_, ss, xs, acc, rsc)
                if self.x_tma:
                    self.free_slot(ebar, peer, t % ns)
        self.copy_async_wait_all()  # the zero-filled copies past the end
        return acc

    def free_slot(self, ebar, peer, slot: int32):
        """This thread has read ring slot ``slot``: it arrives on the slot's empty barrier,
        and with ``x_mcast`` on the peer's too (the peer's issuer refills the slot's X here)."""
        self.mbarrier.arrive(ebar[slot])
        if self.x_mcast:
            # relaxed: the slot's words and X are in registers and used by the products by now
            self.mbarrier.arrive(peer[slot], sem="relaxed", scope="cluster")

    def step_weights(self, chunks, gw32, gs, st: int32, s_hi: int32, on: int32, wbuf, sbuf,
                     s_layout):  # fmt: skip
        """The weight codes and scales of step ``st``, per chunk: loaded now, or with
        prefetch taken from the register buffers, which then load step ``st + prefetch``."""
        u, nw = self.unroll, self.warps
        ws_, ss = [], []
        k_next: int32 = (st + self.prefetch) * u
        if st + self.prefetch >= s_hi:
            # past the part: its last step again (in cache; a chunk past K would take the
            # bounds-checked element path)
            k_next = (s_hi - 1) * u
        for i, c in enumerate(chunks):  # i: the buffers' index, c: the chunk's in the step
            if self.prefetch:
                if not self.w_ring:
                    cur = self.register_tensor(dtype=uint32, shape=[nw, self.chunk_words])
                    self.annotate_layout(cur, words_layout(nw, self.lane_words))
                    self.assign(cur, wbuf[0][i])
                    ws_.append(cur)
                    for j in self.ahead[1:]:  # the buffers move up a step
                        self.assign(wbuf[j - 1][i], wbuf[j][i])
                    self.assign(wbuf[-1][i], self.wcodes(gw32, on, k_next + c))
                sc = self.register_tensor(dtype=float16, shape=[16 * nw, 1])
                self.annotate_layout(sc, s_layout)
                self.assign(sc, sbuf[0][i])
                for j in self.ahead[1:]:
                    self.assign(sbuf[j - 1][i], sbuf[j][i])
                self.assign(sbuf[-1][i], self.wscales(gs, on, k_next + c, s_layout))
                ss.append(sc)
            else:
                if not self.w_ring:
                    ws_.append(self.wcodes(gw32, on, st * u + c))
                ss.append(self.wscales(gs, on, st * u + c, s_layout))
        return ws_, ss

    def products(self, ws_, ss, xs, acc, rsc):
        """``acc += scale * (W chunk @ X chunk^T)`` for the chunks of a step: their packed
        words ``ws_``, scales ``ss`` and X tiles in shared memory ``xs``; ``rsc``: each row's
        factor of ``MAGIC_ROW_SCALE`` (``fragment`` makes 16 c in every other 8 rows), or
        None (the other types' ``fragment`` makes the weights themselves)."""
        for words, sc, xc in zip(ws_, ss, xs):
            w16 = self.fragment(words)  # [16 * warps, CHUNK]
            p = self.dot(w16, self.transpose(self.load_shared(xc)), acc_dtype=float32)
            if int4_magic(self.wdtype):
                acc += p * (self.cast(sc, float32) * rsc)
            else:
                acc += p * self.cast(sc, float32)

    def fragment(self, raw):
        """A chunk's packed words (uint32 [warps, cw]: each lane's run) as the fp16 A tile
        [16 * warps, CHUNK]: ``int4_fragment`` for the 4-bit integers, else ``codes_fragment``."""
        if int4_magic(self.wdtype):
            w16 = self.int4_fragment(raw)
        else:
            w16 = self.codes_fragment(raw)
        return w16

    def codes_fragment(self, raw):
        """A chunk's packed words as the fp16 A tile [16 * warps, CHUNK] of its weights (less
        their zero point), for the types other than the 4-bit integers: the lane's run viewed
        as its 64 codes (``code_dtype``), cast to fp16 by the backend's paired casts (each
        fragment register a pair of codes: consecutive ones, or nibbles j and j + 4 of a word
        in ``PACK_ORDER``), then the dims permuted to rows x K (no register moves)."""
        nw = self.warps
        codes = self.view(raw, dtype=code_dtype(self.wdtype))  # [warp, 32 lanes * 64]
        h = self.cast(codes, float16)
        if nibble_order(self.wdtype):  # [warp, g, q, s, e, h, rh] -> [warp, rh, g, s, h, q, e]
            h = self.reshape(h, [nw, 8, 4, 8, 2, 2, 2]).permute(0, 6, 1, 3, 5, 2, 4)
        else:  # [warp, g, q, s, h, rh, e] -> [warp, rh, g, s, h, q, e]
            h = self.reshape(h, [nw, 8, 4, 8, 2, 2, 2]).permute(0, 5, 1, 3, 4, 2, 6)
        return self.reshape(h, [16 * nw, CHUNK])

    def int4_fragment(self, raw):
        """A chunk's packed 4-bit words (uint32 [warps, 256]: lane l's 8, a K step each) as the fp16
        A tile [16 * warps, CHUNK] of its weights ``c``, times 16 in the rows of row half
        rh = 1 (exact): fragment register j of each word from its nibbles j and j + 4, shifted
        by ``magic_shr(j)`` (x >> 8 serves j = 2, 3), masked by ``magic_mask(j)`` under
        ``MAGIC_EXP`` (one logic op for two codes: 1024 + (c + 8) or 1024 + 16 (c + 8)), less
        ``MAGIC_BIAS`` (one f16x2 subtraction), then the dims permuted to rows x K (no
        register moves)."""
        nw = self.warps
        w = self.reshape(raw, [nw, 8, 4, 8, 1])  # [warp, g, q, s, 1]
        shr = self.register_tensor(dtype=uint32, shape=[4], init=magic_shr)
        mask = self.register_tensor(dtype=uint32, shape=[4], init=magic_mask)
        f = ((w >> shr) & mask) | MAGIC_EXP  # [warp, g, q, s, j]
        # the lane's words, a register j of each (the broadcast adds j to its registers)
        self.annotate_layout(f, spatial(nw, 8, 4, 1, 1).local(1, 1, 1, 8, 4))
        h = self.reshape(self.view(f, dtype=float16), [nw, 8, 4, 8, 2, 2, 2])  # s, h, rh, e
        bias = self.register_tensor(dtype=float16, shape=[2, 1], init=magic_bias)  # [rh, 1]
        return self.reshape((h - bias).permute(0, 5, 1, 3, 4, 2, 6), [16 * nw, CHUNK])


def pinned(**kw) -> dict:
    """Constructor arguments pinning one config: the autotune group (``MMA_KEYS``) is pinned
    as a whole, so its keys not in ``kw`` take their constructor defaults; other arguments
    (``wdtype``, ``x_steps``, ...) pass through."""
    sig = inspect.signature(MatmulWxA16Mma.__init__)
    out = {k.strip(): sig.parameters[k.strip()].default for k in MMA_KEYS.split(",")}
    out.update(kw)
    return out


def matmul_prepacked(x, w_prepacked, scales, n: int, *, wdtype=tilus.uint4b, group: int = 128,
                     out=None):  # fmt: skip
    """``x @ dequant(w)^T`` on torch CUDA tensors with weights from :func:`prepack_torch`
    (uint8 [N padded to 16, K / 2]) of an N-row weight: x fp16 [M, K] (M up to 16 a tile;
    more rows run as several tiles), scales fp16 [N, K / group]; returns (or fills ``out``)
    fp16 [M, N]. The kernel is :class:`MatmulWxA16Mma`, tuned on first use."""
    import torch

    m, k = x.shape
    rows, kb = packed_shape(n, k, wdtype)
    if tuple(w_prepacked.shape) != (rows, kb):
        raise TilusArgumentError(
            f"w_prepacked: shape {list(w_prepacked.shape)}, expected [{rows}, {kb}] for N = {n},"
            f" K = {k}"
        )
    if tuple(scales.shape) != (n, k // group) or k % group:
        raise TilusArgumentError(
            f"scales: shape {list(scales.shape)}, expected [N, K / group] = [{n}, {k // group}]"
        )
    y = torch.empty((m, n), dtype=torch.float16, device=x.device) if out is None else out
    MatmulWxA16Mma(wdtype, group)(m, n, k, x, w_prepacked, scales, y)
    return y


def run_interp(wdtype, group: int, m: int, n: int, k: int, **cfg) -> float:
    """One config on the interpreter at (m, n, k); the max relative error to the float32
    dequantize-then-matmul reference."""
    import matmul_wx_a16 as ex

    rng = np.random.default_rng()
    x, codes, scales, _packed = ex.random_problem(rng, m, n, k, group, wdtype)
    y = np.full((m, n), np.nan, np.float16)
    MatmulWxA16Mma(wdtype, group, **pinned(**cfg))(m, n, k, x, prepack(codes, wdtype), scales, y)
    ref = ex.reference(x, codes, scales, wdtype, group)
    return float(np.abs(y.astype(np.float32) - ref).max() / (np.abs(ref).max() + 1e-6))


def main() -> int:
    """Interpreter self-check at ragged sizes (M, N and the last K step); the exit status."""
    ok = True
    for wdtype, group, m, cfg in [(tilus.uint4b, 128, 1, dict(block_m=8, split_k=2, unroll=2)),
                                  (tilus.int4b, 256, 13, dict(block_m=16, split_k=1, unroll=2))]:  # fmt: skip
        err = run_interp(wdtype, group, m, 37, 768, **cfg)
        good = err < 1e-2
        ok &= good
        print(
            f"{wdtype} group {group} M={m} {cfg}: max rel err {err:.2e}  {'ok' if good else 'FAIL'}"
        )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
