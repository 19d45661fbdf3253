"""Layout annotations, clip and the repeats, as ``self.<name>`` in Scripts and Classes."""

from __future__ import annotations

from tilus.ir import inst_layout as LY
from tilus.ir.enums import TensorKind
from tilus.ir.layout.register import RegisterLayout
from tilus.ir.layout.shared import SharedLayout
from tilus.ir.tensor import TensorVar
from tilus.lang.builder import current
from tilus.lang.instructions.tiles import _int_list, tensor_binary


def annotate(b, tensor, layout) -> None:
    """Emit the annotation pinning ``tensor``'s layout, refusing one the current group or the
    tile cannot take (a located error)."""
    t = b.expect_tensor(tensor, (TensorKind.REGISTER, TensorKind.SHARED), "annotate_layout's tile")
    if not isinstance(layout, RegisterLayout | SharedLayout):
        raise b.error(
            f"annotate_layout needs a RegisterLayout or SharedLayout, got {type(layout).__name__}"
        )
    if isinstance(layout, RegisterLayout) and t.kind == TensorKind.REGISTER:
        n = b.group.size
        if layout.num_threads != n:
            raise b.error(
                f"the layout of %{t.name} spans {layout.num_threads} threads but the current "
                f"thread group has {n}"
            )
    b.inst(LY.AnnotateLayout(t, layout))


class LayoutInstructions:
    """``annotate_layout``, ``clip``, ``repeat`` and ``repeat_interleave``."""

    def annotate_layout(self, tensor, layout) -> None:
        """Pin the layout of a register tile (a ``RegisterLayout`` over the current thread
        group) or of a shared tile (a ``SharedLayout``, given to the allocation): layout
        inference starts from it and refuses, at both lines, a use that needs another."""
        annotate(current(), tensor, layout)

    def clip(self, x, min, max, *, out=None) -> TensorVar:  # noqa: A002 - the spec's names
        """``minimum(maximum(x, min), max)`` elementwise (bounds: scalars or tiles)."""
        b = current()
        b.expect_tensor(x, (TensorKind.REGISTER,), "clip's operand")
        return tensor_binary("min", tensor_binary("max", x, min), max, out)

    def repeat(self, x, repeats, *, out=None) -> TensorVar:
        """``x`` tiled ``repeats[d]`` times along each dim (``torch.Tensor.repeat``: extra
        leading repeats add dims)."""
        return _repeat(x, repeats, out, False)

    def repeat_interleave(self, x, repeats, *, out=None) -> TensorVar:
        """Every element of ``x`` repeated ``repeats[d]`` times in place along each dim."""
        return _repeat(x, repeats, out, True)


def _repeat(x, repeats, out, interleave: bool) -> TensorVar:
    b = current()
    what = "repeat_interleave" if interleave else "repeat"
    b.expect_tensor(x, (TensorKind.REGISTER,), f"{what}'s operand")
    reps = _int_list(b, repeats, "repeats")
    if len(reps) < x.ndim or (interleave and len(reps) != x.ndim):
        need = "one per dim" if interleave else "at least one per dim"
        raise b.error(f"{what} of a rank-{x.ndim} tile needs {need}, got {list(reps)}")
    lead = (1,) * (len(reps) - x.ndim)
    shape = tuple(n * r for n, r in zip(lead + tuple(x.shape), reps))
    if out is None:
        out = b.register(x.dtype, shape, "t")
    b.inst(LY.Repeat(out, x, reps, interleave))
    return out
