"""Fused bias and activation, ``y = act(x * w + b)`` with ``w``, ``b`` broadcast over the rows.

A 2-D grid of ``[block_m, block_n]`` tiles; each block loads its tile of ``x`` and the
``[block_n]`` slices of ``w`` and ``b`` (broadcast over the tile's rows: their layout is the
tile's with the row dim collapsed, so each thread already holds the columns it needs), applies
ReLU or the tanh-approximated GELU in float32, and stores fp16. Neither ``m`` nor ``n`` needs
to be a multiple of the tile: loads past the edge read zero and stores past it are skipped
(the masked ragged tail).

Run ``python examples/bias_act.py`` (interpreter without a GPU, CUDA with one); the result is
checked against NumPy float64.
"""

import numpy as np
from rowwise_support import check, exit_with, fp16_rows, rowwise_kernels

import tilus
from tilus import float16, float32, int32
from tilus.utils import cdiv

GELU_C = 0.7978845608028654  # sqrt(2 / pi)


@tilus.autotune("block_m, block_n, warps", [(16, 256, 4), (32, 256, 8), (8, 512, 4)])
class BiasAct(tilus.Script):
    """``act(x * w + b)`` over ``[block_m, block_n]`` tiles; ``act`` is "relu" or "gelu"."""

    def __init__(self, block_m, block_n, warps, act="relu"):
        super().__init__()
        self.block_m, self.block_n, self.warps, self.act = block_m, block_n, warps, act

    def __call__(
        self, m: int32, n: int32, x_ptr: ~float16, w_ptr: ~float16, b_ptr: ~float16, y_ptr: ~float16
    ):
        bm, bn = self.block_m, self.block_n
        self.attrs.blocks = [cdiv(n, bn), cdiv(m, bm)]
        self.attrs.warps = self.warps
        gx = self.global_view(x_ptr, dtype=float16, shape=[m, n])
        gw = self.global_view(w_ptr, dtype=float16, shape=[n])
        gb = self.global_view(b_ptr, dtype=float16, shape=[n])
        gy = self.global_view(y_ptr, dtype=float16, shape=[m, n])
        col: int32 = self.blockIdx.x * bn
        row: int32 = self.blockIdx.y * bm
        x = self.cast(self.load_global(gx, offsets=[row, col], shape=[bm, bn]), float32)
        w = self.cast(self.load_global(gw, offsets=[col], shape=[bn]), float32)
        b = self.cast(self.load_global(gb, offsets=[col], shape=[bn]), float32)
        h = x * w + b
        if self.act == "relu":
            y = self.where(h > 0.0, h, 0.0)
        else:
            y = 0.5 * h * (1.0 + self.tanh(GELU_C * (h + 0.044715 * h * h * h)))
        self.store_global(gy, self.cast(y, float16), offsets=[row, col])


def reference(x, w, b, act="relu"):
    """``act(x * w + b)`` in float64."""
    h = x * w + b
    if act == "relu":
        return np.maximum(h, 0.0)
    return 0.5 * h * (1.0 + np.tanh(GELU_C * (h + 0.044715 * h**3)))


def main() -> int:
    """Check ReLU and GELU variants against NumPy."""
    status = 0
    for act in ("relu", "gelu"):
        status |= check(
            f"Bias + {act} (fp16 in/out, fp32 math)",
            rowwise_kernels([BiasAct], act=act),
            lambda rng, m, n: fp16_rows(rng, m, n, (n, n)),
            lambda x, w, b, a=act: reference(x, w, b, a),
            cpu_shapes=[(37, 300), (5, 513)],  # ragged in both dims
            gpu_shapes=[(8192, 8192), (4097, 1333)],
            tol=1e-2,
            moved=lambda m, n: 4 * m * n,
        )
    return status


if __name__ == "__main__":
    exit_with(main())
