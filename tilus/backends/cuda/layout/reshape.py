"""Register reshapes: when a reshaped tile keeps every element in its thread and register."""

from __future__ import annotations

from dataclasses import replace

from tilus.errors import LayoutOperationError
from tilus.ir import inst as I
from tilus.ir.layout import RegisterLayout, replicated
from tilus.ir.layout.derived import insert_dims
from tilus.ir.layout.ops import reshape as reshape_layout


def moves_in_place(inst, src_layout: RegisterLayout, out_layout: RegisterLayout) -> bool:
    """Whether a cast or reshape keeps every element in the register it is in (else its
    registers go through shared memory)."""
    if isinstance(inst, I.ReshapeTensor):
        shape = tuple(inst.out.shape)
        if reshaped_layout(src_layout, shape) == out_layout:
            return True
        # any reshape whose modes split at the new dims' boundaries keeps the registers too
        # (a loaded tile seen as an mma fragment): compare where each element sits
        try:
            moved = reshape_layout(src_layout, shape)
        except LayoutOperationError:
            return False
        return replace(moved.canonical(), kind="") == replace(out_layout.canonical(), kind="")
    return src_layout == out_layout


def reshaped_layout(layout: RegisterLayout, shape) -> RegisterLayout | None:
    """``layout`` with the new ``shape``: size-1 dims added or dropped, a tile every thread
    holds whole in row-major registers, or modes split at the new dims' boundaries; None
    otherwise (the registers would have to move)."""
    out = insert_dims(layout, shape)
    if out is not None:
        return out
    if layout.replicated and layout == replicated(layout.shape, layout.num_threads):
        return replicated(shape, layout.num_threads)
    try:  # modes that split at the new dims' boundaries: the same registers, renumbered
        return reshape_layout(layout, shape)
    except LayoutOperationError:
        return None
