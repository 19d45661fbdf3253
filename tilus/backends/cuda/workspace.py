"""The launch workspace of a kernel: where each ``global_tensor`` lives in it, and its size."""

from __future__ import annotations

import math

from tilus.ir import inst_memory as M
from tilus.passes.walk import instructions

ALIGN = 256  # bytes: every tensor starts at a multiple (vector and atomic accesses stay aligned)


def workspace_layout(fn) -> tuple[dict, int]:
    """``({GlobalTensorAlloc: byte offset}, total bytes)`` in program order."""
    offsets, total = {}, 0
    for _, inst in instructions(fn.body):
        if isinstance(inst, M.GlobalTensorAlloc) and inst not in offsets:
            offsets[inst] = total
            n = math.prod(inst.out.shape) * inst.out.dtype.nbits // 8
            total += -(-n // ALIGN) * ALIGN
    return offsets, total
