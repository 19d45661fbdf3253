"""RMS norm over the last dim, ``y = x / sqrt(mean(x^2) + eps) * w``, fp16 in and out.

Each block normalizes ``rows`` whole rows held in registers (``[rows, bn]``, ``bn`` the row
length rounded up to a power of two): one ``[rows, 1]`` sum of squares per row (the ragged tail
reads as zero, so it adds nothing), broadcast back over the row, times the ``[bn]`` weight
broadcast over the rows.

The autotune space of ``RMSNorm`` also holds a second form (``stages`` >= 2; 0 is the form
above), the one that wins on long rows: persistent blocks (a few an SM) that loop over their
rows through a ring of shared-memory stages filled by ``copy_async`` (16-byte ``cp.async``), so
the next rows' loads are in flight while the current ones are reduced (the weight is loaded
once a block: into registers when a thread holds at most 16 of its columns, else copied to
shared memory when it fits); each pass reads the stage with 128-bit shared loads,
chunk by chunk of columns when a row is longer than 32 warps of ``per_thread`` elements.

A third form (``warps`` 1-4; 0 above) is the ring over small blocks: 1-4 warps a block, a
row a stage (several short ones), many independent blocks an SM, so a reduction crosses at
most 4 warps (with one warp: shuffles only, no barrier) and a block waits for its own warps
only; rows longer than 4096 elements a warp are refused.

A fourth form (``stages`` 0, ``warps`` > 0) is the re-read form: a row a block of ``warps``
warps, a pass for the sum of squares and a second one, from the L2, to normalize. With
``hints`` (1, 2) its loads carry the cache hints of Inductor's norms: the first read of x
``evict_last`` (kept in the L1, where the second read finds it), the second ``evict_first``,
w ``evict_last``; 2 also stores y with ``cache="stream"``.

Run ``python examples/rms_norm.py`` (interpreter without a GPU, CUDA with one); the result is
checked against NumPy float64.
"""

import numpy as np
from rowwise_support import check, exit_with, fp16_rows, rowwise_kernels
from softmax import (
    REREAD_SPACE,
    SPACE,
    RowRing,
    hinted,
    pow2_at_least,
    refuse_long_rows,
    reread_setup,
    ring_plan,
    rows_and_warps,
)

import tilus
from tilus import GlobalTensor, float16, float32, int32
from tilus.utils import cdiv

EPS = 1e-6


