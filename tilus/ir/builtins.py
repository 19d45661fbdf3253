"""The built-in kernel variables ``blockIdx`` and ``gridDim`` (bound by each backend per block)."""

from __future__ import annotations

from dataclasses import dataclass

from tilus.dtypes import int32
from tilus.ir.enums import VarKind
from tilus.ir.expr import Var


@dataclass(frozen=True)
class Dim3:
    """``blockIdx``-style triple with ``.x``, ``.y``, ``.z``."""

    x: object
    y: object
    z: object

    def __iter__(self):
        return iter((self.x, self.y, self.z))

    def __len__(self):
        return 3


BLOCK_IDX = Dim3(
    Var("blockIdx.x", int32, VarKind.BUILTIN),
    Var("blockIdx.y", int32, VarKind.BUILTIN),
    Var("blockIdx.z", int32, VarKind.BUILTIN),
)
GRID_DIM = Dim3(
    Var("gridDim.x", int32, VarKind.BUILTIN),
    Var("gridDim.y", int32, VarKind.BUILTIN),
    Var("gridDim.z", int32, VarKind.BUILTIN),
)
