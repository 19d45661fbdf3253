"""Hopper matmul V4: a ``Pipeline`` class, two consumer warp groups and tile rasterization.

``C = A @ B^T`` (fp16 in, fp32 accumulate, fp16 out). Three changes on top of V3:

1. ``Pipeline`` (a ``tilus.Class``) packages the ring bookkeeping that V3 wrote inline: the
   full/empty barrier arrays and, per role, an ``int32`` stage and a ``uint32`` phase that flips
   when the stage wraps. Its methods are inlined where they are called, and the stage/phase
   attributes are kernel variables that persist between calls.
2. Two consumer warp groups (threads 0-127 and 128-255) each own half of the ``block_m`` rows:
   A is staged as ``[num_stages, 2, block_m / 2, block_k]`` and warp group ``g`` multiplies
   ``sa[stage, g]`` by the shared B tile into its own ``[block_m / 2, block_n]`` accumulator, so
   two independent WGMMA streams keep the tensor cores busy. The producer warp (threads
   256-287, 9 warps in all) issues three TMA copies per stage: both A halves and B. One elected
   thread per consumer warp group arrives on the empty barrier of a slot when the group is done
   with it (two arrivals free a slot).
3. Rasterization: the grid is 1-D and ``tile_coords`` maps the block index to a C tile so that
   consecutive blocks sweep groups of ``swizzle`` neighbouring N tiles down M, walking N fastest
   inside a group; blocks that run together then share B tiles in L2. When the number of N tiles
   is not a multiple of ``swizzle`` the last group is narrower. ``fast_divmod`` divides by the
   grid-invariant group sizes with magic numbers on the GPU.

The consumers still wait for each WGMMA to finish before releasing its slot (``wait_group(0)``);
V5 keeps one in flight.

Run ``python examples/hopper_matmul/matmul_v4.py``.
"""

import sys

import harness

import tilus
from tilus import GlobalTensor, SharedTensor, float16, float32, int32, uint32
from tilus.utils import cdiv


class Pipeline(tilus.Class):
    """A ring of ``num_stages`` shared slots guarded by pairs of mbarriers.

    ``full[s]`` completes when slot ``s`` has been filled (``producer_arrivals`` arrivals plus
    the transaction bytes), ``empty[s]`` when its consumers are done with it
    (``consumer_arrivals`` arrivals). The producer and the consumers each keep their own position
    in the ring.
    """

    def __init__(self, num_stages: int, producer_arrivals: int = 1, consumer_arrivals: int = 1):
        self.num_stages: int = num_stages
        self.full = self.mbarrier.alloc([producer_arrivals] * num_stages)
        self.empty = self.mbarrier.alloc([consumer_arrivals] * num_stages)
        self.producer_stage: int32 = 0
        self.producer_phase: uint32 = self.mbarrier.producer_initial_phase
        self.consumer_stage: int32 = 0
        self.consumer_phase: uint32 = self.mbarrier.consumer_initial_phase

    def producer_acquire(self):
        """Wait until the producer's current slot is empty."""
        self.mbarrier.wait(
            self.empty[self.producer_stage], phase=self.producer_phase, sem="relaxed"
        )

    def producer_barrier(self):
        """The barrier that the copies into the producer's current slot complete on."""
        return self.full[self.producer_stage]

    def producer_advance(self):
        """Move the producer to the next slot (flipping its phase on wrap-around)."""
        self.producer_stage = (self.producer_stage + 1) % self.num_stages
        if self.producer_stage == 0:
            self.producer_phase ^= 1

    def consumer_acquire(self):
        """Wait until the consumer's current slot is full."""
        self.mbarrier.wait(self.full[self.consumer_stage], phase=self.consumer_phase)

    def consumer_release(self, stage: int32):
        """One elected thread of the current warp group arrives on the empty barrier of
        ``stage`` (called after ``wait_group`` retired the group's reads of it)."""
        with self.single_thread():
            self.mbarrier.arrive(self.empty[stage])

    def consumer_advance(self):
        """Move the consumer to the next slot (flipping its phase on wrap-around)."""
        self.consumer_stage = (self.consumer_stage + 1) % self.num_stages
        if self.consumer_stage == 0:
            self.consumer_phase ^= 1


