"""Hopper matmul V5: V4 with one WGMMA group kept in flight and a TMA-store epilogue.

``C = A @ B^T`` (fp16 in, fp32 accumulate, fp16 out). Two changes on top of V4, both in the
consumer loop ``consume``:

1. In V4 each consumer warp group issues the WGMMA of a K tile and immediately waits for it
   (``wait_group(0)``), so between two K tiles its tensor-core queue runs dry. V5 waits with
   ``wait_group(1)`` instead: after committing the group of K tile ``i`` the warp group only
   waits for the group of tile ``i - 1``. That one has then retired, so its slot, the
   *previous* stage, is released to the producer, while the MMA of tile ``i`` keeps running
   during the next barrier wait and issue. After the loop, ``wait_group(0)`` retires the last
   group and the last stage is released.
2. The epilogue goes through shared memory. Each warp group writes its fp16 tile into its own
   shared tile (wide rows are stored as 128-byte swizzled column blocks, so the writes are free
   of bank conflicts), fences the writes for the async proxy, synchronizes, and one thread
   stores the tile with TMA, which clips the rows and columns outside C. It waits only until
   TMA has read the tile (``wait_group(0, read=True)``), not for the global writes. (V4's
   stores from registers are bounds-checked element by element; with groups kept in flight the
   compiler must also keep them away from the accumulator until the last wait, which costs
   registers.)

The shared C tiles take ``block_m * block_n * 2`` bytes beside the ring, so 128 x 256 tiles fit
3 stages of 64-wide K tiles (208 KB), not 4 (the compiler drops a config that does not fit).
Everything else (the ``Pipeline`` class, two consumer warp groups, the producer warp and the
rasterization) is V4's, so the kernel subclasses ``MatmulWGMMAV4`` and replaces ``consume``.

Run ``python examples/hopper_matmul/matmul_v5.py``.
"""

import sys

import harness
from matmul_v4 import MatmulWGMMAV4, Pipeline

import tilus
from tilus import GlobalTensor, RegisterTensor, SharedTensor, float16, float32, int32


# The tutorial's space: num_stages in {3, 4, 5, 6} x (block_m, block_n) in {(128, 128), (128, 256),
# (256, 128), (256, 256)} x block_k in {16, 32, 64} x swizzle in {4, 8} = 96 configs
# (bench/tune_and_overhead.py tunes it). Kept here: 8, with the H200's best tile (128 x 256) and
# swizzle 2 beside 8, so that small problems have both full and ragged swizzle groups. With the
# shared C tiles, 128 x 256 x 64 with 4 stages would need 256 KB of shared memory: 2 or 3 stages.
@tilus.autotune("num_stages", [2, 3])
@tilus.autotune("block_m, block_n", [(128, 128), (128, 256)])
@tilus.autotune("block_k", [64])
@tilus.autotune("swizzle", [2, 8])
class MatmulWGMMAV5(MatmulWGMMAV4):
    """V4 whose consumers keep one WGMMA group in flight, release the previous stage, and store
    C through shared memory with TMA."""

    def mainloop(
        self,
        half: int,
        pipe: Pipeline,
        sa: SharedTensor,
        sb: SharedTensor,
        acc: RegisterTensor,
        k_size: int,
    ):
        """``acc += A_half @ B^T`` over all K tiles, one WGMMA group kept in flight; every
        slot is released once the group that read it has retired."""
        prev_stage: int32 = 0
        for offset_k in self.range(0, k_size, self.block_k, unroll=self.num_stages):
            pipe.consumer_acquire()
            self.wgmma.fence()
            self.wgmma.mma(sa[pipe.consumer_stage, half], sb[pipe.consumer_stage].transpose(), acc)
            self.wgmma.commit_group()
            self.wgmma.wait_group(1)  # the group of the previous K tile has retired ...
            if offset_k > 0:
                pipe.consumer_release(prev_stage)  # ... so its slot can be refilled
            prev_stage = pipe.consumer_stage
            pipe.consumer_advance()
        self.wgmma.wait_group(0)
        pipe.consumer_release(prev_stage)

    def consume(
        self,
        half: int,
        pipe: Pipeline,
        sa: SharedTensor,
        sb: SharedTensor,
        gc: GlobalTensor,
        k_size: int,
        offset_m: int32,
        offset_n: int32,
    ):
        """The loop of the consumer warp group that owns rows ``half`` of the M tile."""
        block_m_half = self.block_m // 2
        acc = self.register_tensor(dtype=float32, shape=[block_m_half, self.block_n], init=0.0)
        self.mainloop(half, pipe, sa, sb, acc, k_size)
        sc = self.shared_tensor(dtype=float16, shape=[block_m_half, self.block_n])
        self.store_shared(sc, self.cast(acc, dtype=float16))
        self.fence.proxy_async(space="shared")  # the generic writes become visible to TMA
        self.sync()  # every thread of the warp group has written its part
        with self.single_thread():
            self.tma.shared_to_global(sc, gc, offsets=[offset_m + half * block_m_half, offset_n])
            self.tma.commit_group()
            self.tma.wait_group(0, read=True)  # sc is read: the block may exit


def main() -> int:
    """Check V5 against NumPy and print a table; returns the exit status."""
    return harness.run(MatmulWGMMAV5)


if __name__ == "__main__":
    sys.exit(main())
