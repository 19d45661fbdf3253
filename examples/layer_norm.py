"""Layer norm over the last dim, ``y = (x - mean) / sqrt(var + eps) * w + b``, fp16 in/out.

Each block normalizes ``rows`` whole rows held in registers (a ``[rows, bn]`` tile, ``bn`` the
row length ``n`` rounded up to a power of two, fixed when the kernel is compiled for ``n``).
The row mean and variance are ``[rows, 1]`` reductions that broadcast back over the row; the
weight and bias are ``[bn]`` vectors broadcast over the rows. Columns past ``n`` read as zero
and are masked out of the variance; their outputs are not stored.

The autotune space of ``LayerNorm`` also holds a second form (``stages`` >= 2; 0 is the form
above), the one that wins on long rows: persistent blocks (a few an SM) that loop over their
rows through a ring of shared-memory stages filled by ``copy_async`` (16-byte ``cp.async``), so
the next rows' loads are in flight while the current ones are reduced (the weight and bias are
loaded once a block: into registers when a thread holds at most 16 of their columns, else into
shared memory, or w there and b in registers when both do not fit); each pass reads the stage with 128-bit
shared loads, chunk by chunk of columns when a row is longer than 32 warps of ``per_thread``
elements.

A third form (``warps`` 1-4; 0 above) is the ring over small blocks: 1-4 warps a block, a
row a stage (several short ones), many independent blocks an SM, so a reduction crosses at
most 4 warps (with one warp: shuffles only, no barrier) and a block waits for its own warps
only; rows longer than 4096 elements a warp are refused.

A fourth form (``stages`` < 0) is the ring of ``-stages`` stages of whole rows, each loaded
into registers as soon as it is in and refilled at once: every stage is in flight while a row
is worked on, so one stage beside w and b (in shared memory, not re-read from the L2 for every
row) is enough for rows of 32000; the math is the whole-rows form's.

A fifth form (``stages`` 0, ``warps`` > 0) is the re-read form: a row a block of ``warps``
warps, three passes over the row (the mean, the variance about it, the output; the last two
read it from the L1 or the L2), so a thread holds a chunk of ``per_thread`` elements and one
accumulator, and two 1024-thread blocks fit an SM.

Run ``python examples/layer_norm.py`` (interpreter without a GPU, CUDA with one); the result
is checked against NumPy float64.
"""

import numpy as np
from rowwise_support import check, exit_with, fp16_rows, rowwise_kernels
from softmax import (
    REREAD_SPACE,
    SPACE,
    RowRing,
    held_plan,
    hinted,
    pow2_at_least,
    refuse_long_rows,
    reread_setup,
    ring_plan,
    rows_and_warps,
)

import tilus
from tilus import GlobalTensor, float16, float32, int32, uint32
from tilus.utils import cdiv

EPS = 1e-5


#: Layer norm's space: the row-wise forms, plus the held-rows ring (``stages`` < 0: -stages
#: stages, see ``held_rows``): long rows (32000: one stage, w and b in shared memory) and
#: 8192-long ones (2 stages of 1-2 rows).
LN_SPACE = (
    SPACE
    + [(32768, 32, -1, 0), (32768, 64, -1, 0), (8192, 32, -2, 0), (16384, 32, -2, 0)]
    + REREAD_SPACE
)


def vector_plan(n: int, block: int, per_thread: int, stages: int, warps: int):
    """The ring's plan (``ring_plan``) for layer norm, with where w and b live: ``place`` is
    "regs", "shared" or "global" for each. In registers when a thread holds at most 16 of their
    columns (nothing to read a row); else in shared memory when both fit beside the ring; else
    w there and b in registers, two fp16 to a register (rows of 32000: reading b from the L2 a
    row made the L2 the limit, and b held one to a register spilled); the small-block form
    reads both from global memory (the L1 holds them for the SM's blocks)."""
    bn, rows, chunks, nwarps, nstages, _, per_sm = ring_plan(n, block, per_thread, stages, 0, warps)
    if warps == 0 and rows == 1 and per_thread * chunks <= 16:
        return bn, rows, chunks, nwarps, nstages, ("regs", "regs"), per_sm
    for vectors, place in ((2, ("shared", "shared")), (1, ("shared", "regs"))):
        plan = ring_plan(n, block, per_thread, stages, vectors, warps)
        if plan[5]:
            return (*plan[:5], place, plan[6])
    return (*plan[:5], ("global", "global"), plan[6])


