"""Tensor values of the tile IR: register, shared and global tiles."""

from __future__ import annotations

import math
from dataclasses import dataclass

from tilus.dtypes import DataType
from tilus.ir.enums import TensorKind
from tilus.ir.expr import Expr, as_expr

#: NumPy ufunc name -> the tile instruction to suggest instead
_UFUNC_METHODS = {
    **{n: n for n in ("exp", "exp2", "log", "log2", "sqrt", "sin", "cos", "tanh", "square")},
    **{n: n for n in ("floor", "ceil", "maximum", "minimum", "add")},
    "absolute": "abs",
    "rint": "round",
}


@dataclass(frozen=True, eq=False, slots=True)
class TensorVar:
    """A tile. ``shape`` holds ints (register, shared) or scalar expressions (global views)."""

    name: str
    dtype: DataType
    shape: tuple

    kind = "tensor"

    __hash__ = object.__hash__

    @property
    def ndim(self) -> int:
        """Number of dimensions."""
        return len(self.shape)

    @property
    def size(self):
        """Number of elements (an int, or an expression for a global view)."""
        if all(isinstance(s, int) for s in self.shape):
            return math.prod(self.shape)
        n = as_expr(1)
        for s in self.shape:
            n = n * s
        return n

    @property
    def nbytes(self) -> int:
        """Bytes the tile's elements occupy (elements x bits / 8)."""
        size = self.size
        if isinstance(size, Expr):
            raise TypeError("nbytes of a tile with a runtime shape is not a compile-time int")
        return size * self.dtype.nbits // 8

    # NumPy must not see a tile: a ufunc or np.asarray on it runs on the host while the kernel
    # is transpiled, and NumPy's own error ("loop of ufunc does not support ...") says nothing
    # about the tile instructions that do the work
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        name = _UFUNC_METHODS.get(ufunc.__name__)
        hint = f"self.{name}(...)" if name else "the tile instructions (self.exp(...), ...)"
        raise TypeError(
            f"NumPy's {ufunc.__name__} cannot take the tilus tile `{self.name}` (NumPy runs on "
            f"the host, before the kernel exists); use {hint}"
        )

    def __array__(self, dtype=None, copy=None):
        raise TypeError(
            f"the tilus tile `{self.name}` cannot become a NumPy array (its values exist only "
            "when the kernel runs); use the tile instructions (self.exp(...), self.sum(...), ...)"
        )

    def type_str(self) -> str:
        """``register[float32; 64, 64]``-style text used by the printer and in errors."""
        dims = ", ".join(str(s) if isinstance(s, int) else "?" for s in self.shape)
        return f"{self.kind}[{self.dtype.name}; {dims}]"


class RegisterTensor(TensorVar):
    """A tile held in the registers of the current thread group."""

    __slots__ = ()
    kind = TensorKind.REGISTER


class SharedTensor(TensorVar):
    """A tile in the block's shared memory."""

    __slots__ = ()
    kind = TensorKind.SHARED

    @property
    def storage_nbytes(self) -> int:
        """Bytes reserved for the tile in shared memory."""
        return self.nbytes


class GlobalTensor(TensorVar):
    """A view of global memory: a pointer with a (possibly runtime) shape and strides."""

    __slots__ = ()
    kind = TensorKind.GLOBAL
