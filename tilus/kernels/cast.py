"""``tilus.kernels.cast``: the elementwise cast behind ``tilus.Tensor.to`` for any dtypes."""

from __future__ import annotations

import functools

from tilus import tensor as _tensor
from tilus.dtypes import DataType, int32, void_p
from tilus.ir.layout import local
from tilus.lang.autotune import autotune
from tilus.lang.script import Script
from tilus.utils import cdiv

#: elements per block of the untuned form (a multiple of 32, so packed tiles of every width
#: fill whole words)
BLOCK = 1024

#: (block, warps, vector, per_sm) the GPU tunes over. ``vector`` > 0 pins the byte-sized
#: side's layout to that many contiguous elements a thread, the block's threads side by side
#: (0: inferred). Measured on the H200 (2^28 elements, bench/quantized_configs.py), of copy_:
#: the widening casts (int4/uint4/fp4/fp6 -> f16) want 8 f16 a thread (a warp's 16-byte
#: stores fill whole sectors): (2048, 4, 8) 0.96 for all four, where 16 f16 a thread (half
#: sectors a store) gave 0.57-0.65 and the old inferred layout 0.60-0.72; the narrowing ones
#: want 16 f16 a thread (two 16-byte loads): (4096, 4, 16) 0.96 (f16 -> int4), 0.76 (f16 ->
#: fp4, issue-bound by the encode). ``per_sm`` > 0 (a persistent grid of that many blocks an
#: SM looping over the tiles, the next tile's loads issued before the current tile is stored)
#: measured slower everywhere (0.83-0.87 widening, 0.45-0.66 narrowing), so it is not tuned.
SPACE = [
    (2048, 4, 8, 0),
    (4096, 4, 16, 0),
    (4096, 4, 8, 0),
    (2048, 4, 16, 0),
    (1024, 4, 0, 0),
]


@autotune("block, warps, vector, per_sm", SPACE)
class Cast(Script):
    """``dst[i] = cast(src[i])`` over ``n`` elements, each side a flat buffer of its dtype
    (sub-byte types packed), rounding as every tilus cast does."""

    def __init__(
        self,
        src: DataType,
        dst: DataType,
        block: int,
        warps: int,
        vector: int,
        per_sm: int = 0,
        num_sms: int | None = None,
    ):
        """``block`` elements (a multiple of 32) over ``warps`` warps per block; ``vector`` > 0
        pins the layout to that many contiguous elements a thread (0: inferred); ``per_sm``
        > 0: persistent blocks, that many an SM, each looping over tiles of ``block``;
        ``num_sms`` (default: the GPU's) sizes that grid (tests: a few blocks, many tiles)."""
        super().__init__()
        self.src, self.dst = src, dst
        self.block, self.warps, self.vector, self.per_sm = block, warps, vector, per_sm
        self.num_sms = num_sms

    def _layout(self, t, r) -> None:
        if self.vector:  # pinned on the side of at least a byte (packed tiles take no layout)
            threads = 32 * self.warps
            reps = self.block // (threads * self.vector)
            layout = local(reps).spatial(threads).local(self.vector)
            self.annotate_layout(r if self.src.nbits % 8 else t, layout)

    def __call__(self, n: int32, src_ptr: void_p, dst_ptr: void_p):
        block = self.block
        tiles = cdiv(n, block)
        self.attrs.warps = self.warps
        gs = self.global_view(src_ptr, dtype=self.src, shape=[n])
        gd = self.global_view(dst_ptr, dtype=self.dst, shape=[n])
        if self.per_sm == 0:
            self.attrs.blocks = [tiles]
            t = self.load_global(gs, offsets=[self.blockIdx.x * block], shape=[block])
            r = self.cast(t, self.dst)
            self._layout(t, r)
            self.store_global(gd, r, offsets=[self.blockIdx.x * block])
        else:
            # persistent: blocks loop over tiles b, b + grid, ..., the next tile's loads issued
            # before the current tile is stored. The tile carried to the next iteration is the
            # byte-sized side (a packed register tile cannot be reassigned): the converted one
            # for a packed source, else the loaded one; with both sides packed, none is.
            grid = (self.num_sms or self.cuda.sm_count) * self.per_sm  # a compile-time step
            self.attrs.blocks = [min(tiles, grid)]
            first: int32 = self.blockIdx.x
            if self.src.nbits % 8 != 0 and self.dst.nbits % 8 != 0:
                for tile in self.range(first, tiles, grid):
                    t = self.load_global(gs, offsets=[tile * block], shape=[block])
                    self.store_global(gd, self.cast(t, self.dst), offsets=[tile * block])
            elif self.src.nbits % 8 != 0:
                t = self.load_global(gs, offsets=[first * block], shape=[block])
                r = self.cast(t, self.dst)
                self._layout(t, r)
                for tile in self.range(first, tiles, grid):
                    # past the end (clamped: no int32 overflow) the loads read nothing
                    nxt = self.load_global(
                        gs, offsets=[min(tile + grid, tiles) * block], shape=[block]
                    )
                    self.store_global(gd, r, offsets=[tile * block])
                    r2 = self.cast(nxt, self.dst)
                    self._layout(nxt, r2)
                    self.assign(r, r2)
            else:
                t = self.load_global(gs, offsets=[first * block], shape=[block])
                for tile in self.range(first, tiles, grid):
                    nxt = self.load_global(
                        gs, offsets=[min(tile + grid, tiles) * block], shape=[block]
                    )
                    r = self.cast(t, self.dst)
                    self._layout(t, r)
                    self.store_global(gd, r, offsets=[tile * block])
                    self.assign(t, nxt)


@functools.cache
def cast_kernel(src: DataType, dst: DataType) -> Cast:
    """The (cached) cast kernel from ``src`` to ``dst``."""
    return Cast(src, dst)


def run_cast(x, dtype: DataType):
    """``x.to(dtype)`` for a ``tilus.Tensor`` ``x``: a new tensor on ``x``'s device, made by
    :class:`Cast` (the interpreter for CPU storage, the GPU for CUDA storage)."""
    out = _tensor.empty(x.shape, dtype, device=x.device)
    if x.numel:
        cast_kernel(x.dtype, dtype)(x.numel, operand(x), operand(out))
    return out


def operand(t):
    """What :class:`Cast` takes for the ``tilus.Tensor`` ``t``: its bytes for a packed dtype
    and for every tensor on the GPU (the tuner then compares bytes: a NaN in a float view,
    input or output, would fail every config), else its typed torch view (the interpreter
    widens bf16, so it needs to know it is bf16)."""
    if t.dtype.nbits % 8 or _tensor._torch_dtype(t.dtype) is None or t.device != "cpu":
        return t.storage
    return t.torch().reshape(-1)


_tensor.set_cast_kernel(run_cast)
