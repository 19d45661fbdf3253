"""Instructions about layouts and per-thread replication: annotations, repeat, repeat_interleave."""

from __future__ import annotations

from tilus.ir.enums import TensorKind
from tilus.ir.inst import Inst, InstError, instruction
from tilus.ir.layout.register import RegisterLayout
from tilus.ir.layout.shared import SharedLayout
from tilus.ir.tensor import TensorVar


@instruction("annotate_layout")
class AnnotateLayout(Inst):
    """Pin the layout of a register or shared tile (a seed of layout inference; backends that
    do not lay tiles out check it and go on)."""

    tensor: TensorVar
    layout: RegisterLayout | SharedLayout

    def validate(self) -> None:
        t, lay = self.tensor, self.layout
        if t.kind == TensorKind.REGISTER:
            if not isinstance(lay, RegisterLayout):
                raise InstError(f"a register tile needs a RegisterLayout, got {type(lay).__name__}")
        elif t.kind == TensorKind.SHARED:
            if not isinstance(lay, SharedLayout):
                raise InstError(f"a shared tile needs a SharedLayout, got {type(lay).__name__}")
            eb = max(1, t.dtype.nbits // 8)
            if lay.elem_bytes not in (0, eb) or t.dtype.nbits % 8:
                raise InstError(
                    f"the shared layout is for {lay.elem_bytes}-byte elements but %{t.name} "
                    f"holds {t.dtype}"
                )
        else:
            raise InstError(f"annotate_layout takes a register or shared tile, not a {t.kind} one")
        if tuple(lay.shape) != tuple(t.shape):
            raise InstError(
                f"the layout's shape {list(lay.shape)} differs from the tile's {list(t.shape)}"
            )


@instruction("repeat")
class Repeat(Inst):
    """``out`` = ``src`` tiled ``repeats`` times per dim (``torch.Tensor.repeat``), or with
    ``interleave`` every element repeated in place (``repeat_interleave`` per dim)."""

    out: TensorVar
    src: TensorVar
    repeats: tuple[int, ...]
    interleave: bool

    def validate(self) -> None:
        src, reps = self.src, self.repeats
        if len(reps) < src.ndim or (self.interleave and len(reps) != src.ndim):
            raise InstError(
                f"{len(reps)} repeats for a rank-{src.ndim} tile (repeat_interleave needs one "
                "per dim, repeat at least one per dim)"
            )
        lead = (1,) * (len(reps) - src.ndim)
        want = tuple(n * r for n, r in zip(lead + tuple(src.shape), reps))
        if tuple(self.out.shape) != want:
            raise InstError(f"the output has shape {list(self.out.shape)}, expected {list(want)}")
        if self.out.dtype != src.dtype:
            raise InstError(f"the output has dtype {self.out.dtype}, expected {src.dtype}")


def repeat_source_index(inst: Repeat, src_local: int, i: int) -> int:
    """Register of ``src`` that register ``i`` of ``out`` copies, in the layouts
    :func:`repeat_layout` gives (same thread): the repeats are outer (repeat) or inner
    (interleave) register digits."""
    reps = 1
    for r in inst.repeats:
        reps *= r
    return i // reps if inst.interleave else i % src_local


def repeat_layout(inst: Repeat, src_layout: RegisterLayout) -> RegisterLayout:
    """The layout of ``out`` that keeps every copy in the thread holding the source element."""
    from tilus.ir.layout.ops import compose, local

    reps = local(*inst.repeats)
    out = compose(src_layout, reps) if inst.interleave else compose(reps, src_layout)
    # compose canonicalizes; the register order must stay src-major / repeat-major as built
    return out
