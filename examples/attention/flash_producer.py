"""FlashAttention's producer warps: Q, then K and V of every KV tile into the ring by TMA."""

from __future__ import annotations

from flash_tiles import Ring

import tilus
from tilus import SharedTensor, int32, uint32
from tilus.utils import cdiv


class FlashProducer:
    """The producer side of ``FlashAttention`` (a mixin of the kernel class), the order of
    its blocks and the consumer groups' turns."""

    def set_suspend(self, more: dict, suspend_ns, consumer_suspend_ns):
        """The try_wait suspend-time hints (ns; None: the system's limit) of the producer and
        storer waits and of the consumer waits; an argument given wins over the tile's."""
        hints = []
        for name, v in (("suspend_ns", suspend_ns), ("consumer_suspend_ns", consumer_suspend_ns)):
            v = more.get(name) if v is None else v
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v <= 0):
                raise tilus.TilusArgumentError(f"{name} must be a positive int, got {v!r}")
            hints.append(v)
        self.suspend_ns, self.consumer_suspend_ns = hints

    def pwait(self, barrier, phase, sem="relaxed"):
        """A producer or storer wait (with ``suspend_ns``)."""
        self.mbarrier.wait(barrier, phase=phase, sem=sem, suspend_ns=self.suspend_ns)

    def cwait(self, barrier, phase):
        """A consumer wait (with ``consumer_suspend_ns``)."""
        self.mbarrier.wait(barrier, phase=phase, suspend_ns=self.consumer_suspend_ns)

    def take_turn(self, g: int):
        """Ping-pong: wait until the previous consumer group has issued its GEMMs (named
        barrier ``1 + g``), so that the groups' softmaxes run while the others' GEMMs do."""
        if self.pingpong:
            self.sync_named(1 + g, 256)

    def pass_turn(self, g: int):
        """Ping-pong: let the next consumer group (cyclically) issue its GEMMs."""
        if self.pingpong:
            self.arrive_named(1 + (g + 1) % self.consumers, 256)

    def kv_tiles(self, q_row: int32, seq_kv: int32):
        """How many KV tiles the block at query row ``q_row`` reads (causal: up to the diagonal)."""
        n = cdiv(seq_kv, self.block_n)
        if self.causal:
            n = min(n, cdiv(q_row + self.block_m, self.block_n))
        if self.early_s1:  # the second S is issued unconditionally: a tile past the end, masked
            n = max(n, 2)
        return n

    def coords(self, t: int32, num_q: int32, seq_kv: int32):
        """Block ``t`` of the grid (q-tiles fastest, then heads and batch): its (batch x head)
        index, KV head, first query row and KV tile count; causal: the longest rows first."""
        q_tile: int32 = t % num_q
        if self.causal:
            q_tile = num_q - 1 - q_tile
        bh: int32 = t // num_q
        q_row: int32 = q_tile * self.block_m
        # a cluster's blocks (q tiles 2c and 2c + 1) read the same KV tiles: causal, the lower
        # one reads the upper one's last tile too, wholly masked for its rows
        last: int32 = (q_tile | (self.cluster_m - 1)) * self.block_m
        return bh, bh // self.group, q_row, self.kv_tiles(last, seq_kv)

    def producer(self, what: str, num_q: int32, heads: int32, seq_kv: int32, total: int32, *args):
        """A producer warp over its blocks (one, or persistent: every ``num_sms``-th), loading
        ``what`` of Q, K and V."""
        if self.persistent:
            qphase: uint32 = 0
            for t in self.range(self.blockIdx.x, total, self.num_sms):
                bh, bkv, q_row, n_kv = self.coords(t, num_q, seq_kv)
                self.produce(what, *args, qphase, bh, bkv, q_row, n_kv)
                qphase ^= 1
        else:
            t: int32 = (self.blockIdx.z * heads + self.blockIdx.y) * num_q
            bh, bkv, q_row, n_kv = self.coords(t + self.blockIdx.x, num_q, seq_kv)
            self.produce(what, *args, 0, bh, bkv, q_row, n_kv)

    def produce(
        self,
        what: str,
        ring: Ring,
        kfull,
        sq,
        sk,
        sv,
        gq,
        gk,
        gv,
        qbar,
        qempty,
        qphase: uint32,
        bh: int32,
        bkv: int32,
        q_row: int32,
        n_kv: int32,
    ):
        """A producer warp, for one block of query rows: Q (``"q" in what``; persistent: once
        the consumers no longer read the previous one), then K and/or V of every KV tile into
        the ring."""
        if "q" in what:
            if self.persistent:
                self.pwait(qempty, qphase ^ 1)
            self.load_q(sq, gq, qbar, bh, q_row, elect=True)
        stages = self.num_stages
        for j in self.range(n_kv):
            # K and V slots are released apart (K once S retired, V once P V did), so K of the
            # next tile loads while the consumers still multiply by V of the last one
            if "k" in what:
                self.pwait(kfull[stages + ring.stage], ring.phase ^ 1)
                with self.single_thread():
                    self.mbarrier.arrive_and_expect_tx(
                        kfull[ring.stage], transaction_bytes=sk[ring.stage].nbytes
                    )
                self.load_kv(gk, sk[ring.stage], kfull[ring.stage], bkv, j)
            if "v" in what:
                self.pwait(ring.empty[ring.stage], ring.phase ^ 1)
                with self.single_thread():
                    self.mbarrier.arrive_and_expect_tx(
                        ring.full[ring.stage], transaction_bytes=sv[ring.stage].nbytes
                    )
                self.load_kv(gv, sv[ring.stage], ring.full[ring.stage], bkv, j)
            ring.advance()

    def load_q(self, sqb, gq, bar, bh: int32, q_row: int32, elect: bool = False):
        """The Q tile at ``q_row`` of head ``bh`` into shared buffer ``sqb`` (barrier ``bar``),
        one copy per consumer group and column panel; ``elect``: a warp calls it, one of its
        threads arrives (the storer thread calls it alone)."""
        if elect:
            with self.single_thread():
                self.mbarrier.arrive_and_expect_tx(bar, transaction_bytes=sqb.nbytes)
        else:
            self.mbarrier.arrive_and_expect_tx(bar, transaction_bytes=sqb.nbytes)
        for g in self.range(self.consumers, unroll=self.consumers):
            for h in self.panel_ids:
                self.tma.global_to_shared(
                    src=gq,
                    dst=sqb[g, h],
                    offsets=[bh, q_row + g * self.rows, h * self.panel],
                    dims=[1, 2],
                    mbarrier=bar,
                )

    def load_kv(self, src, dst: SharedTensor, bar, bkv: int32, j: int32):
        """KV tile ``j`` (its column panels) into ring slot ``dst``; in a cluster each block
        loads one panel into both blocks' slot (and barrier)."""
        if self.cluster_m == 1:
            for h in self.panel_ids:
                self.tma.global_to_shared(
                    src=src,
                    dst=dst[h],
                    offsets=[bkv, j * self.block_n, h * self.panel],
                    dims=[1, 2],
                    mbarrier=bar,
                )
        else:
            rank = self.cluster.blockRank
            self.tma.global_to_shared(
                src=src,
                dst=dst[rank],
                offsets=[bkv, j * self.block_n, rank * self.panel],
                dims=[1, 2],
                mbarrier=bar,
                multicast_mask=0b11,
            )
