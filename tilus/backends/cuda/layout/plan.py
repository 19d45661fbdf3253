"""What layout inference decides: thread groups, shared views, TMA maps, the layout plan."""

from __future__ import annotations

from dataclasses import dataclass, field

from tilus.errors import TilusCompileError
from tilus.ir import visit
from tilus.ir.layout import SharedLayout
from tilus.ir.tensor import TensorVar


@dataclass(frozen=True)
class Group:
    """A thread group: absolute first thread and size; ``elected`` for single_thread()."""

    begin: int
    size: int
    elected: bool = False


@dataclass(frozen=True)
class SharedView:
    """A shared tile as a view of an allocation: leading integer indices, then a permutation."""

    root: TensorVar
    layout: SharedLayout  # of the root allocation
    index: tuple  # index expressions into the root's leading dims
    perm: tuple | None = None  # dims permutation applied to the indexed tile


@dataclass(frozen=True)
class TmaMap:
    """One TMA tensor map: a global view, the box it moves (outermost first), the swizzle."""

    gview: TensorVar
    box: tuple[int, ...]
    swizzle: int


@dataclass
class LayoutPlan:
    """Layouts of every tile of a function, the owning group of register tiles, TMA maps."""

    registers: dict = field(default_factory=dict)  # register TensorVar -> RegisterLayout
    owner: dict = field(default_factory=dict)  # register TensorVar -> Group
    shared: dict = field(default_factory=dict)  # shared TensorVar -> SharedView
    barriers: set = field(default_factory=set)  # MBarrierAlloc outputs
    gviews: dict = field(default_factory=dict)  # global TensorVar -> GlobalView inst
    strided: set = field(
        default_factory=set
    )  # global views (slices, permutes) whose last dim is not contiguous
    tmaps: list = field(default_factory=list)  # TmaMap, in first-use order
    tmap_of: dict = field(default_factory=dict)  # TMA inst -> index into tmaps
    scratch: dict = field(default_factory=dict)  # Reduce inst -> offset in the scratch area
    scratch_bytes: int = 0  # shared bytes of the reductions' cross-warp scratch area
    # (group begin, size) -> bytes of one half of the group's two alternating reduction areas
    reduce_halves: dict = field(default_factory=dict)
    # inst -> ((field, source tile, copy), ...): operands converted at the use into a copy in
    # the layout the instruction needs (its tile's class has another fixed layout)
    use_converts: dict = field(default_factory=dict)


def free_vars(e, out: set) -> None:
    """Add the variables expression ``e`` reads to ``out``."""
    out.update(visit.free_vars(e))


def err(stmt, msg):
    """A located compile error of the CUDA backend at ``stmt``."""
    return TilusCompileError(f"CUDA backend: {msg}", stmt.loc if stmt is not None else None)