# The tutorial's space: num_stages in {3, 4, 5, 6} x (block_m, block_n) in {(128, 128), (128, 256),
# (256, 128), (256, 256)} x block_k in {16, 32, 64} x swizzle in {4, 8} = 96 configs
# (bench/tune_and_overhead.py tunes it). Kept here: 8, with the H200's best tile (128 x 256) and
# swizzle 2 beside 8, so that small problems have both full and ragged swizzle groups.
@tilus.autotune("num_stages", [3, 4])
@tilus.autotune("block_m, block_n", [(128, 128), (128, 256)])
@tilus.autotune("block_k", [64])
@tilus.autotune("swizzle", [2, 8])
class MatmulWGMMAV4(tilus.Script):
    """A producer warp and two consumer warp groups (one per half of the M tile)."""

    def __init__(self, num_stages, block_m, block_n, block_k, swizzle):
        super().__init__()
        self.num_stages = num_stages
        self.block_m = block_m
        self.block_n = block_n
        self.block_k = block_k
        self.swizzle = swizzle

    def tile_coords(self, tile: int32, num_m: int32, num_n: int):
        """(m, n) index of the C tile that the block with linear index ``tile`` computes."""
        swizzle = self.swizzle
        full_groups = num_n // swizzle  # groups of exactly `swizzle` N tiles
        last_width = num_n - full_groups * swizzle  # N tiles of the ragged last group, if any
        group, pos = self.fast_divmod(tile, num_m * swizzle)
        m_tile: int32 = 0
        dn: int32 = 0
        if group < full_groups:
            m_tile, dn = self.fast_divmod(pos, swizzle)
        else:  # only reached when last_width > 0
            m_tile, dn = self.fast_divmod(pos, max(last_width, 1))
        return m_tile, group * swizzle + dn

    def produce(
        self,
        pipe: Pipeline,
        sa: SharedTensor,
        sb: SharedTensor,
        ga: GlobalTensor,
        gb: GlobalTensor,
        k_size: int,
        offset_m: int32,
        offset_n: int32,
    ):
        """The producer warp's loop over the K tiles of the C tile at ``(offset_m, offset_n)``:
        per stage, both A halves and the B tile, completing on the stage's full barrier."""
        block_m_half = self.block_m // 2
        for offset_k in self.range(0, k_size, self.block_k, unroll=self.num_stages):
            pipe.producer_acquire()
            stage = pipe.producer_stage
            with self.single_thread():  # count the bytes once
                self.mbarrier.arrive_and_expect_tx(
                    pipe.producer_barrier(),
                    transaction_bytes=sa[stage].nbytes + sb[stage].nbytes,
                )
            # the whole warp issues the copies (the hardware elects one lane)
            for half in self.range(2, unroll=2):
                self.tma.global_to_shared(
                    src=ga,
                    dst=sa[stage, half],
                    offsets=[offset_m + half * block_m_half, offset_k],
                    mbarrier=pipe.producer_barrier(),
                )
            self.tma.global_to_shared(
                src=gb,
                dst=sb[stage],
                offsets=[offset_n, offset_k],
                mbarrier=pipe.producer_barrier(),
            )
            pipe.producer_advance()

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
        for _ in self.range(0, k_size, self.block_k, unroll=self.num_stages):
            pipe.consumer_acquire()
            self.wgmma.fence()
            self.wgmma.mma(sa[pipe.consumer_stage, half], sb[pipe.consumer_stage].transpose(), acc)
            self.wgmma.commit_group()
            self.wgmma.wait_group(0)
            pipe.consumer_release(pipe.consumer_stage)
            pipe.consumer_advance()
        self.store_global(
            gc, self.cast(acc, dtype=float16), offsets=[offset_m + half * block_m_half, offset_n]
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
        block_m_half = block_m // 2
        num_m = cdiv(m_size, block_m)
        num_n = cdiv(n_size, block_n)
        self.attrs.blocks = num_m * num_n
        self.attrs.warps = 9  # two consumer warp groups + one producer warp

        m_tile, n_tile = self.tile_coords(self.blockIdx.x, num_m, num_n)
        offset_m: int32 = m_tile * block_m
        offset_n: int32 = n_tile * block_n

        ga = self.global_view(a_ptr, dtype=float16, shape=[m_size, k_size])
        gb = self.global_view(b_ptr, dtype=float16, shape=[n_size, k_size])
        gc = self.global_view(c_ptr, dtype=float16, shape=[m_size, n_size])
        sa = self.shared_tensor(dtype=float16, shape=[num_stages, 2, block_m_half, block_k])
        sb = self.shared_tensor(dtype=float16, shape=[num_stages, block_n, block_k])
        pipe = Pipeline(num_stages, producer_arrivals=1, consumer_arrivals=2)

        with self.thread_group(256, 32):  # producer warp
            self.produce(pipe, sa, sb, ga, gb, k_size, offset_m, offset_n)
            # drain: wait until the consumers have released every slot still in use
            for _ in self.range(min(num_stages, cdiv(k_size, block_k))):
                pipe.producer_acquire()
                pipe.producer_advance()

        with self.thread_group(0, 128):  # consumer warp group 0: rows [0, block_m / 2)
            self.consume(0, pipe, sa, sb, gc, k_size, offset_m, offset_n)
        with self.thread_group(128, 128):  # consumer warp group 1: rows [block_m / 2, block_m)
            self.consume(1, pipe, sa, sb, gc, k_size, offset_m, offset_n)


def main() -> int:
    """Check V4 against NumPy and print a table; returns the exit status."""
    return harness.run(MatmulWGMMAV4)


if __name__ == "__main__":
    sys.exit(main())
