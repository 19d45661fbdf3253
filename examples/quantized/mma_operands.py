"""The W4A16 mma.sync kernel's operand movers: the ring's copies, the packed words, the scales."""

from __future__ import annotations

from mma_codecs import CHUNK

from tilus import int32
from tilus.ir.layout import spatial


def words_layout(warps: int, lane_words: int = 8):
    """A chunk's packed words [warps, 32 * lane_words] in registers: lane l of warp w holds
    words ``lane_words * l`` on (its run: 32 bytes at 4 bits)."""
    return spatial(warps, 32).local(1, lane_words)


class MmaOperands:
    """The loads and copies of ``MatmulWxA16Mma`` (``matmul_wx_a16_mma.py``): a mixin that
    reads the kernel's config (``unroll``, ``warps``, ``stages``, ``group``, the ring flags)."""

    def wscales(self, gs, on: int32, chunk: int32, s_layout):
        """The block's rows' scales of chunk ``chunk``, in the accumulator's row layout (with
        ``s_smem`` from the shared tile ``gs``, a chunk's scales a row)."""
        if self.s_smem:
            gi: int32 = chunk * CHUNK // self.group
            if gi >= gs.shape[0]:
                gi = gs.shape[0] - 1  # a chunk past K (its codes and X are zero): any scale
            row = self.load_shared(gs[gi])
            sc = self.reshape(row, [16 * self.warps, 1])
        else:
            sc = self.load_global(gs, offsets=[on, chunk * CHUNK // self.group],
                                  shape=[16 * self.warps, 1])  # fmt: skip
        self.annotate_layout(sc, s_layout)  # the accumulator's rows
        return sc

    def wcodes(self, gw32, on: int32, chunk: int32):
        """The packed words of chunk ``chunk`` of the block's rows (uint32 [warps, cw]: each
        lane's run contiguous, two 16-byte loads at 4 bits)."""
        nw = self.warps
        raw = self.load_global(gw32, offsets=[chunk, on // 16, 0], shape=[nw, self.chunk_words],
                               dims=[1, 2])  # fmt: skip
        self.annotate_layout(raw, words_layout(nw, self.lane_words))  # lane l: its run
        return raw

    def fill_x(self, gxk, sx, step: int32, slot: int32, s_hi: int32, om: int32, kc: int,
               gw32, sw, on: int32, wbar, gwt, gxt, free=None):  # fmt: skip
        """Start copying the X chunks of step ``step`` (and with ``w_ring`` its weight chunks)
        into ring slot ``slot`` (one commit group); a step past the part's last reads nothing
        (zero-filled). ``free`` = ``(ebar, t)``: the issuing thread first waits until every
        thread has read the slot in step ``t - 1`` (none at ``t`` = 0)."""
        k0: int32 = step * self.unroll
        if step >= s_hi:
            k0 = kc
        if not self.x_tma:
            self.copy_async(gxk, sx[slot], offsets=[k0, om, 0])
        if self.w_tma:
            if step < s_hi:  # none past the part: no copy is in flight when the block ends
                with self.single_thread():
                    if free is not None:
                        ebar, t = free
                        if t > 0:  # the slot's (t - 1) // ns-th use ended
                            self.mbarrier.wait(ebar[slot], phase=((t - 1) // self.stages) % 2)
                    nbytes = sw[slot].nbytes + (sx[slot].nbytes if self.x_tma else 0)
                    self.mbarrier.arrive_and_expect_tx(wbar[slot], transaction_bytes=nbytes)
                    if self.x_mcast:  # (implies x_tma) alternate chunks, into both blocks
                        rank = self.cluster.blockRank
                        for h in self.chunks[: self.unroll // 2]:
                            c: int32 = 2 * h + rank
                            self.tma.global_to_shared(src=gxt, dst=sx[slot, c],  # CHECK:mcast
                                                      offsets=[om, (k0 + c) * CHUNK],
                                                      mbarrier=wbar[slot],
                                                      multicast_mask=0b11)  # fmt: skip
                    elif self.x_tma:
                        for c in self.chunks:  # a box [block_m, 128] a chunk (zero rows past M)
                            self.tma.global_to_shared(src=gxt, dst=sx[slot, c],
                                                      offsets=[om, (k0 + c) * CHUNK],
                                                      mbarrier=wbar[slot])  # fmt: skip
                    hv = self.halves
                    for c in self.chunks:  # a box [warps, cw words] (or [warps, 2, cw / 2])
                        self.tma.global_to_shared(src=gwt, dst=sw[slot, c],
                                                  offsets=[on // 16, (k0 + c) * hv, 0],
                                                  dims=[0, 2] if hv == 1 else [0, 1, 2],
                                                  mbarrier=wbar[slot])  # fmt: skip
        elif self.w_ring:
            self.copy_async(gw32, sw[slot], offsets=[k0, on // 16, 0])
        self.copy_async_commit_group()

    def stage_scales(self, scl, on: int32, kg: int):
        """With ``s_smem``: the block's rows' scales over the whole K range loaded by warp group
        ``kg`` into its shared tile, group-major (``[K / group, rows]``: a chunk's scales are a
        row); returns the tile."""
        gs, ssm = scl
        nw = self.warps
        ng = ssm.shape[1]
        allsc = self.load_global(gs, offsets=[on, 0], shape=[16 * nw, ng])
        self.store_shared(ssm[kg], self.transpose(allsc))
        self.sync()  # the warp group's barrier: every row is in
        return ssm[kg]

    def ring_words(self, sw_c):
        """A chunk's packed words from the ring (uint32 [warps, cw]: a lane's run, two
        16-byte shared loads at 4 bits)."""
        nw, lw = self.warps, self.lane_words
        raw = self.load_shared(sw_c)
        if self.halves == 1:
            self.annotate_layout(raw, words_layout(nw, lw))  # lane l: its run
        else:  # [warps, 2, cw / 2]: lanes 0-15 in the first half, 16-31 in the second
            self.annotate_layout(raw, spatial(nw, 2, 16).local(1, 1, lw))
            raw = self.reshape(raw, [nw, 32 * lw])
        return raw
