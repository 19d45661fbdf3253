"""Layout rules of reshapes: register tiles (in place or through shared memory) and views of
shared tiles with their rows whole."""

from __future__ import annotations

from tilus.backends.cuda.layout.inference import err
from tilus.backends.cuda.layout.plan import SharedView
from tilus.backends.cuda.layout.reshape import reshaped_layout
from tilus.backends.cuda.tables import LAYOUT_RULES
from tilus.ir import inst as I
from tilus.ir.enums import TensorKind
from tilus.ir.layout import SharedLayout
from tilus.ir.layout.register import permute

rule = LAYOUT_RULES.rule


@rule(I.ReshapeTensor)
def _reshape(inf, stmt, inst, g):
    """Register reshapes that only add or drop size-1 dims keep every register in place. A
    transposed (permuted) register view is reshaped as the view: the source's registers seen
    with dims permuted, then reshaped (so a tile loaded in one dim order can feed a dot in
    another without moving a register)."""
    if inst.src.kind == TensorKind.SHARED:
        _reshape_shared(inf, stmt, inst)
        return
    if inst.src.kind != TensorKind.REGISTER:
        raise err(stmt, f"reshape of a {inst.src.kind} tile is not supported by the CUDA backend")
    inf.use(inst.src, g, stmt)
    inf.define(inst.out, g, stmt)
    shape = tuple(inst.out.shape)
    if inst.src in inf.perms:
        base, dims = inf.base(inst.src)
        inf.derive(inst.out, base, lambda lo, d=dims: reshaped_layout(permute(lo, d), shape),
                   stmt, "reshape")  # fmt: skip
    else:
        inf.derive(inst.out, inst.src, lambda lo: reshaped_layout(lo, shape), stmt, "reshape")
    inf.converts.append((inst, g))


def _reshape_shared(inf, stmt, inst):
    """A shared view reshaped in its rows (``[2, 64, 64]`` -> ``[128, 64]``: two TMA halves
    read as one WGMMA operand): the same bytes when the rows keep their width and each row
    is a whole swizzle span (or there is no swizzle), so the view takes the allocation's
    layout with the view's dims re-split."""
    v = inf.shared_view(inst.src, stmt)
    lo = v.layout
    old = tuple(lo.shape[len(v.index) :])
    new = tuple(inst.out.shape)
    why = None
    if v.perm is not None or lo.perm is not None or lo.modes is not None or lo.xor is not None:
        why = "its layout is permuted or strided"
    elif not new or new[-1] != old[-1] or (lo.swizzle and len(new) < 2):
        why = f"its rows change width ({list(old)} -> {list(new)})"
    elif lo.col_blocks != 1:
        why = f"its {lo.row_bytes}-byte rows span {lo.col_blocks} swizzle column blocks"
    if why:
        raise err(stmt, f"reshape of a shared tile on the CUDA backend keeps it in place only "
                        f"when the rows stay whole; here {why}")  # fmt: skip
    layout = SharedLayout(tuple(lo.shape[: len(v.index)]) + new, lo.elem_bytes, lo.swizzle)
    inf.plan.shared[inst.out] = SharedView(v.root, layout, v.index)
