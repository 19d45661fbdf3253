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

#: (block, warps, vector) the GPU tunes over (vector 0: the layout inferred). Every thread must
#: keep about 32 bytes of loads in flight for HBM's latency (a widening cast of 4-bit codes
#: reads only 8 bytes per 16 elements): 8192 elements over 4 warps are four 8-byte loads a
#: thread at 58 registers. Measured on the H200 (bench/quantized_configs.py), of copy_: the
#: untuned (1024, 4, 0) 0.61 (int4 -> f16), 0.92 (f16 -> int4), 0.33-0.39 (fp4/fp6 -> f16).
SPACE = [(8192, 4, 16), (16384, 4, 16), (2048, 4, 16), (4096, 8, 0), (1024, 4, 0)]


@autotune("block, warps, vector", SPACE)
class Cast(Script):
    """``dst[i] = cast(src[i])`` over ``n`` elements, each side a flat buffer of its dtype
    (sub-byte types packed), rounding as every tilus cast does."""

    def __init__(self, src: DataType, dst: DataType, block: int, warps: int, vector: int):
        """``block`` elements (a multiple of 32) over ``warps`` warps per block; ``vector`` > 0
        pins the layout to that many contiguous elements a thread (0: inferred)."""
        super().__init__()
        self.src, self.dst = src, dst
        self.block, self.warps, self.vector = block, warps, vector

    def __call__(self, n: int32, src_ptr: void_p, dst_ptr: void_p):
        block = self.block
        self.attrs.blocks = [cdiv(n, block)]
        self.attrs.warps = self.warps
        gs = self.global_view(src_ptr, dtype=self.src, shape=[n])
        gd = self.global_view(dst_ptr, dtype=self.dst, shape=[n])
        t = self.load_global(gs, offsets=[self.blockIdx.x * block], shape=[block])
        r = self.cast(t, self.dst)
        if self.vector:  # pinned on the side of at least a byte (packed tiles take no layout)
            threads = 32 * self.warps
            layout = local(block // (threads * self.vector)).spatial(threads).local(self.vector)
            self.annotate_layout(r if self.src.nbits % 8 else t, layout)
        self.store_global(gd, r, offsets=[self.blockIdx.x * block])


@functools.cache
def cast_kernel(src: DataType, dst: DataType) -> Cast:
    """The (cached) cast kernel from ``src`` to ``dst``."""
    return Cast(src, dst)


def run_cast(x, dtype: DataType):
    """``x.to(dtype)`` for a ``tilus.Tensor`` ``x``: a new tensor on ``x``'s device, made by
    :class:`Cast` (the interpreter for CPU storage, the GPU for CUDA storage)."""
    out = _tensor.empty(x.shape, dtype, device=x.device)
    if x.numel:
        cast_kernel(x.dtype, dtype)(x.numel, _operand(x), _operand(out))
    return out


def _operand(t):
    # packed types pass their bytes; the others their typed view (bf16 is widened on the
    # interpreter, which needs to know it is bf16)
    if t.dtype.nbits % 8 or _tensor._torch_dtype(t.dtype) is None:
        return t.storage
    return t.torch().reshape(-1)


_tensor.set_cast_kernel(run_cast)
