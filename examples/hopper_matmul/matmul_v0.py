"""Hopper matmul V0: TMA loads into shared memory, mma.sync compute from registers.

``C = A @ B^T`` with ``A [m, k]``, ``B [n, k]`` and ``C [m, n]`` in float16, accumulated in
float32. Each block computes one ``block_m x block_n`` tile of C. Per K step, one elected thread
arms an mbarrier with the number of bytes to expect and issues two TMA copies (a tile of A and a
tile of B) that complete on that barrier; it then waits for the barrier's current phase. A block
barrier publishes the data to everyone, the tiles are copied into registers and multiplied with
``self.dot`` (lowered to ``mma.sync``), and a second block barrier keeps the next TMA from
overwriting tiles that are still being read. The barrier's phase bit flips every step.

Run ``python examples/hopper_matmul/matmul_v0.py``: on the CPU interpreter without a GPU, on the
GPU (with cuBLAS for comparison) when torch sees one.
"""

import sys

import harness

import tilus
from tilus import float16, float32, int32, uint32
from tilus.utils import cdiv


# The tutorial searches (block_m, block_n) in {(64, 128), (128, 128), (128, 256), (256, 128),
# (256, 256)} x block_k in {16, 32, 64} (15 configs); only the small tiles fit mma.sync's register
# budget, so this space keeps the ones that do.
@tilus.autotune("block_m, block_n", [(64, 128), (128, 128)])
@tilus.autotune("block_k", [16, 32, 64])
class MatmulTMA(tilus.Script):
    """One C tile per block; TMA into one shared stage, ``mma.sync`` on register copies."""

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
        self.attrs.warps = 4

        offset_m: int32 = block_m * self.blockIdx.x
        offset_n: int32 = block_n * self.blockIdx.y

        ga = self.global_view(a_ptr, dtype=float16, shape=[m_size, k_size])
        gb = self.global_view(b_ptr, dtype=float16, shape=[n_size, k_size])
        sa = self.shared_tensor(dtype=float16, shape=[block_m, block_k])
        sb = self.shared_tensor(dtype=float16, shape=[block_n, block_k])
        acc = self.register_tensor(dtype=float32, shape=[block_m, block_n], init=0.0)

        # one barrier, completed by one arrival plus the bytes of both tiles
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
            self.sync()  # the tiles have landed: let every thread read them

            a = self.load_shared(sa)
            b = self.load_shared(sb)
            self.dot(a, b.transpose(), acc, out=acc)
            self.sync()  # everyone is done reading before the next TMA overwrites the tiles
            phase ^= 1

        self.free_shared(sa)
        self.free_shared(sb)
        gc = self.global_view(c_ptr, dtype=float16, shape=[m_size, n_size])
        self.store_global(gc, self.cast(acc, dtype=float16), offsets=[offset_m, offset_n])


def main() -> int:
    """Check V0 against NumPy and print a table; returns the exit status."""
    return harness.run(MatmulTMA)


if __name__ == "__main__":
    sys.exit(main())
