"""The user-facing register layout functions: primitives, composition, division, reshapes."""

# Every function returns the one RegisterLayout class in canonical form (LayoutAlgebra), so
# layouts built in different ways compare equal when they map alike.

from __future__ import annotations

import math

from tilus.errors import LayoutOperationError
from tilus.ir.layout.algebra import NONE, Factor, dims_of
from tilus.ir.layout.derived import collapse, drop_dims
from tilus.ir.layout.register import RegisterLayout
from tilus.ir.layout.register import permute as _permute
from tilus.ir.layout.register import replicated as _replicated

_UNIT = RegisterLayout((), NONE, NONE)


def canonicalize_layout(layout: RegisterLayout) -> RegisterLayout:
    """The canonical form of ``layout`` (size-1 modes pruned, contiguous modes merged)."""
    return layout.canonical()


def same_layout(a: RegisterLayout, b: RegisterLayout) -> bool:
    """Whether two layouts put every element in the same threads and registers."""
    return a.same_as(b)


def spatial(*shape, ranks=None) -> RegisterLayout:
    """``prod(shape)`` threads over a tile of ``shape``, one element each, thread index
    row-major over the dims (``ranks`` reorders: ``ranks[d]`` is dim d's significance)."""
    return _UNIT.spatial(*shape, ranks=ranks)


def local(*shape, ranks=None) -> RegisterLayout:
    """One thread holding the whole tile, registers row-major (``ranks`` reorders)."""
    return _UNIT.local(*shape, ranks=ranks)


def column_spatial(*shape) -> RegisterLayout:
    """:func:`spatial` with the thread index column-major (the first dim varies fastest)."""
    return _UNIT.column_spatial(*shape)


def column_local(*shape) -> RegisterLayout:
    """:func:`local` with the registers column-major (the first dim varies fastest)."""
    return _UNIT.column_local(*shape)


def replicated(*shape, num_workers: int | None = None) -> RegisterLayout:
    """Every one of ``num_workers`` threads holds the whole tile (registers row-major).

    ``replicated(shape_tuple, num_threads)`` is accepted too.
    """
    if num_workers is None and len(shape) == 2 and isinstance(shape[0], tuple | list):
        shape, num_workers = (tuple(shape[0]),), shape[1]
    if num_workers is None or num_workers < 1:
        raise LayoutOperationError("replicated(*shape, num_workers) needs num_workers >= 1")
    return _replicated(dims_of(shape), int(num_workers))


def compose(outer: RegisterLayout, inner: RegisterLayout) -> RegisterLayout:
    """``outer * inner``: every element of ``outer`` replaced by an ``inner`` tile."""
    return outer.compose(inner)


def divide(lhs: RegisterLayout, rhs: RegisterLayout) -> RegisterLayout:
    """``lhs / rhs``: the ``r`` with ``compose(r, rhs) == lhs`` (else LayoutOperationError)."""
    return lhs.divide(rhs)


def left_divide(layout: RegisterLayout, lhs_divisor: RegisterLayout) -> RegisterLayout:
    """The ``r`` with ``compose(lhs_divisor, r) == layout`` (else LayoutOperationError)."""
    return layout.left_divide(lhs_divisor)


def locate_at(layout: RegisterLayout, global_indices, spatial_index: int) -> bool:
    """Whether thread ``spatial_index`` (relative to the group) holds element
    ``global_indices`` (one of its holders, when the layout replicates it)."""
    index = tuple(int(i) for i in global_indices)
    if len(index) != len(layout.shape):
        raise LayoutOperationError(
            f"{len(index)} indices for a layout of shape {list(layout.shape)}"
        )
    return int(spatial_index) in layout.get_spatial(index)


def visualize(layout: RegisterLayout) -> str:
    """A text grid of which thread and register hold each element."""
    return layout.visualize()


