"""Hopper matmul V1: V0 with the compute moved to warp-group MMA (WGMMA) from shared memory.

``C = A @ B^T`` (fp16 in, fp32 accumulate, fp16 out). The loading is V0's: one shared stage per
operand, one mbarrier armed with the expected bytes by a single thread that issues both TMA
copies and waits. The compute no longer copies the tiles into registers: the four warps form one
warp group that issues ``wgmma.mma`` with both operands read straight from shared memory.
``B`` is stored ``[block_n, block_k]`` (K-major), so the kernel passes ``sb.transpose()`` as
the ``[block_k, block_n]`` operand. WGMMA is asynchronous: ``fence`` orders earlier accesses
before it, ``commit_group`` closes the batch and ``wait_group(0)`` blocks until it retired,
after which the tiles may be overwritten.

Run ``python examples/hopper_matmul/matmul_v1.py``.
"""

import sys

import harness

import tilus
from tilus import float16, float32, int32, uint32
from tilus.utils import cdiv


# The tutorial's space: (block_m, block_n) in {(64, 128), (128, 128), (128, 256), (256, 128),
# (256, 256)} x block_k in {16, 32, 64} = 15 configs. Kept here: the 9 with block_m <= 128.
@tilus.autotune("block_m, block_n", [(64, 128), (128, 128), (128, 256)])
@tilus.autotune("block_k", [16, 32, 64])
class MatmulWGMMA(tilus.Script):
    """One C tile per block; TMA into one shared stage, WGMMA straight from shared memory."""

    def __init__(self, block_m, block_n, block_k):
        super().__init__()
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
        block_m, block_n, block_k = self.block_m, self.block_n, self.block_k
        self.attrs.blocks = [cdiv(m_size, block_m), cdiv(n_size, block_n)]
        self.attrs.warps = 4  # exactly one warp group

        offset_m: int32 = block_m * self.blockIdx.x
        offset_n: int32 = block_n * self.blockIdx.y

        ga = self.global_view(a_ptr, dtype=float16, shape=[m_size, k_size])
        gb = self.global_view(b_ptr, dtype=float16, shape=[n_size, k_size])
        sa = self.shared_tensor(dtype=float16, shape=[block_m, block_k])
        sb = self.shared_tensor(dtype=float16, shape=[block_n, block_k])
        acc = self.register_tensor(dtype=float32, shape=[block_m, block_n], init=0.0)

        loaded = self.mbarrier.alloc(counts=[1])
        phase: uint32 = 0

        for offset_k in range(0, k_size, block_k):
            with self.single_thread():
                self.mbarrier.arrive_and_expect_tx(
                    loaded[0], transaction_bytes=sa.nbytes + sb.nbytes
                )
                self.tma.global_to_shared(
                    src=ga, dst=sa, offsets=[offset_m, offset_k], mbarrier=loaded[0]
                )
                self.tma.global_to_shared(
                    src=gb, dst=sb, offsets=[offset_n, offset_k], mbarrier=loaded[0]
                )
                self.mbarrier.wait(loaded[0], phase=phase)
            self.sync()

            self.wgmma.fence()
            self.wgmma.mma(sa, sb.transpose(), acc)
            self.wgmma.commit_group()
            self.wgmma.wait_group(0)  # the tensor cores are done with sa and sb
            self.sync()
            phase ^= 1

        self.free_shared(sa)
        self.free_shared(sb)
        gc = self.global_view(c_ptr, dtype=float16, shape=[m_size, n_size])
        self.store_global(gc, self.cast(acc, dtype=float16), offsets=[offset_m, offset_n])


def main() -> int:
    """Check V1 against NumPy and print a table; returns the exit status."""
    return harness.run(MatmulWGMMA)


if __name__ == "__main__":
    sys.exit(main())
