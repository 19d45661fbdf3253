"""FlashAttention's consumer GEMMs (``S = Q K^T``, ``O += P V`` by WGMMA), slot releases, drains."""

from __future__ import annotations

from tilus import RegisterTensor, SharedTensor, float32, int32


class FlashGemms:
    """The consumer groups' tensor-core steps of ``FlashAttention`` (a mixin of the kernel
    class): each chain over the head dim's column panels, and the releases of ring slots."""

    def first_s(self, half: int, ring, kfull, sqh, sk, s: RegisterTensor):
        """Issue ``s = Q K^T`` of a tile's first KV tile (Q and K have landed)."""
        self.wgmma.fence()
        self.mma_s(sqh, sk[ring.stage], s)
        self.wgmma.commit_group()

    def first_softmax(self, s, m, lsum, row0: int32, seq_kv: int32, scale_log2: float32):
        """``full_first``: the softmax of a tile's first score tile ``s`` (no wgmma in flight),
        P in float32, unmasked when every row of the group sees all its keys, else masked (a
        runtime branch, taken alike by the whole group: no select per score)."""
        p = self.register_tensor(dtype=float32, shape=[self.rows, self.block_n])
        bn = self.block_n
        whole: int32 = seq_kv - bn  # >= 0: the first tile holds keys only
        if self.causal:  # and the group's first row sees them all
            whole = min(whole, row0 - (bn - 1))
        if whole >= 0:
            self.assign(p, self.softmax(s, m, lsum, False, 0, row0, seq_kv, scale_log2)[0])
        else:
            self.assign(p, self.softmax(s, m, lsum, True, 0, row0, seq_kv, scale_log2)[0])
        return p

    def zero_o(self) -> list:
        """The output accumulator, zero: one ``[rows, panel]`` tile per column panel."""
        return [
            self.register_tensor(dtype=float32, shape=[self.rows, self.panel], init=0.0)
            for _ in self.panel_ids
        ]

    def mma_s(self, sq: SharedTensor, sk: SharedTensor, s: RegisterTensor):
        """``s += Q K^T``, one WGMMA chain per column panel of the head dim."""
        for h in self.panel_ids:
            self.wgmma.mma(sq[h], sk[h].transpose(), s)

    def stage_p(self, p: RegisterTensor, sp: SharedTensor):
        """P into shared memory for a shared-operand P V (``p_shared``: frees its registers)."""
        self.store_shared(sp, p)
        self.fence.proxy_async(space="shared")  # generic writes, then WGMMA reads
        self.sync()

    def mma_pv(self, pa, sv: SharedTensor, o: list):
        """``O += P V``: panel ``h`` of V into O's panel ``h``."""
        for h in self.panel_ids:
            self.wgmma.mma(pa, sv[h], o[h])

    def release(self, bars, peer, i: int32):
        """One thread arrives on barrier ``i`` of ``bars`` (in a cluster on the peer's too: its
        producer loads into this block's slots). Relaxed at cluster scope: the WGMMAs that read
        the slot have retired, and a release fence there would sit on the critical path.
        ``all_arrive``: every thread of the group arrives (one instruction a warp, no branch)."""
        if self.all_arrive:
            self.mbarrier.arrive(bars[i])
        else:
            with self.single_thread():
                self.mbarrier.arrive(bars[i])
                if self.cluster_m == 2:
                    self.mbarrier.arrive(peer[i], sem="relaxed", scope="cluster")

    def consume_or_drain(self, seq_q: int32, *cargs):
        """``consume(*cargs)``, or with ``skip_empty``, for a group whose rows all lie past
        ``seq_q``, only the waits and releases of every slot it would read (the ping-pong turns
        too), so that the producer and the other groups go on as if it had computed."""
        if self.skip_empty:
            half, ring, kfull, peers, qempty, q_row, n_kv = (
                cargs[0], cargs[1], cargs[2], cargs[6], cargs[10], cargs[15], cargs[17]
            )  # fmt: skip
            if q_row + half * self.rows < seq_q:
                self.consume(*cargs)
            else:
                for _ in self.range(n_kv):
                    self.cwait(kfull[ring.stage], ring.phase)
                    self.take_turn(half)
                    self.pass_turn(half)
                    self.release(kfull, peers[0], self.num_stages + ring.stage)
                    self.cwait(ring.full[ring.stage], ring.phase)
                    self.release(ring.empty, peers[1], ring.stage)
                    ring.advance()
                if self.persistent:  # the next Q may land
                    with self.single_thread():
                        self.mbarrier.arrive(qempty)
        else:
            self.consume(*cargs)
