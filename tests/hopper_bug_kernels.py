"""Kernels with exactly one planted protocol bug each (used by tests/test_protocol_checks.py).

Each buggy line carries a `# BUG:<name>` marker so the tests can assert the reported line.
"""

import tilus
from tilus import float16, float32, int32, uint32
from tilus.utils import cdiv


class TmaWgmma(tilus.Script):
    """A V1-style kernel whose protocol is switched by a `bug` name (one bug at a time)."""

    def __init__(self, bug: str = "none", block_m=64, block_n=64, block_k=16):
        super().__init__()
        self.bug = bug
        self.block_m, self.block_n, self.block_k = block_m, block_n, block_k

    def __call__(self, m_size: int32, n_size: int, k_size: int, a_ptr: ~float16,
                 b_ptr: ~float16, c_ptr: ~float16):
        self.attrs.blocks = [cdiv(m_size, self.block_m), cdiv(n_size, self.block_n)]
        self.attrs.warps = 4
        bm, bn, bk = self.block_m, self.block_n, self.block_k
        offset_m: int32 = bm * self.blockIdx.x
        offset_n: int32 = bn * self.blockIdx.y
        ga = self.global_view(a_ptr, dtype=float16, shape=[m_size, k_size])
        gb = self.global_view(b_ptr, dtype=float16, shape=[n_size, k_size])
        sa = self.shared_tensor(dtype=float16, shape=[bm, bk])
        sb = self.shared_tensor(dtype=float16, shape=[bn, bk])
        acc = self.register_tensor(dtype=float32, shape=[bm, bn], init=0.0)
        bars = self.mbarrier.alloc(counts=[1])
        phase: uint32 = 0
        for offset_k in range(0, k_size, bk):
            with self.single_thread():
                if self.bug == "tx_mismatch":
                    self.mbarrier.arrive_and_expect_tx(bars[0], transaction_bytes=sa.nbytes)  # BUG:tx_mismatch
                elif self.bug == "tx_pending":
                    self.mbarrier.arrive_and_expect_tx(  # BUG:tx_pending
                        bars[0], transaction_bytes=sa.nbytes + sb.nbytes + 2)
                elif self.bug != "no_expect":
                    self.mbarrier.arrive_and_expect_tx(bars[0], transaction_bytes=sa.nbytes + sb.nbytes)
                else:
                    self.mbarrier.arrive(bars[0])
                self.tma.global_to_shared(src=ga, dst=sa, offsets=[offset_m, offset_k], mbarrier=bars[0])
                self.tma.global_to_shared(src=gb, dst=sb, offsets=[offset_n, offset_k], mbarrier=bars[0])
                if self.bug == "over_arrival":
                    self.mbarrier.arrive(bars[0])  # BUG:over_arrival
            if self.bug == "missing_wait":
                self.sync()
            elif self.bug == "wrong_phase":
                self.mbarrier.wait(bars[0], phase=phase ^ 1)
            elif self.bug == "deadlock":
                self.mbarrier.wait(bars[0], phase=phase)
                self.mbarrier.wait(bars[0], phase=phase)  # BUG:deadlock
            else:
                self.mbarrier.wait(bars[0], phase=phase)
            self.sync()
            if self.bug != "no_fence":
                self.wgmma.fence()
            self.wgmma.mma(sa, sb.transpose(), acc)  # BUG:missing_wait BUG:no_expect BUG:wrong_phase BUG:no_fence
            self.wgmma.commit_group()
            if self.bug != "no_retire":
                self.wgmma.wait_group(0)
            self.sync()
            phase ^= 1
        casted = self.cast(acc, dtype=float16)  # BUG:no_retire
        gc = self.global_view(c_ptr, dtype=float16, shape=[m_size, n_size])
        self.store_global(gc, casted, offsets=[offset_m, offset_n])


class RingOverwrite(tilus.Script):
    """Two stages; the producer refills a stage while the un-retired wgmma still reads it."""

    def __init__(self, bug: str = "none"):
        super().__init__()
        self.bug = bug

    def __call__(self, m_size: int32, n_size: int, k_size: int, a_ptr: ~float16,
                 b_ptr: ~float16, c_ptr: ~float16):
        self.attrs.blocks = [cdiv(m_size, 64), cdiv(n_size, 64)]
        self.attrs.warps = 4
        offset_m: int32 = 64 * self.blockIdx.x
        offset_n: int32 = 64 * self.blockIdx.y
        ga = self.global_view(a_ptr, dtype=float16, shape=[m_size, k_size])
        gb = self.global_view(b_ptr, dtype=float16, shape=[n_size, k_size])
        sa = self.shared_tensor(dtype=float16, shape=[2, 64, 16])
        sb = self.shared_tensor(dtype=float16, shape=[2, 64, 16])
        acc = self.register_tensor(dtype=float32, shape=[64, 64], init=0.0)
        bars = self.mbarrier.alloc(counts=[1, 1])
        phase = self.register_tensor(dtype=uint32, shape=[2], init=0)
        num_iters: int32 = cdiv(k_size, 16)
        for it in range(num_iters):
            s = it % 2
            with self.single_thread():
                self.mbarrier.arrive_and_expect_tx(bars[s], transaction_bytes=sa[s].nbytes + sb[s].nbytes)
                self.tma.global_to_shared(src=ga, dst=sa[s], offsets=[offset_m, it * 16], mbarrier=bars[s])  # BUG:overwrite
                self.tma.global_to_shared(src=gb, dst=sb[s], offsets=[offset_n, it * 16], mbarrier=bars[s])
            self.mbarrier.wait(bars[s], phase=phase[s])
            phase[s] ^= 1
            self.wgmma.fence()
            self.wgmma.mma(sa[s], sb[s].transpose(), acc)
            self.wgmma.commit_group()
            if self.bug == "overwrite":
                self.wgmma.wait_group(2)
            else:
                self.wgmma.wait_group(1)
        self.wgmma.wait_group(0)
        gc = self.global_view(c_ptr, dtype=float16, shape=[m_size, n_size])
        self.store_global(gc, self.cast(acc, dtype=float16), offsets=[offset_m, offset_n])