#: The re-read configs with the cache hints (``hinted``), measured on an H200: at 8192x8192, 16
#: warps of 16 elements 0.0669-0.0672 ms against 0.0684 without them (torch.compile 0.0673, copy_
#: 0.0668; tuned, it is the winner: 0.0666 against 0.0670); at 4096x32000, 32 warps of 8 0.1296
#: against 0.1317 (copy_ 0.1260); bench/results/2026-12-02-h200-r51-rms-cache-hints.txt.
@tilus.autotune("block, per_thread, stages, warps, hints", hinted(SPACE + REREAD_SPACE))
class RMSNorm(RowRing):
    """RMS norm in one of two forms, both in the autotune space: whole rows in registers
    (``stages`` 0) or persistent blocks over a ring of shared-memory stages (``stages`` >= 2)."""

    def __init__(self, block, per_thread, stages, warps=0, hints=0, max_blocks=None):
        super().__init__()
        self.block, self.per_thread, self.stages = block, per_thread, stages
        self.block_warps = warps  # > 0: the small-block ring form (see ``ring_plan``)
        self.max_blocks = max_blocks  # tests: fewer blocks than rows on the interpreter
        self.use_hints(hints)  # the re-read form's cache hints (``softmax.HINTS``)

    def __call__(self, m: int32, n: int, x_ptr: ~float16, w_ptr: ~float16, y_ptr: ~float16):
        gx = self.global_view(x_ptr, dtype=float16, shape=[m, n])
        gw = self.global_view(w_ptr, dtype=float16, shape=[n])
        gy = self.global_view(y_ptr, dtype=float16, shape=[m, n])
        self.refuse_hints()
        if self.stages:
            self.ring_rows(m, n, gx, gw, gy)
        elif self.block_warps:
            self.reread_rows(m, n, gx, gw, gy)
        else:
            self.whole_rows(m, n, gx, gw, gy)

    def reread_rows(self, m: int32, n: int, gx: GlobalTensor, gw: GlobalTensor, gy: GlobalTensor):
        """A row a block of ``warps`` warps, in chunks of ``per_thread`` elements a thread: a
        pass for the sum of squares, then the row read again (from the L2, where the first
        pass left it) to normalize. Few registers, so many blocks an SM keep loads in flight."""
        bn, tile, chunks, unroll = reread_setup(self, m, n, self.per_thread, self.block_warps)
        row: int32 = self.blockIdx.x
        sq = self.register_tensor(dtype=float32, shape=[1, tile], init=0.0)
        for c in self.range(chunks, unroll=unroll):  # the tail reads as 0: adds nothing
            xt = self.load_global(gx, offsets=[row, c * tile], shape=[1, tile], cache=self.keep)
            x = self.cast(xt, float32)
            self.assign(sq, sq + x * x)
        rms = self.rsqrt(self.sum(sq, dim=1, keepdim=True) * (1.0 / n) + EPS)
        for c in self.range(chunks, unroll=unroll):
            xt = self.load_global(gx, offsets=[row, c * tile], shape=[1, tile], cache=self.last_x)
            x = self.cast(xt, float32)
            w = self.cast(
                self.load_global(gw, offsets=[c * tile], shape=[tile], cache=self.keep), float32
            )
            y = self.cast(x * rms * w, float16)
            self.store_global(gy, y, offsets=[row, c * tile], cache=self.out)

    def whole_rows(self, m: int32, n: int, gx: GlobalTensor, gw: GlobalTensor, gy: GlobalTensor):
        """Each block normalizes ``block // n`` whole rows held in registers (one pass)."""
        bn = pow2_at_least(n)
        rows, warps = rows_and_warps(bn, self.block, self.per_thread)
        self.attrs.blocks = cdiv(m, rows)
        self.attrs.warps = warps
        if self.per_thread <= 16:  # few registers a thread: ask for a full SM (as Triton gets)
            self.attrs.min_blocks = max(1, min(4, 2048 // (32 * warps)))
        row: int32 = self.blockIdx.x * rows
        x = self.cast(self.load_global(gx, offsets=[row, 0], shape=[rows, bn]), float32)
        # w is loaded beside x and applied before the reduction: its loads are in flight with
        # x's instead of after the block barrier (the same registers: x * w replaces x), 1.6%
        # faster at 8192x8192 (H200)
        xw = x * self.cast(self.load_global(gw, offsets=[0], shape=[bn]), float32)
        ms = self.sum(x * x, dim=1, keepdim=True) * (1.0 / n)
        self.store_global(gy, self.cast(xw * self.rsqrt(ms + EPS), float16), offsets=[row, 0])

    def ring_rows(self, m: int32, n: int, gx: GlobalTensor, gw: GlobalTensor, gy: GlobalTensor):
        """Persistent blocks, each looping over its rows through a ring of ``stages``
        shared-memory stages filled by ``copy_async``: the next rows load while the current
        ones are worked on (each pass reads the stage chunk by chunk of columns)."""
        bn, rows, chunks, warps, stages, w_shared, per_sm = ring_plan(
            n, self.block, self.per_thread, self.stages, vectors=0, warps=self.block_warps
        )
        # w in registers when a thread holds at most 16 of its columns (nothing to read a row)
        w_regs = self.block_warps == 0 and rows == 1 and self.per_thread * chunks <= 16
        if not w_regs:
            bn, rows, chunks, warps, stages, w_shared, per_sm = ring_plan(
                n, self.block, self.per_thread, self.stages, vectors=1, warps=self.block_warps
            )
        refuse_long_rows(self, bn)
        bk = bn // chunks
        groups = cdiv(m, rows)
        self.attrs.blocks = min(groups, self.max_blocks or self.cuda.sm_count * per_sm)
        self.attrs.warps = warps
        ring = self.shared_tensor(dtype=float16, shape=[stages, chunks, rows, bk])
        if w_shared:  # the first group: older than every stage, so waited for with stage 0
            sw = self.shared_tensor(dtype=float16, shape=[chunks, bk])
            for c in self.range(chunks, unroll="all"):
                self.copy_async(gw, sw[c], offsets=[c * bk])
            self.copy_async_commit_group()
        held = []  # w's chunks in registers (loaded once a block)
        if w_regs:
            for q in [k for k in range(chunks)]:
                held.append(self.load_global(gw, offsets=[q * bk], shape=[bk]))
        first: int32 = self.blockIdx.x
        grid: int32 = self.gridDim.x
        for k in range(stages - 1):
            self.fill_stage(gx, ring, k, first, grid, stages, rows, chunks, bk)
        for it in range(cdiv(groups - first, grid)):
            self.copy_async_wait_group(stages - 2)
            self.sync()  # the stage is in for every thread; the one refilled next is free
            self.fill_stage(gx, ring, it + stages - 1, first, grid, stages, rows, chunks, bk)
            cur = ring[it % stages]
            row: int32 = (first + it * grid) * rows
            sq = self.register_tensor(dtype=float32, shape=[rows, bk], init=0.0)
            for c in self.range(chunks, unroll="all"):  # the tail reads as 0: adds nothing
                x = self.cast(self.load_shared(cur[c]), float32)
                self.assign(sq, sq + x * x)
            rms = self.rsqrt(self.sum(sq, dim=1, keepdim=True) * (1.0 / n) + EPS)
            for p in [k for k in range(chunks)]:  # unrolled here: ``held[p]`` is a host index
                if w_regs:
                    w = held[p]
                elif w_shared:
                    w = self.load_shared(sw[p])
                else:
                    w = self.load_global(gw, offsets=[p * bk], shape=[bk])
                y = self.cast(self.load_shared(cur[p]), float32) * rms * self.cast(w, float32)
                self.store_global(gy, self.cast(y, float16), offsets=[row, p * bk])
        self.copy_async_wait_all()


def reference(x, w):
    """RMS norm in float64."""
    return x / np.sqrt((x * x).mean(axis=1, keepdims=True) + EPS) * w


def main() -> int:
    """Check RMSNorm against NumPy."""
    return check(
        "RMS norm (fp16 in/out, fp32 math)",
        rowwise_kernels([RMSNorm]),
        lambda rng, m, n: fp16_rows(rng, m, n, (n,)),
        reference,
        cpu_shapes=[(5, 200), (3, 1024)],
        gpu_shapes=[(4096, 8192), (1000, 32000), (32768, 1024), (777, 1333)],
        tol=1e-2,
        moved=lambda m, n: 4 * m * n,
    )


if __name__ == "__main__":
    exit_with(main())
