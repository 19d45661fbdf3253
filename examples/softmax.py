"""Row softmax, ``y = exp(x - max(x)) / sum(exp(x - max(x)))`` per row, fp16 in and out.

``Softmax`` keeps whole rows in registers: each block loads ``rows`` rows as one
``[rows, bn]`` tile (``bn``, the row length rounded up to a power of two, is fixed when the
kernel is compiled for a row length ``n``), masks the ragged tail of each row to ``-inf``,
reduces each row to its maximum and its sum (``self.max(..., dim=1, keepdim=True)``: a
``[rows, 1]`` tile that broadcasts back over the row with no data movement) and stores the
result, reading and writing each element once. Rows longer than a tile use ``OnlineSoftmax``:
one pass over the row's column tiles keeps a running maximum and a running sum rescaled by
``exp(m_old - m_new)`` (the "online" softmax), a second pass writes the outputs; both load the
next column tile before working on the current one.

The autotune space of ``Softmax`` also holds a second form (``stages`` >= 2; 0 is the form
above), the one that wins on long rows: persistent blocks (a few an SM) that loop over their
rows through a ring of shared-memory stages filled by ``copy_async`` (16-byte ``cp.async``), so
the next rows' loads are in flight while the current ones are reduced; each pass reads the
stage with 128-bit shared loads, chunk by chunk of columns when a row is longer than 32 warps
of ``per_thread`` elements.

A third form (``warps`` 1-4; 0 above) is the ring over small blocks: 1-4 warps a block, a
row a stage (several short ones), many independent blocks an SM, so a reduction crosses at
most 4 warps (with one warp: shuffles only, no barrier) and a block waits for its own warps
only; rows longer than 4096 elements a warp are refused.

A fourth form (``stages`` 0, ``warps`` > 0) is the re-read form: a row a block of ``warps``
warps in chunks of ``per_thread`` elements a thread, the row read three times (the maximum,
the sum of the exponentials, the output; the last two reads hit the L1 or the L2). Few
registers, so two 1024-thread blocks share an SM and one's exponentials overlap the other's
loads.

Run ``python examples/softmax.py``: on the tilus interpreter without a GPU (or with
``TILUS_INTERPRET=1``), on CUDA with one; the result is checked against NumPy float64.
"""

import numpy as np
from rowwise_support import check, exit_with, fp16_rows, rowwise_kernels

import tilus
from tilus import GlobalTensor, float16, float32, int32
from tilus.utils import cdiv

LOG2E = 1.4426950408889634


def pow2_at_least(n: int) -> int:
    """The smallest power of two >= ``n`` (at least 8: one 16-byte vector of fp16)."""
    p = 8
    while p < n:
        p *= 2
    return p