@tilus.autotune("block, per_thread, stages, warps, hints", hinted(LN_SPACE, hints=()))
class LayerNorm(RowRing):
    """Layer norm in one of three forms, all in the autotune space: whole rows in registers
    (``stages`` 0), persistent blocks over a ring of shared-memory stages (``stages`` >= 2),
    or a ring of ``-stages`` stages each loaded into registers at once (``stages`` < 0).
    ``hints``: the re-read form's cache hints (``softmax.HINTS``; pinned only, see ``hinted``)."""

    def __init__(self, block, per_thread, stages, warps=0, hints=0, max_blocks=None):
        super().__init__()
        self.block, self.per_thread, self.stages = block, per_thread, abs(stages)
        self.block_warps = warps  # > 0: the small-block ring form (see ``ring_plan``)
        self.hold = stages < 0  # the held-rows ring (``held_rows``)
        self.max_blocks = max_blocks  # tests: fewer blocks than rows on the interpreter
        self.use_hints(hints)  # the re-read form's cache hints (``softmax.HINTS``)

    def __call__(
        self, m: int32, n: int, x_ptr: ~float16, w_ptr: ~float16, b_ptr: ~float16, y_ptr: ~float16
    ):
        gx = self.global_view(x_ptr, dtype=float16, shape=[m, n])
        gw = self.global_view(w_ptr, dtype=float16, shape=[n])
        gb = self.global_view(b_ptr, dtype=float16, shape=[n])
        gy = self.global_view(y_ptr, dtype=float16, shape=[m, n])
        self.refuse_hints()
        if self.hold:
            self.held_rows(m, n, gx, gw, gb, gy)
        elif self.stages:
            self.ring_rows(m, n, gx, gw, gb, gy)
        elif self.block_warps:
            self.reread_rows(m, n, gx, gw, gb, gy)
        else:
            self.whole_rows(m, n, gx, gw, gb, gy)

    def reread_rows(
        self,
        m: int32,
        n: int,
        gx: GlobalTensor,
        gw: GlobalTensor,
        gb: GlobalTensor,
        gy: GlobalTensor,
    ):
        """A row a block of ``warps`` warps, in chunks of ``per_thread`` elements a thread,
        read three times (the last two hit the L1 or the L2): the mean, the variance about it
        (two passes: exact at any mean), the output. One accumulator a pass, so few registers
        and two 1024-thread blocks an SM."""
        bn, tile, chunks, unroll = reread_setup(self, m, n, self.per_thread, self.block_warps)
        row: int32 = self.blockIdx.x
        cols = self.register_tensor(dtype=int32, shape=[tile], init=lambda j: j)
        s1 = self.register_tensor(dtype=float32, shape=[1, tile], init=0.0)
        for c in self.range(chunks, unroll=unroll):  # the tail reads as 0: adds nothing
            x = self.load_global(gx, offsets=[row, c * tile], shape=[1, tile], cache=self.keep)
            x = self.cast(x, float32)
            self.assign(s1, s1 + x)
        mean = self.sum(s1, dim=1, keepdim=True) * (1.0 / n)
        s2 = self.register_tensor(dtype=float32, shape=[1, tile], init=0.0)
        for c in self.range(chunks, unroll=unroll):
            d = self.load_global(gx, offsets=[row, c * tile], shape=[1, tile], cache=self.keep)
            d = self.cast(d, float32)
            d = d - mean
            if n < bn:  # 0 - mean must not count
                d = self.where(cols < n - c * tile, d, 0.0)
            self.assign(s2, s2 + d * d)
        rstd = self.rsqrt(self.sum(s2, dim=1, keepdim=True) * (1.0 / n) + EPS)
        for c in self.range(chunks, unroll=unroll):
            x = self.load_global(gx, offsets=[row, c * tile], shape=[1, tile], cache=self.last_x)
            x = self.cast(x, float32)
            w = self.load_global(gw, offsets=[c * tile], shape=[tile], cache=self.keep)
            w = self.cast(w, float32)
            b = self.load_global(gb, offsets=[c * tile], shape=[tile], cache=self.keep)
            b = self.cast(b, float32)
            y = (x - mean) * rstd * w + b
            self.store_global(gy, self.cast(y, float16), offsets=[row, c * tile], cache=self.out)

    def whole_rows(
        self,
        m: int32,
        n: int,
        gx: GlobalTensor,
        gw: GlobalTensor,
        gb: GlobalTensor,
        gy: GlobalTensor,
    ):
        """Each block normalizes ``block // n`` whole rows held in registers (one pass)."""
        bn = pow2_at_least(n)
        rows, warps = rows_and_warps(bn, self.block, self.per_thread)
        self.attrs.blocks = cdiv(m, rows)
        self.attrs.warps = warps
        row: int32 = self.blockIdx.x * rows
        x = self.cast(self.load_global(gx, offsets=[row, 0], shape=[rows, bn]), float32)
        xc, rstd = self.centered(x, n, bn)
        # w and b loaded after the statistics (their barriers keep them there): not held in
        # registers through the reductions
        w = self.cast(self.load_global(gw, offsets=[0], shape=[bn]), float32)
        b = self.cast(self.load_global(gb, offsets=[0], shape=[bn]), float32)
        self.store_global(gy, self.cast(xc * rstd * w + b, float16), offsets=[row, 0])

    def centered(self, x, n: int, bn: int):
        """``x - mean`` and ``1 / sqrt(var + eps)`` of whole rows ``x`` ([rows, bn] float32,
        columns past ``n`` zero; they stay out of the variance)."""
        mean = self.sum(x, dim=1, keepdim=True) * (1.0 / n)
        xc = x - mean
        if n < bn:  # the tail read as 0, but 0 - mean must not add to the variance
            cols = self.register_tensor(dtype=int32, shape=[bn], init=lambda j: j)
            xc = self.where(cols < n, xc, 0.0)
        var = self.sum(xc * xc, dim=1, keepdim=True) * (1.0 / n)
        return xc, self.rsqrt(var + EPS)

    def held_rows(
        self,
        m: int32,
        n: int,
        gx: GlobalTensor,
        gw: GlobalTensor,
        gb: GlobalTensor,
        gy: GlobalTensor,
    ):
        """Persistent blocks over a ring of ``stages`` stages of whole rows, each loaded into
        registers as soon as it is in and refilled at once (so every stage is in flight while
        a row is worked on, and one stage beside w and b fits rows of 32768 in shared
        memory); then the whole-rows math, w and b read from shared memory."""
        bn = pow2_at_least(n)
        rows, warps = rows_and_warps(bn, self.block, self.per_thread)
        stages, per_sm = held_plan(bn, rows, warps, self.stages, vectors=2)
        self.static_assert(
            stages >= 1, f"a stage of {rows} rows of {bn} beside w and b exceeds shared memory"
        )
        groups = cdiv(m, rows)
        self.attrs.blocks = min(groups, self.max_blocks or self.cuda.sm_count * per_sm)
        self.attrs.warps = warps
        ring = self.shared_tensor(dtype=float16, shape=[stages, rows, bn])
        wb = self.shared_tensor(dtype=float16, shape=[2, bn])
        self.copy_async(gw, wb[0], offsets=[0])  # with the first stage's group
        self.copy_async(gb, wb[1], offsets=[0])
        first: int32 = self.blockIdx.x
        grid: int32 = self.gridDim.x
        for k in range(stages):
            self.copy_async(gx, ring[k], offsets=[(first + k * grid) * rows, 0])
            self.copy_async_commit_group()
        for it in range(cdiv(groups - first, grid)):
            self.copy_async_wait_group(stages - 1)
            self.sync()  # the stage is in for every thread
            x = self.cast(self.load_shared(ring[it % stages]), float32)
            self.sync()  # every thread holds its rows: refill the stage
            nxt: int32 = (first + (it + stages) * grid) * rows  # past the end: zeros, unused
            self.copy_async(gx, ring[it % stages], offsets=[nxt, 0])
            self.copy_async_commit_group()
            xc, rstd = self.centered(x, n, bn)
            w = self.cast(self.load_shared(wb[0]), float32)
            y = xc * rstd * w + self.cast(self.load_shared(wb[1]), float32)
            self.store_global(gy, self.cast(y, float16), offsets=[(first + it * grid) * rows, 0])
        self.copy_async_wait_all()

    def ring_rows(
        self,
        m: int32,
        n: int,
        gx: GlobalTensor,
        gw: GlobalTensor,
        gb: GlobalTensor,
        gy: GlobalTensor,
    ):
        """Persistent blocks, each looping over its rows through a ring of ``stages``
        shared-memory stages filled by ``copy_async``: the next rows load while the current
        ones are worked on (each pass reads the stage chunk by chunk of columns)."""
        bn, rows, chunks, warps, stages, place, per_sm = vector_plan(
            n, self.block, self.per_thread, self.stages, self.block_warps
        )
        refuse_long_rows(self, bn)
        bk = bn // chunks
        groups = cdiv(m, rows)
        self.attrs.blocks = min(groups, self.max_blocks or self.cuda.sm_count * per_sm)
        self.attrs.warps = warps
        ring = self.shared_tensor(dtype=float16, shape=[stages, chunks, rows, bk])
        cols = cnt = None  # only a stage of one chunk needs them (``stats_one_pass``)
        if chunks == 1:
            cols = self.register_tensor(dtype=int32, shape=[bk], init=lambda j: j)
            # per column j of a chunk: how many of the row's columns j + c * bk exist
            cnt = self.register_tensor(dtype=float32, shape=[bk], init=float(chunks))
            if n < bn:
                cnt = self.register_tensor(dtype=float32, shape=[bk], init=0.0)
                for c in self.range(chunks, unroll="all"):
                    self.assign(cnt, cnt + self.where(cols < n - c * bk, 1.0, 0.0))
        views = [gw, gb]
        shared = [v for v in (0, 1) if place[v] == "shared"]
        vs = None
        if shared:  # the first group: older than every stage, so waited for with stage 0
            vs = self.shared_tensor(dtype=float16, shape=[len(shared), chunks, bk])
            for c in self.range(chunks, unroll="all"):
                for slot, v in enumerate(shared):
                    self.copy_async(views[v], vs[slot, c], offsets=[c * bk])
            self.copy_async_commit_group()
        held = [[], []]  # per vector, its chunks in registers (loaded once a block)
        for v in (0, 1):
            if place[v] == "regs":
                for h in [k for k in range(chunks)]:
                    t = self.load_global(views[v], offsets=[h * bk], shape=[bk])
                    held[v].append(self.view(t, dtype=uint32))  # two to a register
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
            if chunks == 1:  # k0 is the row, s1 = s2 = 0: exact two-pass statistics
                mean, rstd = self.stats_one_pass(cur, cols, cnt, n, bn, chunks, bk)
            else:  # one row of several chunks
                mean, rstd = self.stats_scalar_shift(cur, n, bn, chunks)
            for q in [k for k in range(chunks)]:  # unrolled here: ``held[u][q]`` is a host index
                wb = []
                for u in (0, 1):
                    if place[u] == "regs":
                        wb.append(self.view(held[u][q], dtype=float16))
                    elif place[u] == "shared":
                        wb.append(self.load_shared(vs[shared.index(u), q]))
                    else:
                        wb.append(self.load_global(views[u], offsets=[q * bk], shape=[bk]))
                w, b = wb
                xc = self.cast(self.load_shared(cur[q]), float32) - mean
                y = xc * rstd * self.cast(w, float32) + self.cast(b, float32)
                self.store_global(gy, self.cast(y, float16), offsets=[row, q * bk])
        self.copy_async_wait_all()

    def stats_one_pass(self, cur, cols, cnt, n: int, bn: int, chunks: int, bk: int):
        """Mean and 1/std of the stage's row in one pass, shifted for accuracy: column j of
        chunk 0 is the shift k of the columns j of the other chunks, which add d = x - k and
        d * d; then sum(x) = sum(cnt * k + s1) and sum((x - mean)^2) = sum(s2 - 2 dd s1 +
        cnt dd^2) with dd = mean - k (``cnt``: the row's columns j + c * bk, c < chunks).
        d is a difference of two samples of the row: large means do not cancel."""
        k0 = self.cast(self.load_shared(cur[0]), float32)  # the tail reads as 0
        s1 = self.register_tensor(dtype=float32, shape=k0.shape, init=0.0)
        s2 = self.register_tensor(dtype=float32, shape=k0.shape, init=0.0)
        for c in self.range(1, chunks, unroll="all"):
            d = self.cast(self.load_shared(cur[c]), float32) - k0
            if n < bn:  # 0 - k must not count
                d = self.where(cols < n - c * bk, d, 0.0)
            self.assign(s1, s1 + d)
            self.assign(s2, s2 + d * d)
        mean = self.sum(k0 * cnt + s1, dim=1, keepdim=True) * (1.0 / n)
        dd = mean - k0
        var = self.sum(s2 + dd * (cnt * dd - 2.0 * s1), dim=1, keepdim=True) * (1.0 / n)
        return mean, self.rsqrt(var + EPS)

    def stats_scalar_shift(self, cur, n: int, bn: int, chunks: int):
        """Mean and 1/std of the stage's one row in one pass, shifted by its first element k:
        every chunk adds d = x - k and d * d, with no mask and no per-column count (the tail's
        bn - n zeros add -k and k^2 each, taken off after); d is a difference of two samples
        of the row, so large means do not cancel."""
        k: float32 = cur[0, 0, 0].item()
        s1 = self.register_tensor(dtype=float32, shape=cur[0].shape, init=0.0)
        s2 = self.register_tensor(dtype=float32, shape=cur[0].shape, init=0.0)
        for c in self.range(chunks, unroll="all"):
            d = self.cast(self.load_shared(cur[c]), float32) - k
            self.assign(s1, s1 + d)
            self.assign(s2, s2 + d * d)
        tail = float(bn - n)
        m1 = (self.sum(s1, dim=1, keepdim=True) + tail * k) * (1.0 / n)
        var = (self.sum(s2, dim=1, keepdim=True) - tail * k * k) * (1.0 / n) - m1 * m1
        return m1 + k, self.rsqrt(var + EPS)


def reference(x, w, b):
    """Layer norm in float64."""
    mean = x.mean(axis=1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=1, keepdims=True)
    return (x - mean) / np.sqrt(var + EPS) * w + b


def main() -> int:
    """Check LayerNorm against NumPy."""
    return check(
        "Layer norm (fp16 in/out, fp32 math)",
        rowwise_kernels([LayerNorm]),
        lambda rng, m, n: fp16_rows(rng, m, n, (n, n)),
        reference,
        cpu_shapes=[(5, 200), (3, 1024)],
        gpu_shapes=[(4096, 8192), (1000, 32000), (32768, 1024), (777, 1333)],
        tol=1e-2,
        moved=lambda m, n: 4 * m * n,
    )


if __name__ == "__main__":
    exit_with(main())
