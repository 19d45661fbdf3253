"""FlashAttention forward on Hopper: ``O = softmax(scale * Q K^T) V`` and the log-sum-exp.

``q [batch, heads, seq_q, dim]``, ``k, v [batch, heads_kv, seq_kv, dim]`` (fp16 or bf16, rows
contiguous), ``o`` like ``q`` and ``lse [batch, heads, seq_q]`` (float32, natural log). Grouped
query heads: query head ``h`` reads KV head ``h // (heads // heads_kv)``. ``causal`` masks key
``j > i`` of query ``i`` (top-left aligned, as ``scaled_dot_product_attention(is_causal=True)``).

Built like FlashAttention-3. A block computes ``block_m`` query rows of one head with a
producer warp group (one warp issues the TMA copies, its registers lowered with ``setmaxnreg``)
and two or three consumer groups, each owning ``block_m / consumers`` rows. The producer loads
the Q tile and streams K and V tiles of ``block_n`` keys through a ring of ``num_stages``
shared slots; K and V each have their own full and empty mbarriers, so ``S = Q K^T`` starts
before V lands and K of the next tile loads as soon as ``S`` has read the last one. A consumer
computes ``S`` by WGMMA from shared memory into registers, runs the online softmax on the
accumulator (row max and row sum are reductions over the WGMMA layout, the ``[rows, 1]``
statistics broadcast back over it; ``exp2`` with the scale folded into ``log2(e)``), rescales
its output accumulator, and accumulates ``P V`` by WGMMA with P from registers. Each consumer
issues ``S_j`` with ``P_{j-1} V_{j-1}`` and runs the softmax of ``S_j`` while the second GEMM
runs; with ``pingpong`` the groups also take turns issuing (named barriers), so one group's
softmax overlaps the other's GEMMs. ``persistent`` launches one block per SM that loops over
the blocks of query rows (the output staged apart from Q, so the next Q loads meanwhile, or,
where the ring leaves no room, stored from registers; ``overlap``: two Q buffers, each tile's
first ``S`` issued with the last ``P V`` of the tile before and running during its epilogue, O
staged in the tile's own Q buffer and stored by a storer thread, see flash_epilogue.py; with
``early_s1`` a tile's second S is issued before its first softmax, which runs during it: slower).
``cluster=2`` pairs the blocks of neighbouring query rows: each loads one column panel of every
K and V tile into both blocks (TMA multicast), halving the L2 traffic, and a slot is refilled
once both blocks' consumers freed it (causal: both read the upper block's tiles; measured slower
on an H200, whose L2 is not the limit). ``split_producer`` gives K and V a producer warp each
(neither waits for the other's free slot), ``all_arrive`` has every consumer thread arrive on
the empty barriers (no elected thread, no branch), ``p_shared`` stages P in shared memory,
``late_p`` converts P while the next S runs, ``skip_empty`` lets a group whose rows all lie past
the last query row (in the ragged last block) skip its GEMMs, ``full_first`` runs a block's first
softmax unmasked where no key of that tile is hidden, ``suspend_ns`` / ``consumer_suspend_ns``
hint how long a producer's (storer's) / consumer's barrier wait suspends before it retries. Only the tiles a block needs are
loaded: with ``causal`` the tiles right of the diagonal are skipped (the longest rows first),
and only the diagonal tile and the ragged last tile are masked.

Run ``python examples/attention/flash_attention.py``: on the tilus interpreter without a GPU,
on CUDA with one (every result checked against a float32 reference).
"""

from __future__ import annotations

import sys
from pathlib import Path

import tilus
from tilus import RegisterTensor, bfloat16, float16, float32, int32, uint32, void_p
from tilus.utils import cdiv

if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
from attention_support import (  # noqa: E402
    check_attention_args,
    default_scale,
    max_error,
    random_qkv,
    reference,
)
from flash_epilogue import FlashEpilogue  # noqa: E402
from flash_gemms import FlashGemms  # noqa: E402
from flash_producer import FlashProducer  # noqa: E402
from flash_tiles import SMEM_BYTES, Ring, default_tiles  # noqa: E402

from tilus.target import sm_count  # noqa: E402

LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453