def rows_and_warps(bn: int, block: int, per_thread: int) -> tuple[int, int]:
    """Rows per block and warps for rows of ``bn`` elements: ``block`` elements a block (at
    least one row), ``per_thread`` elements a thread (more when 32 warps are too few)."""
    rows = max(1, block // bn)
    warps = min(32, max(1, rows * bn // (32 * per_thread)))
    return rows, warps


#: The row-wise autotune space: (elements per block, elements per thread). It is given in
#: elements, not rows and warps, so that every config fits at every row length (a row of 32768
#: fp32 values is 32 a thread over 1024 threads; a fixed (rows, warps) space either refuses
#: long rows or wastes threads on short ones): 8-32 elements a thread (one to four 16-byte
#: loads, 30-60 registers: 2048 threads an SM), and 2-32 K elements a block.
ROW_SPACE = [(b, t) for b in (2048, 4096, 8192, 16384) for t in (8, 16, 32)] + [
    (32768, 32),  # 4 rows of 8192 a block: the norms' weights shared by the rows of a thread
]


#: Shared memory a ring kernel may use (the per-block limit less the launch's alignment slack).
RING_SMEM = 227 * 1024 - 1024


#: Blocks an SM may hold at once (Hopper).
SM_BLOCKS = 32


def ring_plan(n: int, block: int, per_thread: int, stages: int, vectors: int = 0, warps: int = 0):
    """How a ring kernel lays out rows of ``n`` fp16 elements: ``(bn, rows, chunks, warps,
    stages, vectors_shared, blocks_per_sm)``. A stage holds ``rows`` rows of ``bn`` (``n``
    rounded up to a power of two) as ``chunks`` column chunks of ``bn // chunks`` (several
    only for one long row: each thread then holds ``per_thread`` elements of a chunk at a
    time, not of the whole row); the ring holds ``stages`` stages (fewer when shared memory is
    short, never fewer than 2); ``vectors`` per-column fp16 vectors (the norms' weights) live
    in shared memory too when they fit (``vectors_shared``), else are read from global memory
    (the L2) for every row; ``blocks_per_sm`` persistent blocks fit an SM by threads and
    shared memory.

    ``warps`` > 0 is the small-block form: blocks of exactly ``warps`` warps (1 to 4) own one
    row a stage (more when ``32 * warps * per_thread`` elements hold several rows of at least
    256), so a reduction crosses at most 4 warps (none with one warp: shuffles only, and the
    block barrier of a 1-warp block is a warp's) and many blocks an SM run independently; the
    vectors are then read from global memory (the L1 holds them for every block of the SM)."""
    small = warps > 0
    if small:
        bn = max(256, pow2_at_least(n))  # a warp of 16-byte vectors: 256 columns at least
        tile = 32 * warps * per_thread
        rows = max(1, min(block // bn, tile // bn, RING_SMEM // (4 * bn)))
        chunks = max(1, bn // tile) if rows == 1 else 1
    else:
        bn = pow2_at_least(n)
        rows, warps = rows_and_warps(bn, block, per_thread)
        chunks = max(1, rows * bn // (32 * warps * per_thread)) if rows == 1 else 1
    stage = rows * bn * 2
    stages = max(2, min(stages, RING_SMEM // stage))
    fits = stages * stage + vectors * bn * 2 <= RING_SMEM
    vec_shared = vectors > 0 and not small and fits
    smem = stages * stage + (vectors * bn * 2 if vec_shared else 0) + 1024
    per_sm = max(1, min(SM_BLOCKS, 2048 // (32 * warps), (228 * 1024) // smem))
    return bn, rows, chunks, warps, stages, vec_shared, per_sm


def held_plan(bn: int, rows: int, warps: int, stages: int, vectors: int = 0):
    """``(stages, blocks_per_sm)`` of a held-rows ring (stages of ``rows`` rows of ``bn``
    fp16 elements, loaded into registers at once, so that a stage is free again right after)
    beside ``vectors`` per-column fp16 vectors in shared memory: at most ``stages`` stages that
    fit (0 when not even one does)."""
    stage, vec = rows * bn * 2, vectors * bn * 2
    stages = max(0, min(stages, (RING_SMEM - vec) // stage))
    smem = stages * stage + vec + 1024
    per_sm = max(1, min(SM_BLOCKS, 2048 // (32 * warps), (228 * 1024) // smem))
    return stages, per_sm


#: The ring form's autotune space: (elements per block, per thread, stages, warps). Measured on
#: an H200: 256-1024 threads a block, 1-4 rows a stage; long rows (32000) want 1024 threads of 8
#: a chunk (the norms) or 512 threads holding the whole row (softmax: one exp2 an element),
#: 8192-long rows 256-512 threads of 32-64, short rows (1024) 3-4 stages. ``warps`` 0: the
#: block's warps follow from ``block`` and ``per_thread``.
RING_SPACE = [
    (4096, 8, 2, 0),
    (8192, 8, 2, 0),
    (4096, 8, 4, 0),
    (4096, 16, 3, 0),
    (8192, 16, 2, 0),
    (8192, 16, 3, 0),
    (8192, 32, 2, 0),
    (8192, 32, 3, 0),
    (16384, 32, 2, 0),
    (16384, 64, 2, 0),
    (16384, 64, 3, 0),
    (32768, 64, 2, 0),
]

#: The small-block ring form (``warps`` 1-4 a block, one row a stage for rows of 1024 and
#: longer): many independent blocks an SM, a reduction crossing at most 4 warps. Rows longer
#: than ``4096 * warps`` are refused (over 128 elements a thread a row spill registers). 2 warps
#: of 32 (240+ registers, over a second of NVRTC) never won a benchmark shape: not in the space.
SMALL_SPACE = [
    (8192, 32, 4, 1),
    (8192, 64, 3, 1),
    (8192, 16, 2, 4),
    (8192, 32, 2, 4),
    (8192, 64, 2, 4),
]

#: The default kernels' space: both forms (whole rows in registers: no stages; the ring).
SPACE = [(b, t, 0, 0) for b, t in ROW_SPACE] + RING_SPACE + SMALL_SPACE


#: The norms' re-read form (``stages`` 0, ``warps`` > 0: ``block`` unused): a row a block of
#: ``warps`` warps, ``per_thread`` elements a thread a chunk, the row read twice (the second
#: time from the L2): the form Triton's norms take (few registers, a full SM of blocks).
#: 16 and 32 warps: the long rows' winners (32000: 1024 threads of 16, measured on an H200).
REREAD_SPACE = [(0, t, 0, w) for w in (4, 8, 16, 32) for t in (8, 16)]

#: Softmax's re-read configs: only long rows (32000) can win with three reads of a row.
SOFTMAX_REREAD_SPACE = [(0, t, 0, w) for w in (16, 32) for t in (8, 16)]

#: ``hints`` of the re-read form: 0 none; 1 the cache hints of Inductor's norms: every read of x
#: but the last ``evict_last`` (kept in the L1, where the next pass finds it), the last one
#: ``evict_first``, the weights ``evict_last``; 2 those and the stores ``cache="stream"``.
HINTS = (0, 1, 2)


def hinted(space, hints=(1, 2)):
    """``space`` (4-tuples) with ``hints`` 0, then its re-read configs of 16 and 32 warps with
    each of ``hints``. Only RMS norm takes hinted configs: they measured faster for it on an
    H200 and slower or no faster for layer norm and softmax (three reads of a row; the kept
    lines of 32000-long rows crowd the L1)."""
    plain = [(*c, 0) for c in space]
    return plain + [(*c, h) for c in space if c[0] == 0 and c[3] >= 16 for h in hints]


def reread_plan(n: int, per_thread: int, warps: int) -> tuple[int, int, int]:
    """``(bn, tile, chunks)`` of the re-read form: rows of ``n`` (rounded up to ``bn``, a
    power of two) in ``chunks`` chunks of ``tile`` columns, ``per_thread`` a thread."""
    bn = pow2_at_least(n)
    tile = min(bn, 32 * warps * per_thread)
    return bn, tile, bn // tile


def reread_setup(script, m, n: int, per_thread: int, warps: int):
    """Set a re-read kernel's grid (a row a block), warps and, for up to 16 elements a thread,
    a register cap that fits 2048 threads an SM; returns ``reread_plan``'s ``(bn, tile,
    chunks)`` and the chunk loops' unroll."""
    bn, tile, chunks = reread_plan(n, per_thread, warps)
    script.attrs.blocks = m
    script.attrs.warps = warps
    if per_thread <= 16:  # few registers a thread: ask for a full SM of blocks
        script.attrs.min_blocks = max(1, min(4, 2048 // (32 * warps)))
    return bn, tile, chunks, "all" if chunks <= 4 else 4  # all: the row's loads in flight


def refuse_long_rows(script, bn: int) -> None:
    """Refuse a small-block config for rows (rounded up to ``bn``) longer than ``4096 *
    warps``: a thread would hold over 128 elements of a row and spill; a block per SM or
    two would fit."""
    script.static_assert(
        script.block_warps == 0 or bn <= 4096 * script.block_warps,
        f"the small-block ring form takes rows of at most 4096 elements a warp "
        f"({4096 * script.block_warps} with warps={script.block_warps}), not {bn}",
    )


@tilus.autotune("block, per_thread, stages, warps", SPACE)
class RowRing(tilus.Script):
    """The ring form's loads, shared by the row-wise kernels: block ``b`` of ``g`` takes row
    groups ``b, b + g, b + 2g, ...``; group ``k`` of the block lands in stage ``k % stages``."""

    def use_hints(self, hints: int) -> None:
        """Set the cache hints of ``hints`` (``HINTS``): ``keep`` for reads of x that a later
        pass reads again and for the weights, ``last_x`` for x's last read, ``out`` for y."""
        if hints not in HINTS:
            raise ValueError(f"{type(self).__name__}: hints must be one of {HINTS}, got {hints!r}")
        self.hints = hints
        self.hold = getattr(self, "hold", False)  # layer norm's held-rows ring
        self.keep = "evict_last" if hints else None
        self.last_x = "evict_first" if hints else None
        self.out = "stream" if hints == 2 else None

    def refuse_hints(self) -> None:
        """Refuse ``hints`` outside the re-read form (``stages`` 0, ``warps`` > 0)."""
        self.static_assert(
            self.hints == 0 or (self.stages == 0 and self.block_warps > 0 and not self.hold),
            f"hints={self.hints} take the re-read form (stages=0, warps > 0)",
        )

    def fill_stage(self, gx, ring, k, first, grid, stages: int, rows: int, chunks: int, bk: int):
        """Queue the block's row group ``k`` into its stage of ``ring`` ([stages, chunks, rows,
        bk]) as one commit group; rows past the end read as zeros."""
        for c in self.range(chunks, unroll="all"):
            self.copy_async(gx, ring[k % stages, c], offsets=[(first + k * grid) * rows, c * bk])
        self.copy_async_commit_group()


@tilus.autotune(
    "block, per_thread, stages, warps, hints", hinted(SPACE + SOFTMAX_REREAD_SPACE, hints=())
)
class Softmax(RowRing):
    """Softmax in one of the forms of the autotune space: whole rows in registers (``stages``
    0), persistent blocks over a ring of shared-memory stages (``stages`` >= 2), or a row a
    block read three times (``stages`` 0, ``warps`` > 0; ``hints``: its cache hints)."""

    def __init__(self, block, per_thread, stages, warps=0, hints=0, max_blocks=None):
        super().__init__()
        self.block, self.per_thread, self.stages = block, per_thread, stages
        self.block_warps = warps  # > 0: the small-block ring form (see ``ring_plan``)
        self.max_blocks = max_blocks  # tests: fewer blocks than rows on the interpreter
        self.use_hints(hints)

    def __call__(self, m: int32, n: int, x_ptr: ~float16, y_ptr: ~float16):
        gx = self.global_view(x_ptr, dtype=float16, shape=[m, n])
        gy = self.global_view(y_ptr, dtype=float16, shape=[m, n])
        self.refuse_hints()
        if self.stages:
            self.ring_rows(m, n, gx, gy)
        elif self.block_warps:
            self.reread_rows(m, n, gx, gy)
        else:
            self.whole_rows(m, n, gx, gy)

    def reread_rows(self, m: int32, n: int, gx: GlobalTensor, gy: GlobalTensor):
        """A row a block, in chunks of ``per_thread`` elements a thread: a pass for the
        maximum, one for the sum of the exponentials, one that writes them scaled."""
        bn, tile, chunks, unroll = reread_setup(self, m, n, self.per_thread, self.block_warps)
        row: int32 = self.blockIdx.x
        cols = self.register_tensor(dtype=int32, shape=[tile], init=lambda j: j)
        acc = self.register_tensor(dtype=float32, shape=[1, tile], init=-float("inf"))
        for c in self.range(chunks, unroll=unroll):  # max(x) * log2 e = max(x * log2 e)
            xt = self.load_global(gx, offsets=[row, c * tile], shape=[1, tile], cache=self.keep)
            x = self.cast(xt, float32)
            if n < bn:  # the ragged tail reads 0: it must not win the max
                x = self.where(cols < n - c * tile, x, -float("inf"))
            self.assign(acc, self.maximum(acc, x))
        mx = self.max(acc, dim=1, keepdim=True) * LOG2E
        tot = self.register_tensor(dtype=float32, shape=[1, tile], init=0.0)
        for c in self.range(chunks, unroll=unroll):
            xt = self.load_global(gx, offsets=[row, c * tile], shape=[1, tile], cache=self.keep)
            e = self.exp2(self.cast(xt, float32) * LOG2E - mx)
            if n < bn:  # nor add to the sum
                e = self.where(cols < n - c * tile, e, 0.0)
            self.assign(tot, tot + e)
        inv = 1.0 / self.sum(tot, dim=1, keepdim=True)
        for c in self.range(chunks, unroll=unroll):
            xt = self.load_global(gx, offsets=[row, c * tile], shape=[1, tile], cache=self.last_x)
            y = self.exp2(self.cast(xt, float32) * LOG2E - mx) * inv
            self.store_global(gy, self.cast(y, float16), offsets=[row, c * tile], cache=self.out)

    def whole_rows(self, m: int32, n: int, gx: GlobalTensor, gy: GlobalTensor):
        """Each block works on ``block // n`` whole rows held in registers (one pass)."""
        bn = pow2_at_least(n)
        rows, warps = rows_and_warps(bn, self.block, self.per_thread)
        self.attrs.blocks = cdiv(m, rows)
        self.attrs.warps = warps
        row: int32 = self.blockIdx.x * rows
        x = self.load_global(gx, offsets=[row, 0], shape=[rows, bn])
        x = self.cast(x, float32)
        if n < bn:  # the ragged tail of every row must not win the max nor add to the sum
            cols = self.register_tensor(dtype=int32, shape=[bn], init=lambda j: j)
            x = self.where(cols < n, x, -float("inf"))
        # exp(v - max) = exp2(v * log2 e - max * log2 e): one FFMA and one MUFU.EX2 an element
        e = self.exp2(x * LOG2E - self.max(x, dim=1, keepdim=True) * LOG2E)
        y = e * (1.0 / self.sum(e, dim=1, keepdim=True))
        self.store_global(gy, self.cast(y, float16), offsets=[row, 0])

    def ring_rows(self, m: int32, n: int, gx: GlobalTensor, gy: GlobalTensor):
        """Persistent blocks, each looping over its rows through a ring of ``stages``
        shared-memory stages filled by ``copy_async``: the next rows load while the current
        ones are worked on (each pass reads the stage chunk by chunk of columns)."""
        bn, rows, chunks, warps, stages, _, per_sm = ring_plan(
            n, self.block, self.per_thread, self.stages, warps=self.block_warps
        )
        refuse_long_rows(self, bn)
        bk = bn // chunks
        groups = cdiv(m, rows)
        self.attrs.blocks = min(groups, self.max_blocks or self.cuda.sm_count * per_sm)
        self.attrs.warps = warps
        ring = self.shared_tensor(dtype=float16, shape=[stages, chunks, rows, bk])
        cols = self.register_tensor(dtype=int32, shape=[bk], init=lambda j: j)
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
            # exp(v - max) = exp2(v * log2 e - max * log2 e): one FFMA and one MUFU.EX2 each
            acc = self.register_tensor(dtype=float32, shape=[rows, bk], init=-float("inf"))
            for c in self.range(chunks, unroll="all"):  # max(x) * log2 e = max(x * log2 e)
                x = self.cast(self.load_shared(cur[c]), float32)
                self.assign(acc, self.maximum(acc, self.where(cols < n - c * bk, x, -float("inf"))))
            mx = self.max(acc, dim=1, keepdim=True) * LOG2E
            if chunks == 1:  # the exponentials fit in registers: one MUFU.EX2 an element
                e = self.cast(self.load_shared(cur[0]), float32) * LOG2E
                e = self.where(cols < n, self.exp2(e - mx), 0.0)
                y = e * (1.0 / self.sum(e, dim=1, keepdim=True))
                self.store_global(gy, self.cast(y, float16), offsets=[row, 0])
            else:  # a second pass recomputes them
                tot = self.register_tensor(dtype=float32, shape=[rows, bk], init=0.0)
                for c in self.range(chunks, unroll="all"):
                    x = self.cast(self.load_shared(cur[c]), float32) * LOG2E
                    self.assign(tot, tot + self.where(cols < n - c * bk, self.exp2(x - mx), 0.0))
                inv = 1.0 / self.sum(tot, dim=1, keepdim=True)
                for c in self.range(chunks, unroll="all"):
                    x = self.cast(self.load_shared(cur[c]), float32) * LOG2E
                    y = self.exp2(x - mx) * inv
                    self.store_global(gy, self.cast(y, float16), offsets=[row, c * bk])
        self.copy_async_wait_all()


@tilus.autotune(
    "block_n, rows, warps",
    [
        (1024, 1, 4),
        (2048, 1, 8),
        (4096, 1, 8),
        (1024, 4, 8),
        (4096, 1, 16),
        (8192, 1, 32),
        (4096, 2, 16),
        (2048, 4, 16),
    ],  # fmt: skip
)
class OnlineSoftmax(tilus.Script):
    """Softmax of rows of any length: an online max/sum pass over column tiles, then a pass
    that writes ``exp(x - max) / sum``."""

    def __init__(self, block_n, rows, warps):
        super().__init__()
        self.block_n = block_n
        self.rows = rows
        self.warps = warps

    def __call__(self, m: int32, n: int32, x_ptr: ~float16, y_ptr: ~float16):
        bm, bn = self.rows, self.block_n
        self.attrs.blocks = cdiv(m, bm)
        self.attrs.warps = self.warps
        gx = self.global_view(x_ptr, dtype=float16, shape=[m, n])
        gy = self.global_view(y_ptr, dtype=float16, shape=[m, n])
        row: int32 = self.blockIdx.x * bm
        cols = self.register_tensor(dtype=int32, shape=[bn], init=lambda j: j)
        mx = self.register_tensor(dtype=float32, shape=[bm, 1], init=-float("inf"))
        total = self.register_tensor(dtype=float32, shape=[bm, 1], init=0.0)
        # Each pass loads tile j + 1 before it works on tile j (a register double buffer), so
        # a block always has a tile's loads in flight; past the row they read zeros, unused.
        buf = self.load_global(gx, offsets=[row, 0], shape=[bm, bn])
        for j in range(cdiv(n, bn)):
            x = self.cast(buf, float32)
            self.assign(buf, self.load_global(gx, offsets=[row, (j + 1) * bn], shape=[bm, bn]))
            x = self.where(cols < n - j * bn, x * LOG2E, -float("inf"))
            new = self.maximum(mx, self.max(x, dim=1, keepdim=True))
            scaled = total * self.exp2(mx - new)
            self.assign(total, scaled + self.sum(self.exp2(x - new), dim=1, keepdim=True))
            self.assign(mx, new)
        inv = 1.0 / total
        self.assign(buf, self.load_global(gx, offsets=[row, 0], shape=[bm, bn]))
        for j in range(cdiv(n, bn)):
            x = self.cast(buf, float32)
            self.assign(buf, self.load_global(gx, offsets=[row, (j + 1) * bn], shape=[bm, bn]))
            y = self.exp2(x * LOG2E - mx) * inv
            self.store_global(gy, self.cast(y, float16), offsets=[row, j * bn])


def reference(x):
    """Softmax over the last dim in float64."""
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def main() -> int:
    """Check both kernels (every config on the interpreter, the tuned pick on a GPU)."""
    kernels = rowwise_kernels([Softmax, OnlineSoftmax])
    return check(
        "Row softmax (fp16 in/out, fp32 math)",
        kernels,
        fp16_rows,
        reference,
        cpu_shapes=[(5, 200), (3, 1000), (2, 2500)],  # ragged rows; 2500 spans 2-3 tiles
        gpu_shapes=[(4096, 8192), (1000, 32000), (32768, 1024), (777, 1333)],
        moved=lambda m, n: 4 * m * n,
    )


if __name__ == "__main__":
    exit_with(main())
