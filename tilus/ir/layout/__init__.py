"""Register and shared-memory layouts of tiles (how the CUDA backend stores them)."""

from tilus.ir.layout.register import Factor, RegisterLayout, blocked, replicated, wgmma_acc
from tilus.ir.layout.shared import SharedLayout, choose_swizzle

__all__ = [
    "Factor",
    "RegisterLayout",
    "SharedLayout",
    "blocked",
    "choose_swizzle",
    "replicated",
    "wgmma_acc",
]
