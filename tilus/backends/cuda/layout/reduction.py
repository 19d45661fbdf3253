"""How a reduction over a register layout splits into warp shuffles and cross-warp slots."""

from __future__ import annotations

import math


def thread_stages(layout, dim: int, group_size: int):
    """Split the thread digits along ``dim`` into butterflies within a warp (lane masks) and
    slots across warps or odd extents: ``(masks, slots)``, slots as (extent, digit divisor)."""
    below, parts = 1, []
    for f in reversed(layout.threads):
        parts.append((f, below))
        below *= f.extent
    masks, slots = [], []
    warp_ok = group_size % 32 == 0 or group_size < 32
    for f, b in parts:
        if f.dim != dim or f.extent == 1:
            continue
        e = f.extent
        # the digit's low power-of-two part inside a warp shuffles (all of it for a power of
        # two; 32 lanes of a 448-thread row), the rest goes through slots
        lanes = math.gcd(e, 32 // b) if warp_ok and b < 32 and 32 % b == 0 else 1
        if lanes > 1:
            masks += [b << k for k in range(int(math.log2(lanes)))]
            if e > lanes:
                slots.append((e // lanes, b * lanes))
        else:
            slots.append((e, b))
    return masks, slots


def scratch_bytes(layout, inst, group_size: int) -> int:
    """Shared bytes the cross-warp stage of a reduction needs (0 when it has none)."""
    _, slots = thread_stages(layout, inst.dim, group_size)
    if not slots:
        return 0
    size = math.prod(e for e, _ in slots) * inst.out.size
    wide = inst.op in ("sum", "max", "min") and inst.src.dtype.nbits == 64
    return size * (8 if wide else 4)
