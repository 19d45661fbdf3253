"""The mode algebra of register layouts: canonical form, composition, division, inverse maps."""

# The spec describes a register layout by modes: each dim split row-major into modes, each mode
# spatial (a digit of the thread index) or local (a digit of the register index), negative
# spatial entries being pure replication. A Factor (dim, extent, stride) is exactly one mode:
# its stride is the product of the later modes of its dim. RegisterLayout takes these methods
# from LayoutAlgebra; new layouts are built as ``type(self)(shape, threads, locals)``.

from __future__ import annotations

import math
from dataclasses import dataclass

from tilus.errors import LayoutOperationError


@dataclass(frozen=True)
class Factor:
    """One digit of the thread or register index: ``extent`` values adding ``stride`` to ``dim``."""

    dim: int
    extent: int
    stride: int


NONE = (Factor(-1, 1, 0),)  # an empty factor list (one thread, one register)


def merge_factors(fs) -> tuple[Factor, ...]:
    """Drop size-1 factors and merge an outer factor with the inner one that continues it."""
    out: list[Factor] = []
    for f in fs:
        if f.extent == 1:
            continue
        if f.dim < 0:
            f = Factor(-1, f.extent, 0)
        if out:
            p = out[-1]
            if p.dim == f.dim == -1:
                out[-1] = Factor(-1, p.extent * f.extent, 0)
                continue
            if p.dim == f.dim and p.stride == f.stride * f.extent:
                out[-1] = Factor(f.dim, p.extent * f.extent, f.stride)
                continue
        out.append(f)
    return tuple(out) or NONE


def ordered_dims(shape, ranks) -> list[int]:
    """Dims in the order of their modes: ``ranks[d]`` is dim d's place (0 = most significant)."""
    if ranks is None:
        return list(range(len(shape)))
    ranks = list(ranks)
    if sorted(ranks) != list(range(len(shape))):
        raise LayoutOperationError(f"ranks {ranks} must be a permutation of 0..{len(shape) - 1}")
    return sorted(range(len(shape)), key=lambda d: ranks[d])


def dims_of(shape) -> tuple[int, ...]:
    """``shape`` as given to a layout function (``f(2, 3)`` or ``f([2, 3])``), checked."""
    if len(shape) == 1 and isinstance(shape[0], tuple | list):
        shape = tuple(shape[0])
    out = tuple(int(n) for n in shape)
    if any(n < 1 for n in out):
        raise LayoutOperationError(f"layout dims must be positive, got {out}")
    return out


