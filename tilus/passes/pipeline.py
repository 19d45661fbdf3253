"""The pass pipeline: from a transpiled function to a checked, planned program."""

from __future__ import annotations

from dataclasses import dataclass

from tilus.ir.function import Function
from tilus.ir.printer import print_ir
from tilus.passes.shared_memory import SharedPlan, plan_shared_memory
from tilus.passes.uniformity import check_uniformity
from tilus.passes.verify import verify


@dataclass(frozen=True)
class Program:
    """A kernel ready for a backend: the function, its shared-memory plan and its IR text."""

    fn: Function
    smem: SharedPlan
    text: str


def lower(fn: Function) -> Program:
    """Run the passes in order."""
    fn = verify(fn)  # catch front-end scoping slips before anything relies on the IR
    fn = check_uniformity(fn)  # values changed by one thread group only must stay there
    smem = plan_shared_memory(fn)  # place tiles and barriers; enforce the per-block limit
    return Program(fn, smem, print_ir(fn))
