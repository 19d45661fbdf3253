"""The user-facing register layout functions: primitives, composition, division, reshapes."""

# The spec describes a register layout by modes: each dim split row-major into modes, each mode
# spatial (a digit of the thread index) or local (a digit of the register index), negative
# spatial entries being pure replication. A Factor (dim, extent, stride) is exactly one mode:
# its stride is the product of the later modes of its dim. So these functions build the one
# RegisterLayout class and compare layouts by their canonical factor lists.

from __future__ import annotations

import math

from tilus.errors import LayoutOperationError
from tilus.ir.layout.derived import collapse, drop_dims
from tilus.ir.layout.register import Factor, RegisterLayout
from tilus.ir.layout.register import permute as _permute
from tilus.ir.layout.register import replicated as _replicated

NONE = (Factor(-1, 1, 0),)  # an empty factor list (one thread, one register)


def _shape(shape) -> tuple[int, ...]:
    if len(shape) == 1 and isinstance(shape[0], tuple | list):
        shape = tuple(shape[0])
    out = tuple(int(n) for n in shape)
    if any(n < 1 for n in out):
        raise LayoutOperationError(f"layout dims must be positive, got {out}")
    return out


def _ordered(shape, ranks) -> list[int]:
    """Dims in the order of their modes: ``ranks[d]`` is dim d's place (0 = most significant)."""
    if ranks is None:
        return list(range(len(shape)))
    ranks = list(ranks)
    if sorted(ranks) != list(range(len(shape))):
        raise LayoutOperationError(f"ranks {ranks} must be a permutation of 0..{len(shape) - 1}")
    return sorted(range(len(shape)), key=lambda d: ranks[d])


def _merge(fs) -> tuple[Factor, ...]:
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


def canonicalize_layout(layout: RegisterLayout) -> RegisterLayout:
    """The canonical form of ``layout``: size-1 modes pruned, adjacent modes of one dim that
    sit next to each other in the same list merged (equal layouts have equal canonical forms)."""
    kind = "replicated" if layout.replicated else "generic"
    return RegisterLayout(layout.shape, _merge(layout.threads), _merge(layout.locals), kind)


def same_layout(a: RegisterLayout, b: RegisterLayout) -> bool:
    """Whether two layouts put every element in the same threads and registers."""
    return canonicalize_layout(a) == canonicalize_layout(b)


def spatial(*shape, ranks=None) -> RegisterLayout:
    """``prod(shape)`` threads over a tile of ``shape``, one element each, thread index
    row-major over the dims (``ranks`` reorders: ``ranks[d]`` is dim d's significance)."""
    shape = _shape(shape)
    threads = tuple(Factor(d, shape[d], 1) for d in _ordered(shape, ranks))
    return canonicalize_layout(RegisterLayout(shape, threads, NONE))


def local(*shape, ranks=None) -> RegisterLayout:
    """One thread holding the whole tile, registers row-major (``ranks`` reorders)."""
    shape = _shape(shape)
    locs = tuple(Factor(d, shape[d], 1) for d in _ordered(shape, ranks))
    return canonicalize_layout(RegisterLayout(shape, NONE, locs))


def column_spatial(*shape) -> RegisterLayout:
    """:func:`spatial` with the thread index column-major (the first dim varies fastest)."""
    shape = _shape(shape)
    return spatial(*shape, ranks=list(reversed(range(len(shape)))))


def column_local(*shape) -> RegisterLayout:
    """:func:`local` with the registers column-major (the first dim varies fastest)."""
    shape = _shape(shape)
    return local(*shape, ranks=list(reversed(range(len(shape)))))


def replicated(*shape, num_workers: int | None = None) -> RegisterLayout:
    """Every one of ``num_workers`` threads holds the whole tile (registers row-major).

    ``replicated(shape_tuple, num_threads)`` is accepted too.
    """
    if num_workers is None and len(shape) == 2 and isinstance(shape[0], tuple | list):
        shape, num_workers = (tuple(shape[0]),), shape[1]
    if num_workers is None or num_workers < 1:
        raise LayoutOperationError("replicated(*shape, num_workers) needs num_workers >= 1")
    return _replicated(_shape(shape), int(num_workers))


