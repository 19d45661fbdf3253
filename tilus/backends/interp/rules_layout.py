"""Interpreter rules of layout annotations (checked, no data moves) and repeat."""

from __future__ import annotations

import numpy as np

from tilus.backends.interp.rules import reg, rule
from tilus.errors import TilusRuntimeError
from tilus.ir import inst_layout as LY
from tilus.ir.enums import TensorKind


@rule(LY.AnnotateLayout)
def _annotate_layout(task, inst, loc):
    # the interpreter holds whole tiles; what it checks is that the layout fits the group
    # running the annotation (the front end checked it against the group it saw)
    if inst.tensor.kind == TensorKind.REGISTER and inst.layout.num_threads != task.size:
        raise TilusRuntimeError(
            f"the register layout of `{inst.tensor.name}` spans {inst.layout.num_threads} "
            f"threads but the group running it has {task.size}",
            loc,
        )


@rule(LY.Repeat)
def _repeat(task, inst, loc):
    x = reg(task, inst.src, loc)
    x = x.reshape((1,) * (len(inst.repeats) - x.ndim) + x.shape)
    if inst.interleave:
        for d, r in enumerate(inst.repeats):
            x = np.repeat(x, r, axis=d)
    else:
        x = np.tile(x, inst.repeats)
    task.env[inst.out] = np.ascontiguousarray(x)
