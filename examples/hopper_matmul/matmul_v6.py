"""Hopper matmul V6: V5 made persistent, with registers moved from the producer to the consumers.

``C = A @ B^T`` (fp16 in, fp32 accumulate, fp16 out). Two changes on top of V5:

1. **Persistent blocks.** The grid is one block per SM (at most one per C tile), and block ``b``
   computes tiles ``b``, ``b + num_sms``, ``b + 2 * num_sms``, ... The ring of the ``Pipeline``
   runs on across tiles: while the consumers store one tile, the producer already loads the
   first K tiles of the next, so no block waits for its pipeline to fill and no block is
   launched per tile. The C tile in shared memory is reused: its TMA store is waited for only
   just before the next tile is written into it.
2. **Register reallocation.** The block has three warp groups: two consumer groups and a
   producer group, of which one warp issues the copies. Each thread starts with at most 168
   registers (64K over 384 threads); ``setmaxnreg`` lowers the producer group to 40 and raises
   the consumers to 232, so that a 64 x 256 fp32 accumulator (128 registers) and the loop state
   of a persistent consumer fit without spilling (with 9 warps and no reallocation they spill).

The tile order is V4's rasterization, applied to the tile index. ``num_sms`` is the GPU's SM
count by default (132 without one); tests pass a small value so that the interpreter runs
several tiles per block.

Run ``python examples/hopper_matmul/matmul_v6.py``.
"""

import sys

import harness
from matmul_v4 import Pipeline
from matmul_v5 import MatmulWGMMAV5

import tilus
from tilus import GlobalTensor, SharedTensor, float16, float32, int32
from tilus.target import sm_count
from tilus.utils import cdiv


# V5's space (shared C tiles leave room for 3 stages of 128 x 256 x 64).
@tilus.autotune("num_stages", [2, 3])
@tilus.autotune("block_m, block_n", [(128, 128), (128, 256)])
@tilus.autotune("block_k", [64])
@tilus.autotune("swizzle", [2, 8])
class MatmulWGMMAV6(MatmulWGMMAV5):
    """V5 with persistent blocks and producer-to-consumer register reallocation."""

    def __init__(self, num_stages, block_m, block_n, block_k, swizzle, num_sms=None):
        super().__init__(num_stages, block_m, block_n, block_k, swizzle)
        self.num_sms = num_sms if num_sms is not None else sm_count()

    def consume_tiles(
        self,
        half: int,
        pipe: Pipeline,
        sa: SharedTensor,
        sb: SharedTensor,
        gc: GlobalTensor,
        k_size: int,
        num_m: int32,
        num_n: int,
    ):
        """Consumer warp group ``half`` over the block's C tiles."""
        block_m_half = self.block_m // 2
        sc = self.shared_tensor(dtype=float16, shape=[block_m_half, self.block_n])
        for tile in self.range(self.blockIdx.x, num_m * num_n, self.num_sms):
            m_tile, n_tile = self.tile_coords(tile, num_m, num_n)
            offset_m: int32 = m_tile * self.block_m + half * block_m_half
            offset_n: int32 = n_tile * self.block_n
            acc = self.register_tensor(dtype=float32, shape=[block_m_half, self.block_n], init=0.0)
            self.mainloop(half, pipe, sa, sb, acc, k_size)
            with self.single_thread():  # the same elected thread that issued the last store
                self.tma.wait_group(0, read=True)  # the previous tile's store has read sc
            self.sync()
            self.store_shared(sc, self.cast(acc, dtype=float16))
            self.fence.proxy_async(space="shared")  # the generic writes become visible to TMA
            self.sync()
            with self.single_thread():
                self.tma.shared_to_global(sc, gc, offsets=[offset_m, offset_n])
                self.tma.commit_group()
        with self.single_thread():
            self.tma.wait_group(0, read=True)  # sc is read: the block may exit

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
        num_m = cdiv(m_size, block_m)
        num_n = cdiv(n_size, block_n)
        self.attrs.blocks = min(num_m * num_n, self.num_sms)
        self.attrs.warps = 12  # two consumer warp groups + a producer warp group

        ga = self.global_view(a_ptr, dtype=float16, shape=[m_size, k_size])
        gb = self.global_view(b_ptr, dtype=float16, shape=[n_size, k_size])
        gc = self.global_view(c_ptr, dtype=float16, shape=[m_size, n_size])
        sa = self.shared_tensor(dtype=float16, shape=[num_stages, 2, block_m // 2, block_k])
        sb = self.shared_tensor(dtype=float16, shape=[num_stages, block_n, block_k])
        pipe = Pipeline(num_stages, producer_arrivals=1, consumer_arrivals=2)

        with self.warp_group(8, 4):  # producer warp group: threads 256-383
            self.setmaxnreg(40)
            with self.single_warp(0):
                for tile in self.range(self.blockIdx.x, num_m * num_n, self.num_sms):
                    m_tile, n_tile = self.tile_coords(tile, num_m, num_n)
                    self.produce(pipe, sa, sb, ga, gb, k_size, m_tile * block_m, n_tile * block_n)
                # drain: wait until the consumers have released every slot still in use
                for _ in self.range(min(num_stages, cdiv(k_size, block_k))):
                    pipe.producer_acquire()
                    pipe.producer_advance()

        with self.warp_group(0, 4):  # consumer warp group 0: rows [0, block_m / 2) of each tile
            self.setmaxnreg(232)
            self.consume_tiles(0, pipe, sa, sb, gc, k_size, num_m, num_n)
        with self.warp_group(4, 4):  # consumer warp group 1: rows [block_m / 2, block_m)
            self.setmaxnreg(232)
            self.consume_tiles(1, pipe, sa, sb, gc, k_size, num_m, num_n)


def main() -> int:
    """Check V6 against NumPy and print a table; returns the exit status."""
    return harness.run(MatmulWGMMAV6)


if __name__ == "__main__":
    sys.exit(main())
