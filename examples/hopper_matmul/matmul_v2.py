"""Hopper matmul V2: a multi-stage ring of shared buffers (software pipelining).

``C = A @ B^T`` (fp16 in, fp32 accumulate, fp16 out). V1 loads a K tile, waits, multiplies, and
only then loads the next one, so the TMA engine and the tensor cores take turns. V2 gives shared
memory ``num_stages`` slots, each with its own mbarrier. Before the main loop the first
``min(num_stages, iterations)`` K tiles are requested without waiting (the prologue). Iteration
``i`` then waits for slot ``i % num_stages``, runs WGMMA on it to completion, and refills the same
slot with K tile ``i + num_stages`` if there is one, so up to ``num_stages`` loads stay in flight.

Every slot's barrier completes once per use, so each slot keeps its own phase bit: a small
``uint32`` register tensor with one entry per stage, flipped when that slot is consumed. All 128
threads still play both roles: a block barrier after each WGMMA keeps the refill of a slot
behind every warp's last read of it, and that lock-step is what V3 removes.

Run ``python examples/hopper_matmul/matmul_v2.py``.
"""

import sys

import harness

import tilus
from tilus import GlobalTensor, SharedTensor, float16, float32, int32, uint32
from tilus.utils import cdiv


# The tutorial's space: num_stages in {2, 3, 4} x (block_m, block_n) in {(64, 128), (128, 128),
# (128, 256), (256, 128), (256, 256)} x block_k in {16, 32, 64} = 45 configs. Kept here: 12.
@tilus.autotune("num_stages", [2, 3, 4])
@tilus.autotune("block_m, block_n", [(64, 128), (128, 128)])
@tilus.autotune("block_k", [32, 64])
class MatmulWGMMAV2(tilus.Script):
    """V1 with a ``num_stages``-deep ring of shared tiles, each slot with its own barrier."""

    def __init__(self, num_stages, block_m, block_n, block_k):
        super().__init__()
        self.num_stages = num_stages
        self.block_m = block_m
        self.block_n = block_n
        self.block_k = block_k

    def issue_load(
        self,
        ga: GlobalTensor,
        gb: GlobalTensor,
        sa: SharedTensor,
        sb: SharedTensor,
        barrier: int32,
        offset_m: int32,
        offset_n: int32,
        offset_k: int32,
    ):
        """From one elected thread: arm ``barrier`` and start the TMA copies of one K tile."""
        with self.single_thread():
            self.mbarrier.arrive_and_expect_tx(barrier, transaction_bytes=sa.nbytes + sb.nbytes)
            self.tma.global_to_shared(
                src=ga, dst=sa, offsets=[offset_m, offset_k], mbarrier=barrier
            )
            self.tma.global_to_shared(
                src=gb, dst=sb, offsets=[offset_n, offset_k], mbarrier=barrier
            )

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
        self.attrs.warps = 4

        offset_m: int32 = block_m * self.blockIdx.x
        offset_n: int32 = block_n * self.blockIdx.y

        ga = self.global_view(a_ptr, dtype=float16, shape=[m_size, k_size])
        gb = self.global_view(b_ptr, dtype=float16, shape=[n_size, k_size])
        sa = self.shared_tensor(dtype=float16, shape=[num_stages, block_m, block_k])
        sb = self.shared_tensor(dtype=float16, shape=[num_stages, block_n, block_k])
        acc = self.register_tensor(dtype=float32, shape=[block_m, block_n], init=0.0)

        loaded = self.mbarrier.alloc(counts=[1] * num_stages)
        phases = self.register_tensor(dtype=uint32, shape=[num_stages], init=0)
        num_iters: int32 = cdiv(k_size, block_k)

        # prologue: request the first K tiles, one per slot, without waiting for any
        for s in range(min(num_stages, num_iters)):
            self.issue_load(ga, gb, sa[s], sb[s], loaded[s], offset_m, offset_n, s * block_k)

        for i in range(num_iters):
            slot = i % num_stages
            # every thread waits on the slot's barrier itself, so no block barrier is needed
            # to publish the data
            self.mbarrier.wait(loaded[slot], phase=phases[slot])
            phases[slot] ^= 1

            self.wgmma.fence()
            self.wgmma.mma(sa[slot], sb[slot].transpose(), acc)
            self.wgmma.commit_group()
            self.wgmma.wait_group(0)
            # the block barrier keeps the four warps in step: the refill of this slot is issued
            # only once every warp is past its use of it
            self.sync()

            refill = i + num_stages
            if refill < num_iters:
                self.issue_load(
                    ga, gb, sa[slot], sb[slot], loaded[slot], offset_m, offset_n, refill * block_k
                )

        gc = self.global_view(c_ptr, dtype=float16, shape=[m_size, n_size])
        self.store_global(gc, self.cast(acc, dtype=float16), offsets=[offset_m, offset_n])


def main() -> int:
    """Check V2 against NumPy and print a table; returns the exit status."""
    return harness.run(MatmulWGMMAV2)


if __name__ == "__main__":
    sys.exit(main())
