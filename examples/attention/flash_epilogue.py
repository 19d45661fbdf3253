"""FlashAttention's epilogues: O staged in shared memory and stored by TMA, and ``overlap``'s."""

from __future__ import annotations

from tilus import float32, int32

LN2 = 0.6931471805599453


class FlashEpilogue:
    """The output side of ``FlashAttention`` (a mixin of the kernel class).

    ``overlap`` (persistent): Q has two shared buffers, one for each parity of a block's tiles.
    A consumer group ends a tile by issuing the last ``P V`` and, at once, the first
    ``S = Q K^T`` of its next tile (whose Q and first K have landed), then normalizes O and
    writes it into the tile's own Q buffer (no longer read) while that S runs. A storer warp
    of the producer group stores that O by TMA and loads the Q after next into the buffer, so
    no consumer waits on a store, and the tensor cores are not idle between tiles."""

    def epilogue_staged(self, half: int, o: list, inv, so, go, bh: int32, row0: int32):
        """O through shared memory, then one TMA store (in Q's tile unless persistent: the next
        Q may land there while this tile's output is stored)."""
        if self.persistent:
            with self.single_thread():  # the thread that issued the previous tile's store
                self.tma.wait_group(0, read=True)  # it has read the staging tile
        self.sync()
        for h in self.panel_ids:
            self.store_shared(so[half, h], self.cast(o[h] * inv, self.dtype))
        self.fence.proxy_async(space="shared")
        self.sync()
        with self.single_thread():
            for c in self.panel_ids:
                self.tma.shared_to_global(
                    so[half, c], go, offsets=[bh, row0, c * self.panel], dims=[1, 2]
                )
            self.tma.commit_group()

    def epilogue_overlap(self, half: int, o: list, inv, sqb, ofull):
        """``overlap``: O into this group's part of the tile's Q buffer ``sqb``; every thread
        arrives on ``ofull`` once its writes are visible to the storer's TMA."""
        for h in self.panel_ids:
            self.store_shared(sqb[half, h], self.cast(o[h] * inv, self.dtype))
        self.fence.proxy_async(space="shared")
        self.mbarrier.arrive(ofull)

    def consumer_overlap(self, g: int, num_q: int32, seq_kv: int32, total: int32, *args):
        """``overlap``: consumer group ``g`` over its blocks (every ``num_sms``-th), each block's
        first S issued by the block before (the first one's here; ``overlap=2``: its softmax
        too, P and the row statistics carried into the block)."""
        ring, kfull, sq, sk, sv, peers, go, glse, qbar, qempty, so, sp, scale_log2, _ = args
        ofull = qempty  # overlap: [2] barriers, the tile's O is in its Q buffer
        bmh, bn = self.rows, self.block_n
        s0 = self.register_tensor(dtype=float32, shape=[bmh, bn], init=0.0)
        m = self.register_tensor(dtype=float32, shape=[bmh, 1], init=-float("inf"))
        lsum = self.register_tensor(dtype=float32, shape=[bmh, 1], init=0.0)
        pa = None
        self.cwait(qbar[0], 0)
        self.cwait(kfull[ring.stage], ring.phase)
        self.take_turn(g)  # pingpong: every issue of GEMMs is a turn (the same count per group)
        self.wgmma.fence()
        self.mma_s(sq[0, g], sk[ring.stage], s0)
        self.wgmma.commit_group()
        self.pass_turn(g)
        if self.overlap == 2:
            _, _, q_row, _ = self.coords(self.blockIdx.x, num_q, seq_kv)
            self.wgmma.wait_group(0)
            self.release(kfull, peers[0], self.num_stages + ring.stage)  # K_0 is read
            p, _ = self.softmax(s0, m, lsum, True, 0, q_row + g * bmh, seq_kv, scale_log2)
            pa = self.cast(p, self.dtype)
            ring.advance()
        i: int32 = 0  # the block's tiles so far: Q buffer i & 1, its phase (i >> 1) & 1
        for t in self.range(self.blockIdx.x, total, self.num_sms):
            bh, _, q_row, n_kv = self.coords(t, num_q, seq_kv)
            _, _, q_next, _ = self.coords(t + self.num_sms, num_q, seq_kv)
            b: int32 = i & 1
            nxt = (s0, t + self.num_sms < total, qbar[1 - b], ((i + 1) >> 1) & 1, sq, b, ofull,
                   q_next + g * bmh, (m, lsum, pa))  # fmt: skip
            self.consume(g, ring, kfull, sq[b], sk, sv, peers, go, glse, qbar, qempty, 0, so, sp,
                         bh, q_row, seq_kv, n_kv, scale_log2, nxt=nxt)  # fmt: skip
            i += 1
        self.wgmma.wait_group(0)  # the S issued after the last tile

    def overlap_end(self, half: int, ring, kfull, sk, pa, sv, o: list, m, lsum, peers,
                    seq_kv: int32, scale_log2: float32, nxt):  # fmt: skip
        """``overlap``: the last ``P V`` of a tile and the first S of the block's next tile;
        returns this tile's ``1 / rowsum`` and log-sum-exp once that ``P V`` has retired (the S
        may still run; ``overlap=2``: the S is issued first, and its softmax runs during the
        ``P V``, leaving the next tile's P in ``pa`` and its statistics in ``m``, ``lsum``). The
        waits come before the issues, and the S is issued even after the block's last tile (on
        stale tiles, never read): a branch or a wait loop while a wgmma is in flight serializes
        every wgmma."""
        s0, has_next, qbar_next, qphase_next, sq, b, _, row0_next, _ = nxt
        if has_next:
            self.cwait(qbar_next, qphase_next)
            self.cwait(kfull[ring.stage], ring.phase)
        self.assign(s0, self.register_tensor(dtype=float32, shape=s0.shape, init=0.0))
        self.take_turn(half)
        self.wgmma.fence()
        if self.overlap == 2:
            self.mma_s(sq[1 - b, half], sk[ring.stage], s0)
            self.wgmma.commit_group()
        self.mma_pv(pa, sv[ring.prev_stage], o)
        self.wgmma.commit_group()
        if self.overlap == 1:
            self.mma_s(sq[1 - b, half], sk[ring.stage], s0)
            self.wgmma.commit_group()
        self.pass_turn(half)
        self.wgmma.wait_group(1)
        inv = 1.0 / lsum
        lse = (m + self.log2(lsum)) * LN2
        if self.overlap == 2:  # S of the next tile has landed; P V may still run
            self.release(kfull, peers[0], self.num_stages + ring.stage)
            self.assign(m, self.register_tensor(dtype=float32, shape=m.shape, init=-float("inf")))
            self.assign(lsum, self.register_tensor(dtype=float32, shape=m.shape, init=0.0))
            p, _ = self.softmax(s0, m, lsum, True, 0, row0_next, seq_kv, scale_log2)
            pn = self.cast(p, self.dtype)
            self.wgmma.wait_group(0)
            self.release(ring.empty, peers[1], ring.prev_stage)
            self.assign(pa, pn)
            ring.advance()
        else:
            self.release(ring.empty, peers[1], ring.prev_stage)
        return inv, lse

    def storer(self, num_q: int32, seq_kv: int32, total: int32, sq, gq, go, qbar, ofull):
        """``overlap``: one thread loads each tile's Q into the buffer of its parity and stores
        each tile's O from there once the consumers wrote it (then the Q after next loads)."""
        i: int32 = 0
        bh, _, q_row, _ = self.coords(self.blockIdx.x, num_q, seq_kv)
        self.load_q(sq[0], gq, qbar[0], bh, q_row)
        for t in self.range(self.blockIdx.x, total, self.num_sms):
            b: int32 = i & 1
            if i >= 1:  # the previous tile's O, then the buffer is free for the next Q
                self.store_o(sq[1 - b], go, ofull[1 - b], ((i - 1) >> 1) & 1, t - self.num_sms,
                             num_q, seq_kv)  # fmt: skip
            if t + self.num_sms < total:
                bh, _, q_row, _ = self.coords(t + self.num_sms, num_q, seq_kv)
                self.load_q(sq[1 - b], gq, qbar[1 - b], bh, q_row)
            i += 1
        last: int32 = self.blockIdx.x + (i - 1) * self.num_sms
        self.store_o(sq[(i - 1) & 1], go, ofull[(i - 1) & 1], ((i - 1) >> 1) & 1, last, num_q,
                     seq_kv)  # fmt: skip

    def store_o(self, sqb, go, ofull, phase: int32, t: int32, num_q: int32, seq_kv: int32):
        """Tile ``t``'s O from Q buffer ``sqb`` by TMA once the consumers wrote it; returns once
        the copy has read the buffer."""
        bh, _, q_row, _ = self.coords(t, num_q, seq_kv)
        self.pwait(ofull, phase, sem="acquire")
        for g in self.range(self.consumers, unroll=self.consumers):
            for h in self.panel_ids:
                self.tma.shared_to_global(
                    sqb[g, h], go, offsets=[bh, q_row + g * self.rows, h * self.panel], dims=[1, 2]
                )
        self.tma.commit_group()
        self.tma.wait_group(0, read=True)
