"""Row softmax, ``y = exp(x - max(x)) / sum(exp(x - max(x)))`` per row, fp16 in and out.

``Softmax`` keeps whole rows in registers: each block loads ``rows`` rows as one
``[rows, bn]`` tile (``bn``, the row length rounded up to a power of two, is fixed when the
kernel is compiled for a row length ``n``), masks the ragged tail of each row to ``-inf``,
reduces each row to its maximum and its sum (``self.max(..., dim=1, keepdim=True)``: a
``[rows, 1]`` tile that broadcasts back over the row with no data movement) and stores the
result, reading and writing each element once. Rows longer than a tile use ``OnlineSoftmax``:
one pass over the row's column tiles keeps a running maximum and a running sum rescaled by
``exp(m_old - m_new)`` (the "online" softmax), a second pass writes the outputs.

Run ``python examples/softmax.py``: on the tilus interpreter without a GPU (or with
``TILUS_INTERPRET=1``), on CUDA with one; the result is checked against NumPy float64.
"""

import numpy as np
from rowwise_support import check, exit_with, fp16_rows, rowwise_kernels

import tilus
from tilus import float16, float32, int32
from tilus.utils import cdiv

LOG2E = 1.4426950408889634


def pow2_at_least(n: int) -> int:
    """The smallest power of two >= ``n`` (at least 8: one 16-byte vector of fp16)."""
    p = 8
    while p < n:
        p *= 2
    return p


@tilus.autotune("rows, warps", [(1, 4), (1, 8), (1, 16), (1, 32), (2, 4), (4, 4), (4, 8), (8, 8)])
class Softmax(tilus.Script):
    """Softmax of ``rows`` whole rows per block (a row of ``n`` held in registers)."""

    def __init__(self, rows, warps):
        super().__init__()
        self.rows = rows
        self.warps = warps

    def __call__(self, m: int32, n: int, x_ptr: ~float16, y_ptr: ~float16):
        bn = pow2_at_least(n)
        self.attrs.blocks = cdiv(m, self.rows)
        self.attrs.warps = self.warps
        gx = self.global_view(x_ptr, dtype=float16, shape=[m, n])
        gy = self.global_view(y_ptr, dtype=float16, shape=[m, n])
        row: int32 = self.blockIdx.x * self.rows
        x = self.load_global(gx, offsets=[row, 0], shape=[self.rows, bn])
        x = self.cast(x, float32) * LOG2E  # exp(v) = exp2(v * log2 e)
        if n < bn:  # the ragged tail of every row must not win the max nor add to the sum
            cols = self.register_tensor(dtype=int32, shape=[bn], init=lambda j: j)
            x = self.where(cols < n, x, -float("inf"))
        e = self.exp2(x - self.max(x, dim=1, keepdim=True))
        y = e * (1.0 / self.sum(e, dim=1, keepdim=True))
        self.store_global(gy, self.cast(y, float16), offsets=[row, 0])


@tilus.autotune("block_n, rows, warps", [(1024, 1, 4), (2048, 1, 8), (4096, 1, 8), (1024, 4, 8)])
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
        for j in range(cdiv(n, bn)):
            x = self.cast(self.load_global(gx, offsets=[row, j * bn], shape=[bm, bn]), float32)
            x = self.where(cols < n - j * bn, x * LOG2E, -float("inf"))
            new = self.maximum(mx, self.max(x, dim=1, keepdim=True))
            scaled = total * self.exp2(mx - new)
            self.assign(total, scaled + self.sum(self.exp2(x - new), dim=1, keepdim=True))
            self.assign(mx, new)
        inv = 1.0 / total
        for j in range(cdiv(n, bn)):
            x = self.cast(self.load_global(gx, offsets=[row, j * bn], shape=[bm, bn]), float32)
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
