"""The low-bit instructions of a Script: ``self.view`` (bit reinterpretation of register tiles)."""

from __future__ import annotations

from tilus.ir import inst_lowbit as L
from tilus.ir.enums import TensorKind
from tilus.ir.layout.derived import view_layout
from tilus.ir.layout.register import RegisterLayout
from tilus.lang.builder import current
from tilus.lang.instructions.tiles import _dtype


class LowBitInstructions:
    """Reinterpreting packed register tiles (e.g. uint8 storage seen as int4b)."""

    def view(self, x, *, layout=None, dtype=None):
        """The bits of register tile ``x`` seen as ``dtype``: each row (last dim) keeps its bits
        in order, so the last dim scales by ``x.dtype.nbits / dtype.nbits`` (a uint8 tile of
        shape [BK, BN // 2] viewed as int4b is [BK, BN], element j of a row in bits
        ``4j .. 4j + 3``). A thread keeps its bits: no data moves on the GPU.

        ``layout=`` (a ``RegisterLayout`` of the output's shape over the current thread group)
        pins the output's layout as ``annotate_layout`` does; ``x``'s layout then follows from
        it, and a layout that does not keep each thread's bits, or that conflicts with another
        use of ``x``, is refused at this line.
        """
        b = current()
        b.expect_tensor(x, (TensorKind.REGISTER,), "view's operand")
        dt = x.dtype if dtype is None else _dtype(b, dtype)
        if x.ndim == 0:
            raise b.error("view of a 0-d tile: it has no row to reinterpret")
        bits = x.shape[-1] * x.dtype.nbits
        if bits % dt.nbits:
            raise b.error(
                f"view of {x.type_str()} as {dt}: a row has {bits} bits, not a whole number "
                f"of {dt.nbits}-bit elements"
            )
        out = b.register(dt, (*x.shape[:-1], bits // dt.nbits), "v")
        if layout is not None:
            if not isinstance(layout, RegisterLayout):
                raise b.error(f"view(layout=) needs a RegisterLayout, got {type(layout).__name__}")
            if layout.num_threads != b.group.size:
                raise b.error(
                    f"the layout given to view spans {layout.num_threads} threads but the "
                    f"current thread group has {b.group.size}"
                )
            if tuple(layout.shape) == tuple(out.shape):  # else the instruction refuses it
                src = view_layout(layout, dt.nbits, x.dtype.nbits, x.shape)
                if src is None or view_layout(src, x.dtype.nbits, dt.nbits, out.shape) != layout:
                    raise b.error(
                        f"the layout given to view does not keep each thread's bits: its "
                        f"registers along the last dim are not runs of whole {x.dtype} elements"
                    )
        b.inst(L.ViewTensor(out, x, layout))
        return out
