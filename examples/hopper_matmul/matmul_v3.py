"""Hopper matmul V3: warp specialization (a TMA producer warp and a WGMMA consumer warp group).

``C = A @ B^T`` (fp16 in, fp32 accumulate, fp16 out). In V2 every thread both loads and
computes, so the whole block meets at a barrier around each stage. V3 gives the block 5 warps
and splits them by role:

- the producer, warp 4 (``thread_group(128, 32)``), only issues TMA copies into a ring of
  ``num_stages`` shared slots;
- the consumer, warps 0-3 (``thread_group(0, 128)``), only runs WGMMA on filled slots.

They talk through two mbarriers per slot instead of block barriers. ``full[s]`` (count 1)
completes when the producer's single expect-tx arrival and the TMA bytes of slot ``s`` are in;
``empty[s]`` (count 128) completes when all 128 consumer threads have arrived after their WGMMA
on slot ``s`` retired. Each role walks the ring with its own ``int32`` stage and ``uint32`` phase
scalar; the phase flips whenever the stage wraps to 0. The producer starts at phase 1, so its
first pass over the ring waits on the phase that "completed" before the barrier existed and does
not block; the consumer starts at phase 0 and blocks until the first tiles arrive. Loops use
``self.range(..., unroll=num_stages)`` so that, once unrolled, each copy of the body addresses a
fixed slot. At the end the producer waits for the consumer to release the last
``min(num_stages, iterations)`` slots, so no copy is left in flight when the block exits.

Run ``python examples/hopper_matmul/matmul_v3.py``.
"""

import sys

import harness

import tilus
from tilus import float16, float32, int32, uint32
from tilus.utils import cdiv


# The tutorial's space: num_stages in {2, ..., 7} x (block_m, block_n) in {(128, 64), (128, 128),
# (128, 256), (256, 128), (256, 256)} x block_k in {16, 32, 64} = 90 configs. Kept here: 12.
@tilus.autotune("num_stages", [2, 3, 4])
@tilus.autotune("block_m, block_n", [(128, 128), (128, 256)])
@tilus.autotune("block_k", [32, 64])
class MatmulWGMMAV3(tilus.Script):
    """A producer warp feeding a consumer warp group through full/empty barrier pairs."""

    def __init__(self, num_stages, block_m, block_n, block_k):
        super().__init__()
        self.num_stages = num_stages
        self.block_m = block_m
        self.block_n = block_n
        self.block_k = block_k

    def __call__(
        self,
        m_size: int32,
        n_size: int,
        k_size: int,
        a_ptr: ~float16,
        b_ptr: ~float16,
        c_ptr: ~float16,
    ):
        num_stages = self.num_stages
        block_m, block_n, block_k = self.block_m, self.block_n, self.block_k
        self.attrs.blocks = [cdiv(m_size, block_m), cdiv(n_size, block_n)]
        self.attrs.warps = 5  # warps 0-3: consumer warp group, warp 4: producer

        offset_m: int32 = block_m * self.blockIdx.x
        offset_n: int32 = block_n * self.blockIdx.y

        ga = self.global_view(a_ptr, dtype=float16, shape=[m_size, k_size])
        gb = self.global_view(b_ptr, dtype=float16, shape=[n_size, k_size])
        gc = self.global_view(c_ptr, dtype=float16, shape=[m_size, n_size])
        sa = self.shared_tensor(dtype=float16, shape=[num_stages, block_m, block_k])
        sb = self.shared_tensor(dtype=float16, shape=[num_stages, block_n, block_k])

        full = self.mbarrier.alloc(counts=[1] * num_stages)
        empty = self.mbarrier.alloc(counts=[128] * num_stages)

        with self.thread_group(128, 32):  # producer warp
            p_stage: int32 = 0
            p_phase: uint32 = 1
            for offset_k in self.range(0, k_size, block_k, unroll=num_stages):
                self.mbarrier.wait(empty[p_stage], phase=p_phase)  # slot released?
                with self.single_thread():
                    self.mbarrier.arrive_and_expect_tx(
                        full[p_stage], transaction_bytes=sa[p_stage].nbytes + sb[p_stage].nbytes
                    )
                    self.tma.global_to_shared(
                        src=ga,
                        dst=sa[p_stage],
                        offsets=[offset_m, offset_k],
                        mbarrier=full[p_stage],
                    )
                    self.tma.global_to_shared(
                        src=gb,
                        dst=sb[p_stage],
                        offsets=[offset_n, offset_k],
                        mbarrier=full[p_stage],
                    )
                p_stage = (p_stage + 1) % num_stages
                if p_stage == 0:
                    p_phase ^= 1
            # drain: wait until the consumer has released every slot still in use
            for _ in self.range(min(num_stages, cdiv(k_size, block_k))):
                self.mbarrier.wait(empty[p_stage], phase=p_phase)
                p_stage = (p_stage + 1) % num_stages
                if p_stage == 0:
                    p_phase ^= 1

        with self.thread_group(0, 128):  # consumer warp group
            acc = self.register_tensor(dtype=float32, shape=[block_m, block_n], init=0.0)
            c_stage: int32 = 0
            c_phase: uint32 = 0
            for _ in self.range(0, k_size, block_k, unroll=num_stages):
                self.mbarrier.wait(full[c_stage], phase=c_phase)  # slot filled?
                self.wgmma.fence()
                self.wgmma.mma(sa[c_stage], sb[c_stage].transpose(), acc)
                self.wgmma.commit_group()
                self.wgmma.wait_group(0)
                self.mbarrier.arrive(empty[c_stage])  # all 128 threads arrive
                c_stage = (c_stage + 1) % num_stages
                if c_stage == 0:
                    c_phase ^= 1
            self.sync()  # named barrier over the 128 consumer threads
            self.store_global(gc, self.cast(acc, dtype=float16), offsets=[offset_m, offset_n])


def main() -> int:
    """Check V3 against NumPy and print a table; returns the exit status."""
    return harness.run(MatmulWGMMAV3)


if __name__ == "__main__":
    sys.exit(main())
