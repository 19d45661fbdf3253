"""Per-token fp8 quantization: bf16 ``x [m, n]`` -> float8_e4m3 ``q [m, n]`` and ``s [m]``.

Each row gets the scale ``s = amax(|x|) / 448`` (448 is the largest e4m3 value; an all-zero
row gets the scale of a tiny amax, so it stays zero) and ``q = x * (448 / amax)``, rounded to
nearest even with saturation (``cvt.rn.satfinite.e4m3x2.f32``, two elements per
instruction), so that ``q * s`` approximates ``x``. A block holds ``rows`` whole rows in
registers as bf16 (the row length rounded up to a multiple of what one pass of the block's
threads covers; the ragged tail reads as zero and is never stored): one max-reduction per
row, one reciprocal per row, then a multiply and a conversion per element. Each thread holds
``vector`` contiguous elements (8: 16-byte loads; 16: 16-byte fp8 stores too).

Four forms share the autotune space: a block per row group (``blocks_per_sm=0``), or
persistent blocks (``blocks_per_sm`` an SM) looping over the row groups with the *next*
group's loads issued before the current group's reduction, so that HBM always has loads in
flight while a block reduces and stores (a block per row group has none in flight between its
loads and its stores); or (``stages`` >= 2) persistent blocks whose row groups stream into a
ring of shared-memory stages by ``copy_async``, ``stages - 1`` groups ahead of the one being
quantized (read back with 16-byte shared loads; rows past ``m`` and columns past ``n`` land
as zeros, which add nothing to the max); or (``passes=2``) a row a block read twice, in
chunks: a pass for the max, then the chunks again from the L2 to scale and store (few
registers a thread, whatever the row length). ``min_blocks`` caps a thread's registers.

Run ``python examples/quantized/per_token_cast.py`` (the interpreter on CPU torch tensors
without a GPU; CUDA with one). Results are checked against torch float32 computing the same
formula; the outputs are poisoned (NaN codes) first.
"""

from __future__ import annotations

import sys
import time
import traceback
from pathlib import Path

import tilus

_HERE = Path(__file__).resolve().parent
if str(_HERE.parent) not in sys.path:
    sys.path.insert(0, str(_HERE.parent))
from example_support import cuda_torch, gpu_time, print_table  # noqa: E402

from tilus import bfloat16, float8_e4m3, float32, int32  # noqa: E402
from tilus.ir.layout import local  # noqa: E402
from tilus.target import sm_count  # noqa: E402
from tilus.utils import cdiv  # noqa: E402

FP8_MAX = 448.0
MIN_AMAX = 1e-10  # an all-zero row quantizes to zeros with a tiny (finite) scale
CPU_SIZES = [(37, 200), (5, 1000)]  # (m, n): ragged rows and row lengths
GPU_SIZES = [(4096, 7168), (16384, 4096), (3000, 5000)]
CPU_CONFIGS = [(1, 0, 1, 0, 16, 0, 1, 0), (2, 4, 1, 0, 8, 0, 1, 2), (1, 4, 1, 3, 16, 0, 1, 0),
               (1, 0, 2, 0, 8, 3, 1, 0), (2, 0, 1, 0, 8, 2, 1, 0),
               (1, 2, 1, 0, 8, 0, 2, 4)]  # see SPACE and KEYS  # fmt: skip


def row_tile(n: int, granule: int) -> int:
    """The tile's row length: ``n`` rounded up to a multiple of ``granule`` (the elements one
    pass of the block's threads covers), so the ragged tail costs at most one vector a thread."""
    return cdiv(n, granule) * granule