def _dim_modes(shape, mode_shape) -> list[list[int]]:
    """Mode indices of every dim: ``mode_shape`` consumed in order, each dim's product exact."""
    out, k = [], 0
    for n in shape:
        modes, p = [], 1
        while p < n:
            if k >= len(mode_shape):
                break
            p *= mode_shape[k]
            modes.append(k)
            k += 1
        if p != n:
            raise LayoutOperationError(f"mode_shape {list(mode_shape)} does not split {shape}")
        out.append(modes)
    while k < len(mode_shape) and mode_shape[k] == 1:
        k += 1
    if k != len(mode_shape):
        raise LayoutOperationError(f"mode_shape {list(mode_shape)} has modes beyond {shape}")
    return out


def register_layout(shape, mode_shape, spatial_modes, local_modes) -> RegisterLayout:
    """The layout of the spec's data form: ``shape`` split row-major into ``mode_shape``;
    threads the row-major serialization of ``spatial_modes`` (``-k``: replication by k),
    registers that of ``local_modes``. Canonicalized."""
    shape, mode_shape = _shape(shape), tuple(int(m) for m in mode_shape)
    factor = {}
    for d, modes in enumerate(_dim_modes(shape, mode_shape)):
        stride = 1
        for m in reversed(modes):
            factor[m] = Factor(d, mode_shape[m], stride)
            stride *= mode_shape[m]
    used = [m for m in list(spatial_modes) + list(local_modes) if m >= 0]
    want = [m for m, n in enumerate(mode_shape) if n > 1]
    if (
        sorted(used) != sorted(set(used))
        or not set(want) <= set(used)
        or not set(used) <= set(factor)
    ):
        raise LayoutOperationError(
            f"spatial_modes {list(spatial_modes)} and local_modes {list(local_modes)} must "
            f"name every mode of {list(mode_shape)} exactly once"
        )
    if any(m < 0 for m in local_modes):
        raise LayoutOperationError("local_modes cannot hold replication (negative) entries")
    threads = tuple(factor[m] if m >= 0 else Factor(-1, -m, 0) for m in spatial_modes)
    locs = tuple(factor[m] for m in local_modes)
    return canonicalize_layout(RegisterLayout(shape, threads or NONE, locs or NONE))


def _modes(layout: RegisterLayout):
    """(mode_shape, spatial_modes, local_modes) of a canonical layout."""
    lay = canonicalize_layout(layout)
    facs = [f for f in lay.threads + lay.locals if f.dim >= 0]
    per_dim = [sorted((f for f in facs if f.dim == d), key=lambda f: -f.stride) for d in
               range(len(lay.shape))]  # fmt: skip
    index, mode_shape = {}, []
    for fs in per_dim:
        for f in fs:
            index[f] = len(mode_shape)
            mode_shape.append(f.extent)
    spatial_modes = [index[f] if f.dim >= 0 else -f.extent for f in lay.threads if f.extent > 1]
    local_modes = [index[f] for f in lay.locals if f.extent > 1]
    return mode_shape, spatial_modes, local_modes