def _dim_modes(shape, mode_shape) -> list[list[int]]:
    """Mode indices of every dim: ``mode_shape`` consumed in order, each dim's product exact."""
    out, k = [], 0
    for n in shape:
        modes, p = [], 1
        while p < n and k < len(mode_shape):
            p *= mode_shape[k]
            modes.append(k)
            k += 1
        if p != n:
            raise LayoutOperationError(f"mode_shape {list(mode_shape)} does not split {shape}")
        out.append(modes)
    if any(m != 1 for m in mode_shape[k:]):
        raise LayoutOperationError(f"mode_shape {list(mode_shape)} has modes beyond {shape}")
    return out


def register_layout(shape, mode_shape, spatial_modes, local_modes) -> RegisterLayout:
    """The layout of the spec's data form: ``shape`` split row-major into ``mode_shape``;
    threads the row-major serialization of ``spatial_modes`` (``-k``: replication by k),
    registers that of ``local_modes``. Canonicalized."""
    shape, mode_shape = dims_of(shape), tuple(int(m) for m in mode_shape)
    factor = {}
    for d, modes in enumerate(_dim_modes(shape, mode_shape)):
        stride = 1
        for m in reversed(modes):
            factor[m] = Factor(d, mode_shape[m], stride)
            stride *= mode_shape[m]
    used = [m for m in list(spatial_modes) + list(local_modes) if m >= 0]
    want = {m for m, n in enumerate(mode_shape) if n > 1}
    if len(used) != len(set(used)) or not want <= set(used) or not set(used) <= set(factor):
        raise LayoutOperationError(
            f"spatial_modes {list(spatial_modes)} and local_modes {list(local_modes)} must "
            f"name every mode of {list(mode_shape)} exactly once"
        )
    if any(m < 0 for m in local_modes):
        raise LayoutOperationError("local_modes cannot hold replication (negative) entries")
    threads = tuple(factor[m] if m >= 0 else Factor(-1, -m, 0) for m in spatial_modes)
    locs = tuple(factor[m] for m in local_modes)
    return RegisterLayout(shape, threads or NONE, locs or NONE).canonical()