# (rows, warps, per_thread, blocks_per_sm, vector, stages, passes, min_blocks), as KEYS names
# them. warps = 0 sizes the block by the
# row: as many warps as give each thread `per_thread` vectors (at most 32 warps), so a row of
# n elements pads to a multiple of 32 * vector * per_thread at most (7168 and 4096: none;
# 5000: 120 elements) and a thread holds few registers. vector: contiguous elements a thread
# holds (8: 16-byte bf16 loads; 16: 16-byte fp8 stores too).
# stages = 0: a block per row group (blocks_per_sm > 0: persistent blocks, the next group's
# loads in registers before the current group's reduction; measured slower than a block per
# row group on the H200, 0.30-0.54 of copy against 0.62-0.89, so only PERSISTENT has them).
# stages >= 2: the ring form, persistent blocks (blocks_per_sm an SM, 0: as many as threads
# and shared memory allow) whose row groups go through a ring of `stages` shared-memory
# stages filled by copy_async (16-byte cp.async): `stages - 1` groups in flight a block while
# it reduces and stores the current one, read from the stage with 16-byte shared loads.
# Measured on the H200 (bench/quantized_configs.py, r46), of copy_ at 4096x7168, 16384x4096,
# 3000x5000: a row a block of 4 warps, 8 elements a thread (16-byte loads, 8-byte stores)
# 0.95 / 0.97 / 1.10 (64 registers at most: 0.90 / 0.97 / 1.13; 8 warps 0.94 / 0.95 / 1.09);
# two rows a block, sized by the row, 16 a thread 0.89 / 0.99 / 0.46 (16-byte stores: a row
# of 5000 codes is not 16-byte aligned); the re-read form 0.90 / 0.96 / 1.06 (4 warps), kept
# for long rows (a whole row of 4 warps holds n / 128 elements a thread), as are a ring and
# the sized-by-row 16-element form (0.93 / 0.97 / 0.40). Dropped: the other rings (0.78-0.84
# at 4096x7168) and one row of 16 a thread sized by the row (0.82 / 0.93 / 0.40).
# passes = 2: the re-read form (a row a block of `warps` warps, in chunks of `per_thread`
# vectors a thread: a pass for |x|'s max, then the row read again, from the L2 where the first
# pass left it, to scale and store; few registers, so many blocks an SM keep loads in flight).
# min_blocks > 0: blocks an SM the compiler must fit (a register cap, any form).
KEYS = ("rows", "warps", "per_thread", "blocks_per_sm", "vector", "stages", "passes", "min_blocks")
SPACE = [
    (1, 4, 1, 0, 8, 0, 1, 0),
    (1, 8, 1, 0, 8, 0, 1, 0),
    (1, 4, 1, 0, 8, 0, 1, 8),
    (2, 0, 1, 0, 16, 0, 1, 0),
    (1, 0, 2, 0, 16, 0, 1, 0),
    (1, 8, 1, 0, 16, 0, 1, 0),
    (1, 4, 1, 0, 8, 0, 2, 4),
    (1, 8, 1, 0, 8, 0, 2, 4),
    (1, 0, 2, 0, 8, 3, 1, 0),
]
PERSISTENT = [(1, 4, 1, 3, 8, 0, 1, 0), (1, 8, 1, 2, 16, 0, 1, 0)]
DEFAULTS = dict(per_thread=1, blocks_per_sm=0, vector=8, stages=0, passes=1, min_blocks=0)


def pinned(**config) -> dict:
    """A whole config (every key of ``KEYS``, as the autotuner wants it pinned): ``config``
    over ``DEFAULTS``."""
    return {k: {**DEFAULTS, **config}[k] for k in KEYS}


#: Shared memory one block may use (the per-block limit less the launch's alignment slack),
#: an SM's shared memory, and the blocks and threads an SM holds (Hopper).
BLOCK_SMEM, SM_SMEM, SM_BLOCKS, SM_THREADS = 227 * 1024 - 1024, 228 * 1024, 32, 2048