def _peel(lhs, rhs) -> list[Factor] | None:
    """The outer factors left of ``lhs`` once ``rhs`` is matched as its innermost part."""
    left = [f for f in lhs if f.extent > 1]
    for g in reversed([f for f in rhs if f.extent > 1]):
        if not left:
            return None
        f = left[-1]
        if f.dim != g.dim or f.stride != g.stride or f.extent % g.extent:
            return None
        left.pop()
        if f.extent != g.extent:
            left.append(Factor(f.dim, f.extent // g.extent, f.stride * g.extent))
    return left


def _peel_front(lhs, rhs) -> list[Factor] | None:
    """The inner factors left of ``lhs`` once ``rhs`` is matched as its outermost part."""
    left = [f for f in lhs if f.extent > 1]
    for g in [f for f in rhs if f.extent > 1]:
        if not left or left[0].dim != g.dim or left[0].extent % g.extent:
            return None
        f = left.pop(0)
        rest = f.extent // g.extent
        if f.dim >= 0 and g.stride != f.stride * rest:
            return None
        if rest > 1:
            left.insert(0, Factor(f.dim, rest, f.stride))
    return left


class LayoutAlgebra:
    """The spec's operations on a layout of ``shape``, ``threads`` and ``locals`` factors."""

    __slots__ = ()

    def canonical(self):
        """Size-1 modes pruned, adjacent modes of one dim that sit next to each other in the
        same list merged: layouts that map alike have equal canonical forms."""
        threads, locs = merge_factors(self.threads), merge_factors(self.locals)
        kind = "replicated" if all(f.dim == -1 for f in threads) else "generic"
        return type(self)(self.shape, threads, locs, kind)

    def same_as(self, other) -> bool:
        """Whether both put every element in the same threads and registers."""
        return self.canonical() == other.canonical()

    @property
    def spatial_size(self) -> int:
        """Threads the layout spans."""
        return math.prod(f.extent for f in self.threads)

    @property
    def size(self) -> int:
        """Elements of the tile."""
        return math.prod(self.shape)

    def modes(self) -> tuple[list[int], list[int], list[int]]:
        """(mode_shape, spatial_modes, local_modes) of the canonical form."""
        lay = self.canonical()
        facs = [f for f in lay.threads + lay.locals if f.dim >= 0]
        index, mode_shape = {}, []
        for d in range(len(lay.shape)):
            for f in sorted((f for f in facs if f.dim == d), key=lambda f: -f.stride):
                index[f] = len(mode_shape)
                mode_shape.append(f.extent)
        spatial = [index[f] if f.dim >= 0 else -f.extent for f in lay.threads if f.extent > 1]
        local = [index[f] for f in lay.locals if f.extent > 1]
        return mode_shape, spatial, local

    @property
    def mode_shape(self) -> list[int]:
        """The modes every dim splits into, row-major, dim after dim."""
        return self.modes()[0]

    @property
    def spatial_modes(self) -> list[int]:
        """Mode indices serialized into the thread index (``-k``: replication by k)."""
        return self.modes()[1]

    @property
    def local_modes(self) -> list[int]:
        """Mode indices serialized into the register index."""
        return self.modes()[2]

    def describe(self) -> str:
        """A short text form: shape, modes and the spatial/local mode lists."""
        ms, sp, lc = self.modes()
        return (
            f"RegisterLayout(shape={list(self.shape)}, mode_shape={ms}, spatial_modes={sp}, "
            f"local_modes={lc})"
        )

    # --- maps ----------------------------------------------------------------------------------
    def get_global(self, spatial_index: int, local_index: int) -> tuple[int, ...]:
        """The element held by register ``local_index`` of thread ``spatial_index``."""
        return self.coords(spatial_index, local_index)

    def holders(self, index) -> list[tuple[int, int]]:
        """(thread, register) pairs that hold element ``index`` (one per replica)."""
        index = tuple(index)
        if len(index) != len(self.shape) or any(not 0 <= i < n for i, n in zip(index, self.shape)):
            raise LayoutOperationError(f"index {list(index)} is outside {list(self.shape)}")
        threads = [0]
        for f in self.threads:
            if f.dim < 0:
                threads = [t * f.extent + r for t in threads for r in range(f.extent)]
            else:
                threads = [t * f.extent + (index[f.dim] // f.stride) % f.extent for t in threads]
        loc = 0
        for f in self.locals:
            loc = loc * f.extent + ((index[f.dim] // f.stride) % f.extent if f.dim >= 0 else 0)
        return [(t, loc) for t in threads]

    def get_spatial(self, index) -> list[int]:
        """The threads (relative to the group) that hold element ``index``."""
        return [t for t, _ in self.holders(index)]

    def get_local(self, index) -> int:
        """The register slot of element ``index`` (the same in every holding thread)."""
        return self.holders(index)[0][1]

    def visualize(self) -> str:
        """A text grid (a 2-D layout, else its elements in one row-major row): each cell
        ``thread:register`` of the first holder, ``+`` when other threads hold copies."""
        rows, cols = self.shape if len(self.shape) == 2 else (1, self.size)
        cells = []
        for flat in range(rows * cols):
            index, rest = [], flat
            for n in reversed(self.shape):
                index.append(rest % n)
                rest //= n
            h = self.holders(index[::-1])
            cells.append(f"{h[0][0]}:{h[0][1]}" + ("+" if len(h) > 1 else ""))
        w = max(len(c) for c in cells)
        lines = [self.describe()]
        for r in range(rows):
            lines.append(" ".join(c.rjust(w) for c in cells[r * cols : (r + 1) * cols]))
        return "\n".join(lines)

    # --- composition ---------------------------------------------------------------------------
    def with_rank(self, rank: int):
        """The layout with size-1 dims prepended up to ``rank``."""
        k = rank - len(self.shape)
        if k <= 0:
            return self

        def sh(f: Factor) -> Factor:
            return f if f.dim < 0 else Factor(f.dim + k, f.extent, f.stride)

        return type(self)(
            (1,) * k + tuple(self.shape),
            tuple(map(sh, self.threads)),
            tuple(map(sh, self.locals)),
            self.kind,
        )

    def compose(self, inner):
        """``self * inner``: every element replaced by an ``inner`` tile (ranks unified by
        prepending size-1 dims; outer modes precede inner ones in every dim and list)."""
        rank = max(len(self.shape), len(inner.shape))
        outer, inner = self.with_rank(rank), inner.with_rank(rank)

        def scaled(f: Factor) -> Factor:
            return f if f.dim < 0 else Factor(f.dim, f.extent, f.stride * inner.shape[f.dim])

        shape = tuple(a * b for a, b in zip(outer.shape, inner.shape))
        threads = tuple(map(scaled, outer.threads)) + tuple(inner.threads)
        locs = tuple(map(scaled, outer.locals)) + tuple(inner.locals)
        return type(self)(shape, threads, locs).canonical()

    def __mul__(self, inner):
        return self.compose(inner)

    def divide(self, rhs):
        """``self / rhs``: the layout ``r`` with ``r * rhs == self``.

        Raises:
            LayoutOperationError: no such ``r``.
        """
        rank = max(len(self.shape), len(rhs.shape))
        a, b = self.with_rank(rank).canonical(), rhs.with_rank(rank).canonical()
        fail = LayoutOperationError(f"{self.describe()} is not a composition with {rhs.describe()}")
        if any(x % y for x, y in zip(a.shape, b.shape)):
            raise fail
        threads, locs = _peel(a.threads, b.threads), _peel(a.locals, b.locals)
        if threads is None or locs is None:
            raise fail

        def unscaled(f: Factor) -> Factor:
            if f.dim < 0:
                return f
            if f.stride % b.shape[f.dim]:
                raise fail
            return Factor(f.dim, f.extent, f.stride // b.shape[f.dim])

        shape = tuple(x // y for x, y in zip(a.shape, b.shape))
        r = type(self)(shape, tuple(map(unscaled, threads)), tuple(map(unscaled, locs)))
        r = r.canonical()
        if r.compose(b) != a:
            raise fail
        return r

    def __truediv__(self, rhs):
        return self.divide(rhs)

    def left_divide(self, lhs_divisor):
        """The layout ``r`` with ``lhs_divisor * r == self`` (``lhs_divisor`` the outer part).

        Raises:
            LayoutOperationError: no such ``r``.
        """
        rank = max(len(self.shape), len(lhs_divisor.shape))
        a, b = self.with_rank(rank).canonical(), lhs_divisor.with_rank(rank).canonical()
        fail = LayoutOperationError(
            f"{self.describe()} is not a composition of {lhs_divisor.describe()} with a layout"
        )
        if any(x % y for x, y in zip(a.shape, b.shape)):
            raise fail
        shape = tuple(x // y for x, y in zip(a.shape, b.shape))

        def scaled(f: Factor) -> Factor:  # b's factors as they sit in b * r
            return f if f.dim < 0 else Factor(f.dim, f.extent, f.stride * shape[f.dim])

        threads = _peel_front(a.threads, [scaled(f) for f in b.threads])
        locs = _peel_front(a.locals, [scaled(f) for f in b.locals])
        if threads is None or locs is None:
            raise fail
        r = type(self)(shape, tuple(threads), tuple(locs)).canonical()
        if b.compose(r) != a:
            raise fail
        return r

    def _primitive(self, shape, ranks, spatial: bool):
        shape = dims_of(shape)
        fs = tuple(Factor(d, shape[d], 1) for d in ordered_dims(shape, ranks))
        return type(self)(shape, fs if spatial else NONE, NONE if spatial else fs).canonical()

    def spatial(self, *shape, ranks=None):
        """``self * spatial(*shape, ranks=ranks)``."""
        return self.compose(self._primitive(shape, ranks, True))

    def local(self, *shape, ranks=None):
        """``self * local(*shape, ranks=ranks)``."""
        return self.compose(self._primitive(shape, ranks, False))

    def column_spatial(self, *shape):
        """``self * column_spatial(*shape)``."""
        shape = dims_of(shape)
        return self.spatial(*shape, ranks=list(reversed(range(len(shape)))))

    def column_local(self, *shape):
        """``self * column_local(*shape)``."""
        shape = dims_of(shape)
        return self.local(*shape, ranks=list(reversed(range(len(shape)))))