def auto_local_spatial(num_threads: int, shape) -> RegisterLayout:
    """``local(..).spatial(..)`` over ``num_threads`` threads: the threads split greedily from
    the last dim (gcd of what is left and the dim); threads left over replicate."""
    shape = _shape(tuple(shape))
    left, sp = int(num_threads), [1] * len(shape)
    for d in reversed(range(len(shape))):
        sp[d] = math.gcd(left, shape[d])
        left //= sp[d]
    out = compose(local(*(n // s for n, s in zip(shape, sp))), spatial(*sp))
    if left > 1:
        out = RegisterLayout(out.shape, (Factor(-1, left, 0),) + out.threads, out.locals)
        out = canonicalize_layout(out)
    return out


def _unify(a: RegisterLayout, rank: int) -> RegisterLayout:
    """``a`` with size-1 dims prepended up to ``rank``."""
    k = rank - len(a.shape)
    if k <= 0:
        return a

    def sh(f: Factor) -> Factor:
        return f if f.dim < 0 else Factor(f.dim + k, f.extent, f.stride)

    return RegisterLayout(
        (1,) * k + a.shape, tuple(map(sh, a.threads)), tuple(map(sh, a.locals)), a.kind
    )


def compose(outer: RegisterLayout, inner: RegisterLayout) -> RegisterLayout:
    """``outer * inner``: every element of ``outer`` replaced by an ``inner`` tile (ranks
    unified by prepending size-1 dims; outer modes precede inner modes in every dim and list)."""
    rank = max(len(outer.shape), len(inner.shape))
    outer, inner = _unify(outer, rank), _unify(inner, rank)

    def scaled(f: Factor) -> Factor:
        return f if f.dim < 0 else Factor(f.dim, f.extent, f.stride * inner.shape[f.dim])

    shape = tuple(a * b for a, b in zip(outer.shape, inner.shape))
    threads = tuple(map(scaled, outer.threads)) + inner.threads
    locs = tuple(map(scaled, outer.locals)) + inner.locals
    return canonicalize_layout(RegisterLayout(shape, threads, locs))


def _peel(lhs: tuple[Factor, ...], rhs: tuple[Factor, ...]) -> list[Factor] | None:
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


def divide(lhs: RegisterLayout, rhs: RegisterLayout) -> RegisterLayout:
    """``lhs / rhs``: the layout ``r`` with ``compose(r, rhs) == lhs``.

    Raises:
        LayoutOperationError: no such ``r``.
    """
    rank = max(len(lhs.shape), len(rhs.shape))
    a, b = canonicalize_layout(_unify(lhs, rank)), canonicalize_layout(_unify(rhs, rank))
    fail = LayoutOperationError(f"{describe(lhs)} is not a composition with {describe(rhs)}")
    if any(x % y for x, y in zip(a.shape, b.shape)):
        raise fail
    shape = tuple(x // y for x, y in zip(a.shape, b.shape))
    threads, locs = _peel(a.threads, b.threads), _peel(a.locals, b.locals)
    if threads is None or locs is None:
        raise fail

    def unscaled(f: Factor) -> Factor:
        if f.dim < 0:
            return f
        if f.stride % b.shape[f.dim]:
            raise fail
        return Factor(f.dim, f.extent, f.stride // b.shape[f.dim])

    r = canonicalize_layout(
        RegisterLayout(
            shape, tuple(map(unscaled, threads)) or NONE, tuple(map(unscaled, locs)) or NONE
        )
    )
    if compose(r, b) != a:
        raise fail
    return r


def concat(lhs: RegisterLayout, rhs: RegisterLayout) -> RegisterLayout:
    """Juxtapose the dims: shape ``lhs.shape + rhs.shape``, lhs modes before rhs modes."""
    k = len(lhs.shape)

    def sh(f: Factor) -> Factor:
        return f if f.dim < 0 else Factor(f.dim + k, f.extent, f.stride)

    threads = lhs.threads + tuple(map(sh, rhs.threads))
    locs = lhs.locals + tuple(map(sh, rhs.locals))
    return canonicalize_layout(RegisterLayout(lhs.shape + rhs.shape, threads, locs))


def permute(layout: RegisterLayout, dims) -> RegisterLayout:
    """The layout with dims permuted (``out.shape[k] = layout.shape[dims[k]]``)."""
    dims = tuple(dims)
    if sorted(dims) != list(range(len(layout.shape))):
        raise LayoutOperationError(
            f"permute dims {list(dims)} of a rank-{len(layout.shape)} layout"
        )
    return canonicalize_layout(_permute(layout, dims))


def _split(f: Factor, lo: int, hi: int, row: list[int]):
    """Factor ``f`` (row-major flat stride ``lo``, extent spanning to ``hi``) cut at the new
    dims' boundaries ``row``: [(new dim, extent, stride)] outer first, or None."""
    parts = []
    g, e = lo, f.extent
    while e > 1:
        k = min(i for i, r in enumerate(row) if r <= g)
        top = row[k - 1] if k > 0 else None
        if g % row[k]:
            return None
        if top is None or g * e <= top:
            parts.append((k, e, g // row[k]))
            break
        if top % g:
            return None
        a = top // g  # the part of f inside dim k
        if e % a:
            return None
        parts.append((k, a, g // row[k]))
        g, e = top, e // a
    return [Factor(k, e, s) for k, e, s in reversed(parts)]


def reshape(layout: RegisterLayout, shape) -> RegisterLayout:
    """The same threads and registers seen with a new ``shape`` (row-major order kept); modes
    crossing a new dim boundary are split.

    Raises:
        LayoutOperationError: a mode cannot be split at a boundary of ``shape``.
    """
    shape = _shape(tuple(shape))
    if math.prod(shape) != math.prod(layout.shape):
        raise LayoutOperationError(f"cannot reshape a {layout.shape} layout to {shape}")
    old_row = [math.prod(layout.shape[d + 1 :]) for d in range(len(layout.shape))]
    new_row = [math.prod(shape[d + 1 :]) for d in range(len(shape))]

    def conv(fs):
        out = []
        for f in fs:
            if f.dim < 0:
                out.append(f)
                continue
            g = f.stride * old_row[f.dim]
            parts = _split(f, g, g * f.extent, new_row)
            if parts is None:
                raise LayoutOperationError(
                    f"cannot reshape {describe(layout)} to {shape}: a mode of size {f.extent} "
                    "crosses a dim boundary"
                )
            out.extend(parts)
        return tuple(out)

    return canonicalize_layout(RegisterLayout(shape, conv(layout.threads), conv(layout.locals)))


def flatten(layout: RegisterLayout, start_dim: int = 0, end_dim: int = -1) -> RegisterLayout:
    """Dims ``start_dim..end_dim`` (inclusive) merged into one."""
    n = len(layout.shape)
    s, e = start_dim % n if n else 0, end_dim % n if n else 0
    shape = layout.shape[:s] + (math.prod(layout.shape[s : e + 1]),) + layout.shape[e + 1 :]
    return reshape(layout, shape)


def squeeze(layout: RegisterLayout, dims) -> RegisterLayout:
    """The layout without the size-1 dims ``dims``."""
    dims = [dims] if isinstance(dims, int) else list(dims)
    dims = [d % len(layout.shape) for d in dims]
    if any(layout.shape[d] != 1 for d in dims):
        raise LayoutOperationError(f"squeeze dims {dims} of {layout.shape} are not all size 1")
    return canonicalize_layout(drop_dims(canonicalize_layout(layout), dims))


def unsqueeze(layout: RegisterLayout, dims) -> RegisterLayout:
    """The layout with size-1 dims inserted at ``dims`` (positions in the result)."""
    dims = [dims] if isinstance(dims, int) else list(dims)
    n = len(layout.shape) + len(dims)
    dims = sorted(d % n for d in dims)
    shape = list(layout.shape)
    for d in dims:
        shape.insert(d, 1)
    return reshape(layout, shape)


def reduce(layout: RegisterLayout, dims, keepdims: bool = False) -> RegisterLayout:
    """The layout of a reduction over ``dims``: their spatial modes become replication, their
    local modes disappear."""
    dims = [dims] if isinstance(dims, int) else list(dims)
    dims = [d % len(layout.shape) for d in dims]
    out = canonicalize_layout(collapse(layout, dims))
    return out if keepdims else canonicalize_layout(drop_dims(out, dims))


def describe(layout: RegisterLayout) -> str:
    """A short text form: shape, modes and the spatial/local mode lists."""
    ms, sp, lc = _modes(layout)
    return (
        f"RegisterLayout(shape={list(layout.shape)}, mode_shape={ms}, spatial_modes={sp}, "
        f"local_modes={lc})"
    )


def get_spatial(layout: RegisterLayout, index) -> list[int]:
    """The threads (relative to the group) that hold element ``index``."""
    return [t for t, _ in _holders(layout, index)]


def get_local(layout: RegisterLayout, index) -> int:
    """The register slot that holds element ``index`` (the same in every holding thread)."""
    return _holders(layout, index)[0][1]


def _holders(layout: RegisterLayout, index) -> list[tuple[int, int]]:
    index = tuple(index)
    if len(index) != len(layout.shape) or any(not 0 <= i < n for i, n in zip(index, layout.shape)):
        raise LayoutOperationError(f"index {list(index)} is outside {list(layout.shape)}")

    def serial(fs, reps):
        vals = [0]
        for f in fs:
            if f.dim < 0:
                vals = [v * f.extent + r for v in vals for r in range(f.extent)] if reps else [
                    v * f.extent for v in vals]  # fmt: skip
            else:
                vals = [v * f.extent + (index[f.dim] // f.stride) % f.extent for v in vals]
        return vals

    threads, loc = serial(layout.threads, True), serial(layout.locals, False)[0]
    return [(t, loc) for t in threads]


def visualize(layout: RegisterLayout) -> str:
    """A text grid of a 1-D or 2-D layout: each cell ``thread:register`` (the first holder of a
    replicated element, ``+`` marking copies in other threads)."""
    shape = layout.shape if len(layout.shape) == 2 else (1, math.prod(layout.shape))
    flat = reshape(layout, shape) if shape != layout.shape else layout
    cells = []
    for i in range(shape[0]):
        row = []
        for j in range(shape[1]):
            h = _holders(flat, (i, j))
            row.append(f"{h[0][0]}:{h[0][1]}" + ("+" if len(h) > 1 else ""))
        cells.append(row)
    w = max(len(c) for r in cells for c in r)
    lines = [describe(layout)]
    lines += [" ".join(c.rjust(w) for c in r) for r in cells]
    return "\n".join(lines)
