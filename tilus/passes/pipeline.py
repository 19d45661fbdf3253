"""The pass pipeline: from a transpiled function to a checked, planned program."""

from __future__ import annotations

from dataclasses import dataclass, field

from tilus.ir.function import Function
from tilus.ir.printer import print_ir
from tilus.passes.fast_divmod import FastDivPlan, plan_fast_divmod
from tilus.passes.proxy_fences import insert_proxy_fences
from tilus.passes.register_budget import check_register_budget, check_tile_registers
from tilus.passes.shared_memory import SharedPlan, plan_shared_memory
from tilus.passes.uniformity import check_uniformity
from tilus.passes.verify import verify


@dataclass(frozen=True)
class Program:
    """A kernel ready for a backend: the function, its shared-memory plan, its IR text and the
    ``fast_divmod`` divisors that the host computes (hidden kernel parameters)."""

    fn: Function
    smem: SharedPlan
    text: str
    fastdiv: FastDivPlan = field(default_factory=FastDivPlan)


def lower(fn: Function) -> Program:
    """Run the passes in order."""
    fn = verify(fn)  # catch front-end scoping slips before anything relies on the IR
    fn = check_uniformity(fn)  # values changed by one thread group only must stay there
    fn = check_tile_registers(fn)  # no tile larger than any GPU's registers (nor the host's)
    fn = check_register_budget(fn)  # setmaxnreg requests fit the register file (no hang)
    smem = plan_shared_memory(fn)  # place tiles and barriers; enforce the per-block limit
    fn = insert_proxy_fences(fn, smem)  # TMA loads over generically accessed bytes get a fence
    fastdiv = plan_fast_divmod(fn)  # launch-invariant divisors get host-computed magic numbers
    return Program(fn, smem, print_ir(fn) + fastdiv.describe(), fastdiv)