@tilus.autotune(", ".join(KEYS), SPACE)
class PerTokenCast(tilus.Script):
    """bf16 rows to e4m3 with one float32 scale per row; ``num_sms`` (default: the GPU's SM
    count) sizes the persistent grid."""

    def __init__(
        self,
        rows,
        warps,
        per_thread=1,
        blocks_per_sm=0,
        vector=8,
        stages=0,
        passes=1,
        min_blocks=0,
        num_sms=None,
    ):
        """``warps``: warps a block (0: sized by the row, ``per_thread`` vectors a thread);
        ``vector``: contiguous elements a thread holds; ``blocks_per_sm`` > 0: persistent;
        ``stages`` >= 2: the ring form (persistent, row groups staged in shared memory);
        ``passes`` = 2: the re-read form (a row a block of ``warps`` warps, read twice);
        ``min_blocks`` > 0: blocks an SM must hold at once (caps a thread's registers)."""
        super().__init__()
        if passes not in (1, 2):
            raise ValueError(f"PerTokenCast: passes must be 1 or 2, got {passes}")
        if passes == 2 and (rows != 1 or warps < 1 or blocks_per_sm or stages):
            raise ValueError(
                "PerTokenCast: the re-read form (passes=2) takes rows=1, warps >= 1, "
                f"blocks_per_sm=0 and stages=0, got rows={rows}, warps={warps}, "
                f"blocks_per_sm={blocks_per_sm}, stages={stages}"
            )
        self.passes = passes
        self.min_blocks = min_blocks
        self.rows = rows
        self.warps = warps
        self.per_thread = per_thread
        self.blocks_per_sm = blocks_per_sm
        self.vector = vector
        self.stages = stages
        self.num_sms = num_sms if num_sms is not None else sm_count()

    def block_warps(self, n: int) -> int:
        """Warps a block for rows of ``n`` elements."""
        warps = self.warps
        if not warps:
            warps = max(1, min(32, cdiv(n, 32 * self.vector * self.per_thread)))
        return warps

    def layout_rows(self, x, bn: int, warps: int):
        """Pin the bf16 tile ``[rows, bn]``: ``vector`` contiguous elements a thread, the
        threads of a row side by side (16-byte accesses, whole sectors a warp)."""
        threads = 32 * warps // self.rows
        reps = bn // (threads * self.vector)
        self.annotate_layout(x, local(1, reps).spatial(self.rows, threads).local(1, self.vector))
        return x

    def load_rows(self, gx, row, bn: int, warps: int, col=0):
        """The bf16 tile ``[rows, bn]`` at ``(row, col)``, ``vector`` contiguous elements a
        thread."""
        x = self.load_global(gx, offsets=[row, col], shape=[self.rows, bn])
        return self.layout_rows(x, bn, warps)

    def quantize(self, x, gq, gs, row: int32):
        """Scale and round the bf16 rows ``x`` (starting at ``row``), store codes and scales."""
        xf = self.cast(x, float32)
        # |x| as max(x, -x): one max.NaN with a negated operand (abs is a compare and select)
        amax = self.maximum(self.max(self.maximum(xf, -xf), dim=1, keepdim=True), MIN_AMAX)
        inv = FP8_MAX / amax  # one division per row
        self.store_global(gq, self.cast(xf * inv, float8_e4m3), offsets=[row, 0])
        self.store_global(gs, amax * (1.0 / FP8_MAX), offsets=[row, 0])

    def __call__(self, m: int32, n: int, x_ptr: ~bfloat16, q_ptr: ~float8_e4m3, s_ptr: ~float32):
        rows = self.rows
        warps = self.block_warps(n)
        bn = row_tile(n, self.vector * 32 * warps // rows)
        num_tiles = cdiv(m, rows)
        self.attrs.warps = warps
        if self.min_blocks:
            self.attrs.min_blocks = self.min_blocks
        gx = self.global_view(x_ptr, dtype=bfloat16, shape=[m, n])
        gq = self.global_view(q_ptr, dtype=float8_e4m3, shape=[m, n])
        gs = self.global_view(s_ptr, dtype=float32, shape=[m, 1])
        if self.passes == 2:
            self.reread(m, n, warps, gx, gq, gs)
        elif self.stages:
            self.ring(num_tiles, bn, warps, gx, gq, gs)
        elif self.blocks_per_sm == 0:
            self.attrs.blocks = num_tiles
            row: int32 = self.blockIdx.x * rows
            self.quantize(self.load_rows(gx, row, bn, warps), gq, gs, row)
        else:
            grid = self.blocks_per_sm * self.num_sms
            self.attrs.blocks = min(num_tiles, grid)
            x = self.load_rows(gx, self.blockIdx.x * rows, bn, warps)
            for tile in self.range(self.blockIdx.x, num_tiles, grid):
                # the next tile's loads go out first (rows past m read nothing)
                nxt = self.load_rows(gx, (tile + grid) * rows, bn, warps)
                self.quantize(x, gq, gs, tile * rows)
                x = nxt

    def reread(self, m: int32, n: int, warps: int, gx, gq, gs):
        """A row a block in chunks of ``per_thread`` vectors a thread: a pass for the row's
        max |x| (kept elementwise, reduced once), then a second read of each chunk (an L2
        hit) to scale, round and store it. The tail past ``n`` reads as zero, is not stored."""
        tile = 32 * warps * self.vector * self.per_thread
        chunks = cdiv(n, tile)
        unroll = "all" if chunks <= 8 else 4  # all: the row's loads in flight at once
        self.attrs.blocks = m
        row: int32 = self.blockIdx.x
        acc = self.layout_rows(
            self.register_tensor(dtype=float32, shape=[1, tile], init=0.0), tile, warps
        )
        for c in self.range(chunks, unroll=unroll):
            xf = self.cast(self.load_rows(gx, row, tile, warps, c * tile), float32)
            self.maximum(acc, self.maximum(xf, -xf), out=acc)
        amax = self.maximum(self.max(acc, dim=1, keepdim=True), MIN_AMAX)
        inv = FP8_MAX / amax
        for c in self.range(chunks, unroll=unroll):
            xf = self.cast(self.load_rows(gx, row, tile, warps, c * tile), float32)
            self.store_global(gq, self.cast(xf * inv, float8_e4m3), offsets=[row, c * tile])
        self.store_global(gs, amax * (1.0 / FP8_MAX), offsets=[row, 0])

    def ring_blocks_per_sm(self, bn: int, warps: int) -> int:
        """Persistent ring blocks an SM: ``blocks_per_sm``, at most what threads and shared
        memory allow (0: that many)."""
        stage = self.rows * bn * 2
        fit = max(
            1, min(SM_BLOCKS, SM_THREADS // (32 * warps), SM_SMEM // (self.stages * stage + 1024))
        )
        return min(fit, self.blocks_per_sm) if self.blocks_per_sm else fit

    def ring(self, num_tiles: int32, bn: int, warps: int, gx, gq, gs):
        """Persistent blocks over a ring of ``stages`` shared stages: block ``b`` of ``g``
        takes row groups ``b, b + g, ...``; group ``k`` of the block lands in stage
        ``k % stages``, ``stages - 1`` groups ahead of the one being quantized."""
        rows, stages = self.rows, self.stages
        self.static_assert(
            stages * rows * bn * 2 <= BLOCK_SMEM,
            f"{stages} stages of {rows} rows of {bn} bf16 exceed a block's shared memory",
        )
        per_sm = self.ring_blocks_per_sm(bn, warps)
        self.attrs.blocks = min(num_tiles, self.num_sms * per_sm)
        ring = self.shared_tensor(dtype=bfloat16, shape=[stages, rows, bn])
        first: int32 = self.blockIdx.x
        grid: int32 = self.gridDim.x
        for k in range(stages - 1):
            self.fill_stage(gx, ring, k, first, grid)
        for it in range(cdiv(num_tiles - first, grid)):
            self.copy_async_wait_group(stages - 2)
            self.sync()  # the stage is in for every thread; the one refilled next is free
            self.fill_stage(gx, ring, it + stages - 1, first, grid)
            x = self.layout_rows(self.load_shared(ring[it % stages]), bn, warps)
            self.quantize(x, gq, gs, (first + it * grid) * rows)
        self.copy_async_wait_all()

    def fill_stage(self, gx, ring, k, first, grid):
        """Queue the block's row group ``k`` into its stage as one commit group (rows past
        ``m`` and columns past ``n`` read as zeros: they add nothing to the max)."""
        self.copy_async(gx, ring[k % self.stages], offsets=[(first + k * grid) * self.rows, 0])
        self.copy_async_commit_group()


def reference(torch, x):
    """(q, s) by the kernel's formula in torch float32."""
    xf = x.float()
    amax = xf.abs().amax(dim=1, keepdim=True).clamp(min=MIN_AMAX)
    inv = torch.full_like(amax, FP8_MAX) / amax  # a rounded division (`448.0 / t` is not)
    return (xf * inv).to(torch.float8_e4m3fn), (amax * (1.0 / FP8_MAX)).reshape(-1)


def check(torch, x, q, s) -> tuple[bool, str]:
    """Scales equal, codes equal to the reference's, dequantized within 1/16 of max |x|."""
    q_ref, s_ref = reference(torch, x)
    q, s = q.cpu(), s.cpu()
    if torch.isnan(q.float()).any() or torch.isnan(s).any():
        return False, "NaN in the output"
    if not torch.allclose(s, s_ref.cpu(), rtol=1e-6, atol=0):
        return False, "scales differ"
    codes, ref_codes = q.view(torch.uint8).int(), q_ref.cpu().view(torch.uint8).int()
    off = int((codes != ref_codes).sum())
    deq = q.float() * s[:, None]
    err = float((deq - x.float().cpu()).abs().max() / x.float().abs().max().clamp(min=1e-30))
    ok = off == 0 and err < 1 / 16
    return ok, f"{off} codes differ, max err {err:.1e}"


def run_once(kernel, torch, m, n, device):
    """Quantize fresh inputs; returns (passed, note, x, q, s)."""
    g = torch.Generator().manual_seed(int(time.time_ns() % 2**31))
    x = (torch.randn(m, n, generator=g) * torch.rand(m, 1, generator=g) * 10).to(torch.bfloat16)
    x[m // 2] = 0  # an all-zero row
    x = x.to(device)
    q = torch.full((m, n), 0x7F, dtype=torch.uint8, device=device).view(torch.float8_e4m3fn)
    s = torch.full((m,), float("nan"), dtype=torch.float32, device=device)
    kernel(m, n, x, q, s)
    ok, note = check(torch, x, q, s)
    return ok, note, x, q, s


def main() -> int:
    """Check PerTokenCast (interpreter on CPU, CUDA on a GPU) and print a table."""
    try:
        import torch
    except ImportError:
        print("per_token_cast needs torch (float8_e4m3fn tensors)")
        return 1
    gpu = cuda_torch()
    rows, status = [], 0
    if gpu is None:
        kernels = [  # a block per row group, and persistent blocks (2 "SMs": several rows each)
            (" ".join(f"{k}={v}" for k, v in zip(KEYS, c)),
             PerTokenCast(**dict(zip(KEYS, c)), num_sms=2))
            for c in CPU_CONFIGS
        ]  # fmt: skip
        sizes, device = CPU_SIZES, "cpu"
    else:
        kernels, sizes, device = [("tuned", PerTokenCast())], GPU_SIZES, "cuda"
    for m, n in sizes:
        for name, kernel in kernels:
            start = time.perf_counter()
            try:
                ok, note, x, q, s = run_once(kernel, torch, m, n, device)
                if gpu is None:
                    speed = f"{time.perf_counter() - start:.1f} s"
                else:
                    args = (m, n, x, q, s)
                    secs = gpu_time(gpu, lambda k=kernel, args=args: k(*args))
                    speed = f"{secs * 1e3:.3f} ms, {(3 * m * n + 4 * m) / secs / 1e9:.0f} GB/s"
            except Exception as e:  # noqa: BLE001 - report the failure, do not hide it
                traceback.print_exception(e)
                ok, note, speed = False, type(e).__name__, "-"
            status |= 0 if ok else 1
            rows.append([f"{m}x{n}", name, note, speed, "ok" if ok else "FAIL"])
    where = "the tilus interpreter" if gpu is None else gpu.cuda.get_device_name()
    print(f"per-token fp8 cast (bf16 -> e4m3 + row scales) on {where}")
    print_table(["m x n", "kernel", "check", "time", "status"], rows)
    return status


if __name__ == "__main__":
    sys.exit(main())