class MisuseWgmma(tilus.Script):
    """wgmma.mma inside a 64-thread group."""

    def __call__(self, a_ptr: ~float16):
        self.attrs.blocks = 1
        self.attrs.warps = 4
        sa = self.shared_tensor(dtype=float16, shape=[64, 16])
        sb = self.shared_tensor(dtype=float16, shape=[16, 64])
        acc = self.register_tensor(dtype=float32, shape=[64, 64], init=0.0)
        with self.thread_group(thread_begin=0, num_threads=64):
            self.wgmma.mma(sa, sb, acc)  # BUG:misuse_wgmma


class MisuseTma(tilus.Script):
    """TMA issued by a 64-thread group."""

    def __call__(self, a_ptr: ~float16):
        self.attrs.blocks = 1
        self.attrs.warps = 4
        ga = self.global_view(a_ptr, dtype=float16, shape=[64, 64])
        sa = self.shared_tensor(dtype=float16, shape=[64, 64])
        bars = self.mbarrier.alloc(counts=[1])
        with self.thread_group(thread_begin=0, num_threads=64):
            self.tma.global_to_shared(src=ga, dst=sa, offsets=[0, 0], mbarrier=bars[0])  # BUG:misuse_tma


class Ring(tilus.Class):
    """A full/empty barrier ring whose producer's initial phase is a parameter."""

    def __init__(self, stages: int, producer_phase: int, consumers: int):
        self.stages: int = stages
        self.full = self.mbarrier.alloc([1 for _ in range(stages)])
        self.empty = self.mbarrier.alloc([consumers for _ in range(stages)])
        self.p_stage: int32 = 0
        self.c_stage: int32 = 0
        self.p_phase: uint32 = producer_phase
        self.c_phase: uint32 = 0

    def p_advance(self):
        self.p_stage = (self.p_stage + 1) % self.stages
        self.p_phase = self.p_phase ^ (self.p_stage == 0)

    def c_advance(self):
        self.c_stage = (self.c_stage + 1) % self.stages
        self.c_phase = self.c_phase ^ (self.c_stage == 0)


class WarpSpecialized(tilus.Script):
    """Producer warp + consumer warp group; `bug` plants one protocol error."""

    def __init__(self, bug: str = "none", stages=2):
        super().__init__()
        self.bug = bug
        self.stages = stages

    def __call__(self, m_size: int32, n_size: int, k_size: int, a_ptr: ~float16,
                 b_ptr: ~float16, c_ptr: ~float16):
        self.attrs.blocks = [cdiv(m_size, 64), cdiv(n_size, 64)]
        self.attrs.warps = 5
        offset_m: int32 = 64 * self.blockIdx.x
        offset_n: int32 = 64 * self.blockIdx.y
        ga = self.global_view(a_ptr, dtype=float16, shape=[m_size, k_size])
        gb = self.global_view(b_ptr, dtype=float16, shape=[n_size, k_size])
        sa = self.shared_tensor(dtype=float16, shape=[self.stages, 64, 16])
        sb = self.shared_tensor(dtype=float16, shape=[self.stages, 64, 16])
        ring = Ring(self.stages, 0 if self.bug == "deadlock" else 1, 1)
        with self.thread_group(thread_begin=128, num_threads=32):
            for offset_k in self.range(0, k_size, 16, unroll=self.stages):
                self.mbarrier.wait(ring.empty[ring.p_stage], phase=ring.p_phase)  # BUG:deadlock
                with self.single_thread():
                    self.mbarrier.arrive_and_expect_tx(
                        ring.full[ring.p_stage],
                        transaction_bytes=sa[ring.p_stage].nbytes + sb[ring.p_stage].nbytes)
                    self.tma.global_to_shared(src=ga, dst=sa[ring.p_stage],
                                              offsets=[offset_m, offset_k],
                                              mbarrier=ring.full[ring.p_stage])
                    self.tma.global_to_shared(src=gb, dst=sb[ring.p_stage],
                                              offsets=[offset_n, offset_k],
                                              mbarrier=ring.full[ring.p_stage])
                ring.p_advance()
        with self.thread_group(thread_begin=0, num_threads=128):
            acc = self.register_tensor(dtype=float32, shape=[64, 64], init=0.0)
            for _ in self.range(0, k_size, 16, unroll=self.stages):
                self.mbarrier.wait(ring.full[ring.c_stage], phase=ring.c_phase)
                self.wgmma.fence()
                self.wgmma.mma(sa[ring.c_stage], sb[ring.c_stage].transpose(), acc)
                self.wgmma.commit_group()
                self.wgmma.wait_group(0)
                with self.single_thread():
                    self.mbarrier.arrive(ring.empty[ring.c_stage])
                ring.c_advance()
            gc = self.global_view(c_ptr, dtype=float16, shape=[m_size, n_size])
            self.store_global(gc, self.cast(acc, dtype=float16), offsets=[offset_m, offset_n])