def auto_local_spatial(num_threads: int, shape) -> RegisterLayout:
    """``local(..).spatial(..)`` over ``num_threads`` threads: the threads split greedily from
    the last dim (gcd of what is left and the dim); threads left over replicate."""
    shape = dims_of(tuple(shape))
    left, sp = int(num_threads), [1] * len(shape)
    for d in reversed(range(len(shape))):
        sp[d] = math.gcd(left, shape[d])
        left //= sp[d]
    out = local(*(n // s for n, s in zip(shape, sp))).spatial(*sp)
    if left > 1:
        out = RegisterLayout(out.shape, (Factor(-1, left, 0),) + out.threads, out.locals)
    return out.canonical()


def concat(lhs: RegisterLayout, rhs: RegisterLayout) -> RegisterLayout:
    """Juxtapose the dims: shape ``lhs.shape + rhs.shape``, lhs modes before rhs modes."""
    k = len(lhs.shape)

    def sh(f: Factor) -> Factor:
        return f if f.dim < 0 else Factor(f.dim + k, f.extent, f.stride)

    threads = lhs.threads + tuple(map(sh, rhs.threads))
    locs = lhs.locals + tuple(map(sh, rhs.locals))
    return RegisterLayout(lhs.shape + rhs.shape, threads, locs).canonical()


def permute(layout: RegisterLayout, dims) -> RegisterLayout:
    """The layout with dims permuted (``out.shape[k] = layout.shape[dims[k]]``)."""
    dims = tuple(dims)
    if sorted(dims) != list(range(len(layout.shape))):
        raise LayoutOperationError(
            f"permute dims {list(dims)} of a rank-{len(layout.shape)} layout"
        )
    return _permute(layout, dims).canonical()


def _split(f: Factor, g: int, row: list[int]) -> list[Factor] | None:
    """Factor ``f`` at row-major flat stride ``g`` cut at the new dims' boundaries (``row``:
    the new dims' row-major strides): its pieces, outer first; None when a cut splits a digit."""
    parts, e = [], f.extent
    while e > 1:
        k = min(i for i, r in enumerate(row) if r <= g)
        if g % row[k]:
            return None
        top = row[k - 1] if k > 0 else None
        if top is None or g * e <= top:
            parts.append(Factor(k, e, g // row[k]))
            break
        if top % g or e % (top // g):
            return None
        a = top // g  # the part of f inside dim k
        parts.append(Factor(k, a, g // row[k]))
        g, e = top, e // a
    return parts[::-1]


def reshape(layout: RegisterLayout, shape) -> RegisterLayout:
    """The same threads and registers seen with a new ``shape`` (row-major order kept); modes
    crossing a new dim boundary are split (else LayoutOperationError)."""
    shape = dims_of(tuple(shape))
    if math.prod(shape) != math.prod(layout.shape):
        raise LayoutOperationError(f"cannot reshape a {layout.shape} layout to {shape}")
    old_row = [math.prod(layout.shape[d + 1 :]) for d in range(len(layout.shape))]
    new_row = [math.prod(shape[d + 1 :]) for d in range(len(shape))]

    def conv(fs):
        out = []
        for f in fs:
            if f.dim < 0 or f.extent == 1:
                out.append(Factor(-1, f.extent, 0))
                continue
            parts = _split(f, f.stride * old_row[f.dim], new_row)
            if parts is None:
                raise LayoutOperationError(
                    f"cannot reshape {layout.describe()} to {list(shape)}: a mode of size "
                    f"{f.extent} crosses a dim boundary"
                )
            out.extend(parts)
        return tuple(out)

    return RegisterLayout(shape, conv(layout.threads), conv(layout.locals)).canonical()


def flatten(layout: RegisterLayout, start_dim: int = 0, end_dim: int = -1) -> RegisterLayout:
    """Dims ``start_dim..end_dim`` (inclusive) merged into one."""
    n = len(layout.shape)
    s, e = start_dim % n, end_dim % n
    shape = layout.shape[:s] + (math.prod(layout.shape[s : e + 1]),) + layout.shape[e + 1 :]
    return reshape(layout, shape)


def _dim_list(dims, n: int) -> list[int]:
    return [d % n for d in ([dims] if isinstance(dims, int) else list(dims))]


def squeeze(layout: RegisterLayout, dims) -> RegisterLayout:
    """The layout without the size-1 dims ``dims``."""
    dims = _dim_list(dims, len(layout.shape))
    if any(layout.shape[d] != 1 for d in dims):
        raise LayoutOperationError(f"squeeze dims {dims} of {layout.shape} are not all size 1")
    return drop_dims(layout.canonical(), dims).canonical()


def unsqueeze(layout: RegisterLayout, dims) -> RegisterLayout:
    """The layout with size-1 dims inserted at ``dims`` (positions in the result)."""
    n = len(layout.shape) + (1 if isinstance(dims, int) else len(dims))
    shape = list(layout.shape)
    for d in sorted(_dim_list(dims, n)):
        shape.insert(d, 1)
    return reshape(layout, shape)


def reduce(layout: RegisterLayout, dims, keepdims: bool = False) -> RegisterLayout:
    """The layout of a reduction over ``dims``: their spatial modes become replication, their
    local modes disappear."""
    dims = _dim_list(dims, len(layout.shape))
    out = collapse(layout, dims).canonical()
    return out if keepdims else drop_dims(out, dims).canonical()


def reduce_to(layout: RegisterLayout, shape) -> RegisterLayout:
    """The layout of a tile of ``shape`` that broadcasts (NumPy rules) to ``layout.shape``,
    each thread holding what it reads of it: the extra leading dims are reduced away and the
    dims of size 1 reduced in place (their spatial modes become replication).

    Raises:
        LayoutOperationError: ``shape`` does not broadcast to ``layout.shape``.
    """
    shape = tuple(int(n) for n in shape)
    lead = len(layout.shape) - len(shape)
    if lead < 0 or any(n not in (1, m) for n, m in zip(shape, layout.shape[lead:])):
        raise LayoutOperationError(
            f"shape {list(shape)} does not broadcast to the layout's {list(layout.shape)}"
        )
    keep = [lead + d for d, n in enumerate(shape) if n == 1 and layout.shape[lead + d] != 1]
    out = reduce(layout, keep, keepdims=True) if keep else layout.canonical()
    return reduce(out, list(range(lead))) if lead else out
