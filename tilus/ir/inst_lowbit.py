"""Low-bit instructions: bit reinterpretation of register tiles (``self.view``)."""

from __future__ import annotations

from tilus.ir.enums import TensorKind
from tilus.ir.inst import Inst, InstError, instruction
from tilus.ir.layout.register import RegisterLayout
from tilus.ir.tensor import TensorVar

# --- bit reinterpretation of packed register tiles ----------------------------------------------


@instruction("view")
class ViewTensor(Inst):
    """The bits of register tile ``src`` seen as ``out`` (another dtype and/or shape).

    Each row (the last dim) keeps its bits in order, element ``j`` of a row at bit
    ``j * nbits`` least significant first, as memory packs them; every dim but the last is
    unchanged. A thread keeps its bits (``local_size * nbits`` is preserved), so on the GPU
    this moves no data. ``layout``: the output's layout given by the program (a seed of
    layout inference, as ``annotate_layout``), or None.
    """

    out: TensorVar
    src: TensorVar
    layout: RegisterLayout | None = None

    def validate(self) -> None:
        """Register tiles of the same rank whose rows hold the same number of bits."""
        src, out = self.src, self.out
        if src.kind != TensorKind.REGISTER or out.kind != TensorKind.REGISTER:
            raise InstError("view reinterprets register tiles")
        if src.ndim == 0 or src.ndim != out.ndim or src.shape[:-1] != out.shape[:-1]:
            raise InstError(
                f"view keeps every dim but the last: {src.type_str()} cannot be seen as shape "
                f"{list(out.shape)}"
            )
        a, b = src.shape[-1] * src.dtype.nbits, out.shape[-1] * out.dtype.nbits
        if a != b:
            raise InstError(
                f"view must keep the bits of a row: a row of {src.type_str()} has {a} bits, "
                f"a row of {out.dtype}[..., {out.shape[-1]}] has {b}"
            )
        if src.dtype.kind == "bool" or out.dtype.kind == "bool":
            raise InstError("view of boolean tiles is not supported (their bits are not packed)")
        lay = self.layout
        if lay is not None and tuple(lay.shape) != tuple(out.shape):
            raise InstError(
                f"the layout's shape {list(lay.shape)} differs from the view's {list(out.shape)}"
            )
