"""RMS norm over the last dim, ``y = x / sqrt(mean(x^2) + eps) * w``, fp16 in and out.

Each block normalizes ``rows`` whole rows held in registers (``[rows, bn]``, ``bn`` the row
length rounded up to a power of two): one ``[rows, 1]`` sum of squares per row (the ragged tail
reads as zero, so it adds nothing), broadcast back over the row, times the ``[bn]`` weight
broadcast over the rows.

Run ``python examples/rms_norm.py`` (interpreter without a GPU, CUDA with one); the result is
checked against NumPy float64.
"""

import numpy as np
from rowwise_support import check, exit_with, fp16_rows, rowwise_kernels
from softmax import ROW_SPACE, pow2_at_least, rows_and_warps

import tilus
from tilus import float16, float32, int32
from tilus.utils import cdiv

EPS = 1e-6


@tilus.autotune("block, per_thread", ROW_SPACE)
class RMSNorm(tilus.Script):
    """RMS norm of whole rows held in registers, ``block // n`` rows a block."""

    def __init__(self, block, per_thread):
        super().__init__()
        self.block = block
        self.per_thread = per_thread

    def __call__(self, m: int32, n: int, x_ptr: ~float16, w_ptr: ~float16, y_ptr: ~float16):
        bn = pow2_at_least(n)
        rows, warps = rows_and_warps(bn, self.block, self.per_thread)
        self.attrs.blocks = cdiv(m, rows)
        self.attrs.warps = warps
        gx = self.global_view(x_ptr, dtype=float16, shape=[m, n])
        gw = self.global_view(w_ptr, dtype=float16, shape=[n])
        gy = self.global_view(y_ptr, dtype=float16, shape=[m, n])
        row: int32 = self.blockIdx.x * rows
        x = self.cast(self.load_global(gx, offsets=[row, 0], shape=[rows, bn]), float32)
        ms = self.sum(x * x, dim=1, keepdim=True) * (1.0 / n)
        w = self.cast(self.load_global(gw, offsets=[0], shape=[bn]), float32)
        y = x * self.rsqrt(ms + EPS) * w
        self.store_global(gy, self.cast(y, float16), offsets=[row, 0])


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
