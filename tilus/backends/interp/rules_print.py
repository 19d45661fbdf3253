"""Interpreter rules of the printing instructions (``printf``, ``print_tensor``), C-formatted."""

from __future__ import annotations

import re
import sys

import numpy as np

from tilus.backends.interp.packed import PackedGlobalView
from tilus.backends.interp.rules import reg, rule, scal
from tilus.ir import inst as I
from tilus.ir.enums import TensorKind

_C_FMT = re.compile(r"%([-+ #0]*\d*(?:\.\d+)?)(?:hh|h|ll|l|z|j|t)?([diouxXfFeEgGcs%])")


def c_format(fmt: str, args) -> str:
    """Format like C printf (length modifiers dropped; %u as %d)."""
    py = _C_FMT.sub(lambda m: "%" + m.group(1) + ("d" if m.group(2) == "u" else m.group(2)), fmt)
    return py % tuple(args)


@rule(I.Printf)
def _printf(task, inst, loc):
    args = [scal(task, a, loc) for a in inst.args]
    print(c_format(inst.fmt, args), end="", flush=True)


@rule(I.PrintTensor)
def _print_tensor(task, inst, loc):
    t = inst.tensor
    v = task.env[t] if t.kind != TensorKind.REGISTER else reg(task, t, loc)
    if isinstance(v, PackedGlobalView):
        arr = v.read(v.arr)
    else:
        arr = np.asarray(v.arr if hasattr(v, "arr") else v)
    fmt = inst.fmt or _default_fmt(t.dtype)
    text = np.array2string(
        arr,
        separator=" ",
        threshold=sys.maxsize,  # every element, one row a line: as the CUDA backend prints
        max_line_width=sys.maxsize,
        formatter={"all": lambda x: c_format(fmt, [x.item()])},
    )
    print(f"{inst.msg}\n{text}", flush=True)


def _default_fmt(dt) -> str:
    return I.PrintTensor.default_fmt(dt)