@tilus.autotune("tile", [0, 1, 2, 3])
class FlashAttention(FlashProducer, FlashEpilogue, FlashGemms, tilus.Script):
    """The forward kernel for one dtype, head dim, causality and head grouping; ``tile`` picks
    one of the head dim's ``default_tiles`` (or pass ``block_m``/``block_n``/``num_stages``/
    ``consumers``/``pingpong``)."""

    def __init__(
        self,
        tile,
        dim=128,
        dtype="float16",
        causal=False,
        group=1,
        block_m=None,
        block_n=None,
        num_stages=None,
        consumers=None,
        pingpong=None,
        persistent=None,
        num_sms=None,
        early_rescale=None,
        cluster=None,
        split_producer=None,
        p_shared=None,
        all_arrive=None,
        late_p=None,
        overlap=None,
        early_s1=None,
        skip_empty=None,
        suspend_ns=None,
        consumer_suspend_ns=None,
        full_first=None,
    ):
        super().__init__()
        tiles = default_tiles(dim, causal)
        bm, bn, st, cg, pp, ps, er, cm, *more = tiles[tile % len(tiles)]
        more = dict(more[0]) if more else {}  # the tile's other arguments
        self.consumers = consumers or cg
        self.block_m = block_m or (bm // cg * self.consumers)
        self.block_n = block_n or bn
        self.num_stages = num_stages or st
        self.pingpong = pp if pingpong is None else pingpong
        self.rows = self.block_m // self.consumers  # query rows of one consumer group
        self.persistent = ps if persistent is None else bool(persistent)
        self.num_sms = num_sms or sm_count()
        self.early_rescale = er if early_rescale is None else bool(early_rescale)
        self.dim = dim
        self.dtype = {"float16": float16, "bfloat16": bfloat16}[dtype]
        self.causal = causal
        self.group = group
        self.cluster_m = cm if cluster is None else cluster
        self.set_suspend(more, suspend_ns, consumer_suspend_ns)  # try_wait hints (ns)
        # an argument given wins over the tile's
        self.split_producer = bool(
            more.get("split_producer", 0) if split_producer is None else split_producer
        )
        self.p_shared = bool(more.get("p_shared", 0) if p_shared is None else p_shared)
        if all_arrive is None:  # a cluster's releases reach the peer from one thread
            all_arrive = more.get("all_arrive", False) and self.cluster_m == 1
        self.all_arrive = bool(all_arrive)
        # late_p: P stays float32 until the next S is issued, then converted while it runs
        # (with O's rescale: early_rescale); its registers are not free for the next S
        self.late_p = bool(more.get("late_p", 0) if late_p is None else late_p)
        if self.late_p:
            self.early_rescale = True
            if self.p_shared:
                raise tilus.TilusArgumentError("late_p needs P in registers (p_shared=False)")
        if self.all_arrive and self.cluster_m == 2:
            raise tilus.TilusArgumentError("all_arrive needs cluster=1")
        if self.cluster_m not in (1, 2):
            raise tilus.TilusArgumentError(f"cluster must be 1 or 2, got {cluster!r}")
        if self.cluster_m == 2 and self.persistent:
            raise tilus.TilusArgumentError(
                "cluster=2 (two blocks sharing each KV tile) needs persistent=False"
            )
        # the head dim in column panels: in a cluster each block loads one of every KV tile
        self.panel_ids = list(range(self.cluster_m))
        self.panel = dim // self.cluster_m
        # persistent: O is staged apart from Q (the next Q lands meanwhile) when shared memory
        # holds both, else stored straight from registers
        tile = self.block_m * dim * 2
        ring = 2 * self.num_stages * self.block_n * dim * 2
        self.direct_o = self.persistent and 2 * tile + ring > SMEM_BYTES
        # overlap: the next tile's first S runs during this one's epilogue (flash_epilogue.py);
        # a tile's overlap gives way to arguments it does not fit (as its all_arrive)
        ok = self.persistent and self.cluster_m == 1 and not self.direct_o
        self.overlap = int(more.get("overlap", 0) * ok if overlap is None else overlap)
        if self.overlap and not ok:
            room = f": {self.num_stages} stages of {self.block_n} keys leave no room"
            raise tilus.TilusArgumentError(
                "overlap needs persistent=True, cluster=1 and two Q tiles beside "
                f"the ring{room if self.direct_o else ''}"
            )
        if self.overlap not in (0, 1, 2) or self.overlap == 2 and (self.late_p or self.p_shared):
            raise tilus.TilusArgumentError(f"overlap must be 0, 1 or 2 (not with late_p or "
                                           f"p_shared), got {overlap!r}")  # fmt: skip
        # early_s1 (overlap=1): a tile's second S runs during its first softmax; every block reads
        # two KV tiles or more (a one-tile block's second wholly masked): that S has no branch
        fits = self.overlap == 1 and not (self.late_p or self.p_shared or self.pingpong)
        self.early_s1 = bool(more.get("early_s1", 0) * fits if early_s1 is None else early_s1)
        # full_first: a block's first softmax unmasked when it can be (not while S_1 runs); a
        # tile's gives way to arguments it does not fit
        ff = more.get("full_first", 0) * (not self.early_s1 and self.overlap != 2)
        self.full_first = bool(ff if full_first is None else full_first)
        if self.full_first and (self.early_s1 or self.overlap == 2):
            raise tilus.TilusArgumentError("full_first needs early_s1=False and overlap 0 or 1")
        se = more.get("skip_empty", 0) * (not self.overlap)  # empty groups only free the slots
        self.skip_empty = bool(se if skip_empty is None else skip_empty)
        if self.skip_empty and self.overlap:
            raise tilus.TilusArgumentError("skip_empty needs overlap=0")
        if self.early_s1 and not fits:
            raise tilus.TilusArgumentError(
                f"early_s1 needs overlap=1 (got {self.overlap}) without late_p, p_shared or "
                "pingpong"
            )

    def softmax(
        self,
        s: RegisterTensor,
        m: RegisterTensor,
        lsum: RegisterTensor,
        masked: bool,
        j: int32,
        row0: int32,
        seq_kv: int32,
        scale_log2: float32,
    ):
        """The online softmax of score tile ``j`` (rows from ``row0``): updates the running row
        max ``m`` (log2 domain) and sum ``lsum``; returns P and the factor that rescales O.
        ``masked`` tiles hide keys past ``seq_kv`` (and, causal, right of the diagonal) without
        a branch: ptxas serializes every wgmma of a kernel that branches while one is in
        flight."""
        bmh, bn = self.rows, self.block_n
        t = s
        if masked:
            kv0: int32 = j * bn
            cols = self.register_tensor(dtype=int32, shape=[bn], init=lambda c: c)
            ok = cols < seq_kv - kv0
            if self.causal:
                rows = self.register_tensor(dtype=int32, shape=[bmh, 1], init=lambda r, c: r)
                ok = ok & (cols <= rows + (row0 - kv0))
            t = self.where(ok, s, -float("inf"))
        # the scale (> 0) is applied to the row max, and to the scores inside exp2's argument
        # (one FFMA per score: s * scale - max)
        m_new = self.maximum(m, self.max(t, dim=1, keepdim=True) * scale_log2)
        p = self.exp2(t * scale_log2 - m_new)
        alpha = self.exp2(m - m_new)
        self.assign(lsum, lsum * alpha + self.sum(p, dim=1, keepdim=True))
        self.assign(m, m_new)
        return p, alpha

    def step(
        self,
        masked: bool,
        j: int32,
        half: int,
        ring: Ring,
        kfull,
        sq,
        sk,
        sv,
        peers,
        pa,
        pf,
        o: list,
        m: RegisterTensor,
        lsum: RegisterTensor,
        scale_o: RegisterTensor,
        row0: int32,
        seq_kv: int32,
        scale_log2: float32,
        issued: bool = False,
        s=None,
    ):
        """KV tile ``j >= 1``: issue ``S_j = Q K_j^T`` and ``O += P_{j-1} V_{j-1}``, run the
        softmax of ``S_j`` while the second one runs, then rescale O and stage ``P_j``
        (``early_rescale``: O is rescaled by ``scale_o`` while ``S_j`` runs instead, as
        FlashAttention-3 does, before ``P_{j-1} V_{j-1}`` is issued). ``issued``: ``S_j`` was
        issued into ``s`` already (``early_s1``; K_j and V_{j-1} have landed)."""
        stage = ring.stage
        if not issued:
            s = self.register_tensor(dtype=float32, shape=[self.rows, self.block_n], init=0.0)
            self.cwait(kfull[stage], ring.phase)
            # both waits before the issue: a wait loop between two wgmma issues makes ptxas
            # serialize every wgmma of the kernel
            self.cwait(ring.full[ring.prev_stage], ring.prev_phase)
            self.take_turn(half)
            self.wgmma.fence()
            self.mma_s(sq[half], sk[stage], s)
            self.wgmma.commit_group()
        else:
            self.wgmma.fence()  # P's (and O's zero) registers were written
        if self.early_rescale:
            for oh in o:
                self.assign(oh, oh * scale_o)
            if self.late_p:  # P_{j-1} converted while S_j runs too
                self.assign(pa, self.cast(pf, self.dtype))
            self.wgmma.fence()  # O's (and P's) registers were written
        self.mma_pv(pa, sv[ring.prev_stage], o)
        self.wgmma.commit_group()
        self.pass_turn(half)
        self.wgmma.wait_group(1)  # S_j has landed; P_{j-1} V_{j-1} may still run
        self.release(kfull, peers[0], self.num_stages + stage)  # K_j is read
        p, alpha = self.softmax(s, m, lsum, masked, j, row0, seq_kv, scale_log2)
        self.wgmma.wait_group(0)
        self.release(ring.empty, peers[1], ring.prev_stage)
        if self.early_rescale:
            self.assign(scale_o, alpha)
        else:
            for oh in o:
                self.assign(oh, oh * alpha)
        if self.late_p:
            self.assign(pf, p)
        elif self.p_shared:
            self.stage_p(self.cast(p, self.dtype), pa)
        else:
            self.assign(pa, self.cast(p, self.dtype))
        ring.advance()

    def consume(self, half: int, ring: Ring, kfull, sq, sk, sv, peers, go, glse, qbar, qempty,
                qphase: uint32, so, sp, bh: int32, q_row: int32, seq_kv: int32, n_kv: int32,
                scale_log2: float32, nxt=None):  # fmt: skip
        """Consumer warp group ``half``: rows ``[q_row + half * rows, ...)`` of a block.

        Software-pipelined over the KV tiles: while the softmax of tile ``j`` runs on the CUDA
        cores, the tensor cores compute ``P_{j-1} V_{j-1}`` (issued with ``S_j = Q K_j^T``);
        the output is rescaled once that group has retired. ``nxt`` (``overlap``): the first S
        was issued by the tile before, this tile issues the next one's."""
        bmh, bn = self.rows, self.block_n
        row0: int32 = q_row + half * bmh
        o = [] if self.early_s1 else self.zero_o()
        m = self.register_tensor(dtype=float32, shape=[bmh, 1], init=-float("inf"))
        lsum = self.register_tensor(dtype=float32, shape=[bmh, 1], init=0.0)
        if nxt is None:
            self.cwait(qbar, qphase)
            # tile 0: S, its softmax and P (n_kv >= 1: every row has a first key)
            s = self.register_tensor(dtype=float32, shape=[bmh, bn], init=0.0)
            self.cwait(kfull[ring.stage], ring.phase)
            self.take_turn(half)
            self.first_s(half, ring, kfull, sq[half], sk, s)
            self.pass_turn(half)
        if nxt is not None and self.overlap == 2:  # S_0's softmax ran in the block before
            m, lsum, pa = nxt[8]
            pf = pa
        elif self.early_s1:  # S_1 issued before S_0's softmax, which runs while S_1 does
            s = nxt[0]
            self.wgmma.wait_group(0)
            self.release(kfull, peers[0], self.num_stages + ring.stage)  # K_0 is read
            s1 = self.register_tensor(dtype=float32, shape=[bmh, bn], init=0.0)
            # the waits of step 1 before its S: no wait loop while a wgmma is in flight
            ring.advance()
            self.cwait(kfull[ring.stage], ring.phase)
            self.cwait(ring.full[ring.prev_stage], ring.prev_phase)
            self.first_s(half, ring, kfull, sq[half], sk, s1)
            p, _ = self.softmax(s, m, lsum, True, 0, row0, seq_kv, scale_log2)
            pa = self.cast(p, self.dtype)
            pf = p
            o += self.zero_o()  # O's registers are live from here on, not during that softmax
        else:
            if nxt is not None:
                s = nxt[0]  # issued by the block's previous tile
            self.wgmma.wait_group(0)
            self.release(kfull, peers[0], self.num_stages + ring.stage)  # K_0 is read
            if self.full_first:
                p = self.first_softmax(s, m, lsum, row0, seq_kv, scale_log2)
            else:  # (the IR of the kernels without it as before)
                p, alpha = self.softmax(s, m, lsum, True, 0, row0, seq_kv, scale_log2)
            pa = self.cast(p, self.dtype)
            pf = p  # late_p: P in float32, converted while the next S runs
            if self.p_shared:
                self.stage_p(pa, sp[half])
                pa = sp[half]
            ring.advance()
        # tiles every row of this group sees whole, then the ragged / diagonal ones, masked
        n_full: int32 = max(min(n_kv, seq_kv // bn), 1)
        if self.causal:
            n_full = max(min(n_full, (row0 + 1) // bn), 1)
        scale_o = self.register_tensor(dtype=float32, shape=[bmh, 1], init=1.0)  # O is 0 here
        args = (
            half,
            ring,
            kfull,
            sq,
            sk,
            sv,
            peers,
            pa,
            pf,
            o,
            m,
            lsum,
            scale_o,
            row0,
            seq_kv,
            scale_log2,
        )
        first = 2 if self.early_s1 else 1
        if self.early_s1:  # step 1 with its S issued (masked: it may be the ragged tile)
            self.step(True, 1, *args, issued=True, s=s1)
        for j in self.range(first, n_full):
            self.step(False, j, *args)
        for j in self.range(max(n_full, first), n_kv):
            self.step(True, j, *args)
        if self.persistent and nxt is None:  # the last S retired: the next Q may land
            with self.single_thread():
                self.mbarrier.arrive(qempty)
        self.cwait(ring.full[ring.prev_stage], ring.prev_phase)
        if self.early_rescale:
            for oh in o:
                self.assign(oh, oh * scale_o)
        if self.late_p:
            self.assign(pa, self.cast(pf, self.dtype))
        if nxt is None:
            self.wgmma.fence()
            self.mma_pv(pa, sv[ring.prev_stage], o)
            self.wgmma.commit_group()
            self.wgmma.wait_group(0)
            self.release(ring.empty, peers[1], ring.prev_stage)
            inv = 1.0 / lsum
            lse = (m + self.log2(lsum)) * LN2
        else:  # with the next tile's first S
            inv, lse = self.overlap_end(half, ring, kfull, sk, pa, sv, o, m, lsum, peers, seq_kv,
                                        scale_log2, nxt)  # fmt: skip
        if nxt is not None:  # O into the tile's Q buffer, stored by the storer warp
            self.epilogue_overlap(half, o, inv, nxt[4][nxt[5]], nxt[6][nxt[5]])
        elif self.direct_o:  # no shared tile left for O: stored from registers
            for h in self.panel_ids:
                out = self.cast(o[h] * inv, self.dtype)
                self.store_global(go, out, offsets=[bh, row0, h * self.panel], dims=[1, 2])
        else:
            self.epilogue_staged(half, o, inv, so, go, bh, row0)
        self.store_global(glse, lse, offsets=[bh, row0, 0], dims=[1, 2])
        if not self.persistent:
            with self.single_thread():
                self.tma.wait_group(0, read=True)

    def consumer(self, g: int, num_q: int32, heads: int32, seq_kv: int32, total: int32, *args):
        """Consumer group ``g`` over its blocks (one, or persistent: every ``num_sms``-th)."""
        ring, kfull, sq, sk, sv, peers, go, glse, qbar, qempty, so, sp, scale_log2, seq_q = args
        if g == self.consumers - 1:
            self.pass_turn(g)  # group 0 takes the first turn
        if self.overlap:
            self.consumer_overlap(g, num_q, seq_kv, total, *args)
        elif self.persistent:
            qphase: uint32 = 0
            for t in self.range(self.blockIdx.x, total, self.num_sms):
                bh, _, q_row, n_kv = self.coords(t, num_q, seq_kv)
                self.consume_or_drain(seq_q, g, ring, kfull, sq, sk, sv, peers, go, glse, qbar,
                                      qempty, qphase, so, sp, bh, q_row, seq_kv, n_kv,
                                      scale_log2)  # fmt: skip
                qphase ^= 1
            if not self.direct_o:
                with self.single_thread():
                    self.tma.wait_group(0, read=True)
        else:
            t: int32 = (self.blockIdx.z * heads + self.blockIdx.y) * num_q
            bh, _, q_row, n_kv = self.coords(t + self.blockIdx.x, num_q, seq_kv)
            self.consume_or_drain(seq_q, g, ring, kfull, sq, sk, sv, peers, go, glse, qbar, qempty,
                                  0, so, sp, bh, q_row, seq_kv, n_kv, scale_log2)  # fmt: skip

    def __call__(
        self,
        batch: int32,
        heads: int32,
        seq_q: int32,
        seq_kv: int32,
        scale: float32,
        q_ptr: void_p,
        k_ptr: void_p,
        v_ptr: void_p,
        o_ptr: void_p,
        lse_ptr: ~float32,
    ):
        dt, dim = self.dtype, self.dim
        bm, bn, stages = self.block_m, self.block_n, self.num_stages
        bmh, ncg = self.rows, self.consumers
        # a cluster's blocks take neighbouring blocks of query rows (the grid rounded up to
        # whole clusters: a block past the last row loads and computes, and stores nothing)
        num_q = cdiv(seq_q, bm * self.cluster_m) * self.cluster_m
        if self.persistent:  # one block per SM loops over the blocks of query rows
            self.attrs.blocks = min(num_q * heads * batch, self.num_sms)
        else:
            self.attrs.blocks = [num_q, heads, batch]
        if self.cluster_m == 2:
            self.attrs.cluster_blocks = [2, 1, 1]
        self.attrs.warps = 4 * (ncg + 1)  # the consumer warp groups + a producer warp group
        gq = self.global_view(q_ptr, dtype=dt, shape=[batch * heads, seq_q, dim])
        gk = self.global_view(k_ptr, dtype=dt, shape=[batch * (heads // self.group), seq_kv, dim])
        gv = self.global_view(v_ptr, dtype=dt, shape=[batch * (heads // self.group), seq_kv, dim])
        go = self.global_view(o_ptr, dtype=dt, shape=[batch * heads, seq_q, dim])
        glse = self.global_view(lse_ptr, dtype=float32, shape=[batch * heads, seq_q, 1])
        total: int32 = num_q * heads * batch

        # every tile in column panels of the head dim (two in a cluster: one from each block)
        npan, pw = len(self.panel_ids), self.panel
        ov = int(self.overlap > 0)  # two Q buffers (a tile's O staged in its own)
        sq = self.shared_tensor(dtype=dt, shape=[2, ncg, npan, bmh, pw][1 - ov :])
        so = sq
        if self.persistent and not self.direct_o and not ov:
            so = self.shared_tensor(dtype=dt, shape=[ncg, npan, bmh, pw])
        sk = self.shared_tensor(dtype=dt, shape=[stages, npan, bn, pw])
        sv = self.shared_tensor(dtype=dt, shape=[stages, npan, bn, pw])
        qbar = self.mbarrier.alloc([1] * (1 + ov))
        # persistent: the consumers are done with Q (overlap: every consumer thread wrote O)
        qempty = self.mbarrier.alloc([ncg * 128] * 2 if ov else [ncg])
        qbar, qempty = (qbar, qempty) if ov else (qbar[0], qempty[0])
        # K's barriers: [0, stages) full (loaded), [stages, 2 stages) empty (read by every group
        # of the cluster)
        cm = self.cluster_m
        arrivals = ncg * 128 if self.all_arrive else ncg * cm  # on an empty barrier
        kfull = self.mbarrier.alloc([1] * stages + [arrivals] * stages)
        ring = Ring(stages, arrivals)
        peers = (None, None)
        if cm == 2:  # the peer's barriers; both blocks' exist after the sync
            peer = 1 - self.cluster.blockRank
            peers = (
                self.cluster.map_shared_addr(kfull, peer),
                self.cluster.map_shared_addr(ring.empty, peer),
            )
            self.cluster.sync()
        scale_log2: float32 = scale * LOG2E

        # registers: 64K per SM; the producer gives most of its share to the consumers
        low, high = (24, 240) if ncg == 2 else (32, 160)
        with self.warp_group(4 * ncg, 4):  # producer warp group
            self.setmaxnreg(low)
            pargs = (ring, kfull, sq, sk, sv, gq, gk, gv, qbar, qempty)
            q = "" if ov else "q"  # overlap: warp 2 loads Q and stores O
            if self.split_producer:  # warp 0 loads Q and K, warp 1 V: neither waits for the other
                with self.single_warp(0):
                    self.producer(q + "k", num_q, heads, seq_kv, total, *pargs)
                with self.single_warp(1):
                    self.producer("v", num_q, heads, seq_kv, total, *pargs)
            else:
                with self.single_warp(0):
                    self.producer(q + "kv", num_q, heads, seq_kv, total, *pargs)
            if ov:
                with self.single_warp(2):
                    with self.single_thread():
                        self.storer(num_q, seq_kv, total, sq, gq, go, qbar, qempty)
        sp = None  # P goes from registers straight into the P V WGMMA, or through shared
        if self.p_shared:
            sp = self.shared_tensor(dtype=dt, shape=[ncg, bmh, bn])
        args = (ring, kfull, sq, sk, sv, peers, go, glse, qbar, qempty, so, sp, scale_log2, seq_q)
        with self.warp_group(0, 4):
            self.setmaxnreg(high)
            self.consumer(0, num_q, heads, seq_kv, total, *args)
        with self.warp_group(4, 4):
            self.setmaxnreg(high)
            self.consumer(1, num_q, heads, seq_kv, total, *args)
        if ncg == 3:
            with self.warp_group(8, 4):
                self.setmaxnreg(high)
                self.consumer(2, num_q, heads, seq_kv, total, *args)
        if cm == 2:  # no block exits while its peer may still load into it or arrive on it
            self.cluster.sync()


def forward_launcher(q, k, v, causal: bool = False, scale=None, kernel=None, out=None):
    """Check the arguments once and return ``run() -> (o, lse)`` launching the forward kernel on
    preallocated outputs. q [b, h, sq, d], k and v [b, hkv, skv, d] (torch tensors; CPU ones run
    on the interpreter); ``kernel`` overrides the default-constructed ``FlashAttention``."""
    import torch

    b, h, hkv, sq, skv, d, dt = check_attention_args(q, k, v)
    if not default_scale(d, scale) > 0:
        raise tilus.TilusArgumentError(f"scale must be positive, got {scale}")
    if causal and sq > skv:
        raise tilus.TilusArgumentError(
            f"causal attention needs seq_q <= seq_kv, got q with {sq} rows and k with {skv}"
        )
    if kernel is None:
        kernel = FlashAttention(dim=d, dtype=dt, causal=causal, group=h // hkv)
    o = out if out is not None else torch.empty_like(q)
    lse = torch.empty((b, h, sq), dtype=torch.float32, device=q.device)
    sc = default_scale(d, scale)

    def run():
        kernel(b, h, sq, skv, sc, q, k, v, o, lse)
        return o, lse

    return run


def flash_attention(q, k, v, causal: bool = False, scale=None, kernel=None, out=None):
    """``(o, lse)``: O = softmax(scale * Q K^T) V (and the natural log-sum-exp of each row)."""
    return forward_launcher(q, k, v, causal, scale, kernel, out)()


CPU_CASES = [  # (b, h, hkv, sq, skv, d, dtype, causal)
    (1, 2, 1, 150, 150, 64, "float16", True),
    (1, 1, 1, 100, 200, 128, "bfloat16", False),
]
GPU_CASES = [
    (2, 8, 2, 1000, 1000, 128, "float16", True),
    (2, 8, 8, 1000, 1234, 64, "bfloat16", False),
    (1, 4, 1, 777, 777, 256, "float16", False),
]


def main() -> int:
    """Check the kernel against a float64 reference; returns the exit status."""
    import torch

    on_gpu = torch.cuda.is_available() and not tilus.option.get_option("interpret")
    device = "cuda" if on_gpu else "cpu"
    ok_all = True
    for b, h, hkv, sq, skv, d, dt, causal in GPU_CASES if on_gpu else CPU_CASES:
        q, k, v = random_qkv(torch, b, h, hkv, sq, skv, d, dt, device)
        o = torch.full_like(q, float("nan"))
        o, lse = flash_attention(q, k, v, causal=causal, out=o)
        ro, rl = reference(q, k, v, causal, default_scale(d, None))
        err, lerr = max_error(o, ro), max_error(lse, rl)
        ok = err < 2e-2 and lerr < 1e-3
        ok_all &= ok
        print(
            f"{b}x{h}/{hkv}x{sq}x{skv}x{d} {dt} causal={causal}: "
            f"max err {err:.2e}, lse err {lerr:.2e} {'ok' if ok else 'FAIL'}"
        )
    return 0 if ok_all else 1


if __name__ == "__main__":
    sys.exit(main())
