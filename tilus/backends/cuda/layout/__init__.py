"""Layout inference for the CUDA backend: the plan, the walk, one rule per instruction."""

from tilus.backends.cuda.layout import rules as _rules  # noqa: F401 - registers LAYOUT_RULES
from tilus.backends.cuda.layout import rules_layout as _rules_layout  # noqa: F401
from tilus.backends.cuda.layout import rules_reshape as _rules_reshape  # noqa: F401
from tilus.backends.cuda.layout.inference import (
    MAX_TILE_REGISTERS,
    infer_layouts,
    tile_registers_error,
)
from tilus.backends.cuda.layout.plan import Group, LayoutPlan, SharedView, TmaMap

__all__ = [
    "MAX_TILE_REGISTERS",
    "Group",
    "LayoutPlan",
    "SharedView",
    "TmaMap",
    "infer_layouts",
    "tile_registers_error",
]
