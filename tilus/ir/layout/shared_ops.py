"""The user-facing shared layout functions: row/column major, the swizzles, slices, permutes."""

# A SharedLayout is row-major (optionally stored as a permutation of its dims) with one of the
# hardware swizzles on its 2-D leaves. `Swizzle` is the spec's general XOR form; the layouts
# that can be built here carry the 32/64/128-byte ones, which are Swizzle(base, bits, 3) with
# bits = log2(W / 16) on 16-byte units (CuTe Swizzle<bits, 4, 3> on byte offsets).

from __future__ import annotations

import math

from tilus.errors import LayoutOperationError
from tilus.ir.layout.shared import SharedLayout, Swizzle, choose_swizzle, normalized


def swizzle_of(layout: SharedLayout) -> Swizzle | None:
    """The layout's swizzle as an element-offset :class:`Swizzle` (None when unswizzled)."""
    if not layout.swizzle:
        return None
    k = int(math.log2(layout.elem_bytes))
    return Swizzle(4 - k, int(math.log2(layout.swizzle // 16)), 3)


def _shape(shape) -> tuple[int, ...]:
    if len(shape) == 1 and isinstance(shape[0], tuple | list):
        shape = tuple(shape[0])
    out = tuple(int(n) for n in shape)
    if not out or any(n < 1 for n in out):
        raise LayoutOperationError(f"shared layout dims must be positive, got {out}")
    return out


def shared_row_major(*shape, dtype_nbytes: int = 0) -> SharedLayout:
    """A row-major shared tile (element size bound by the tensor it is given to when 0)."""
    return SharedLayout(_shape(shape), dtype_nbytes)


def shared_column_major(*shape, dtype_nbytes: int = 0) -> SharedLayout:
    """A column-major shared tile (the first dim contiguous)."""
    shape = _shape(shape)
    return SharedLayout(shape, dtype_nbytes, 0, tuple(reversed(range(len(shape)))))


def shared_row_major_swizzle(shape, dtype_nbytes: int) -> SharedLayout:
    """A row-major tile whose 16-byte chunks are XORed with the row index (conflict-free
    ldmatrix and the TMA/wgmma K-major forms): the widest of the 32/64/128-byte swizzles a row
    fills; rows wider than 128 bytes are stored as 128-byte column blocks.

    Raises:
        LayoutOperationError: the rows are not 32, 64 or a multiple of 128 bytes wide, or the
            tile has fewer than 8 rows.
    """
    shape = _shape(tuple(shape))
    row = shape[-1] * dtype_nbytes
    sw = choose_swizzle(row) or (128 if row % 128 == 0 else 0)
    if len(shape) < 2 or not sw or shape[-2] % 8:
        raise LayoutOperationError(
            f"no swizzled shared layout for shape {list(shape)} of {dtype_nbytes}-byte elements "
            "(rows must be 32, 64 or a multiple of 128 bytes, with a multiple of 8 rows)"
        )
    return SharedLayout(shape, dtype_nbytes, sw)


def shared_permute(layout: SharedLayout, dims) -> SharedLayout:
    """The layout seen with dims permuted (``out.shape[k] = layout.shape[dims[k]]``)."""
    dims = tuple(dims)
    if sorted(dims) != list(range(len(layout.shape))):
        raise LayoutOperationError(
            f"permute dims {list(dims)} of a rank-{len(layout.shape)} layout"
        )
    if layout.swizzle:
        raise LayoutOperationError("permuting a swizzled shared layout is not supported")
    base = layout.perm if layout.perm is not None else tuple(range(len(dims)))
    shape = tuple(layout.shape[d] for d in dims)
    inv = [0] * len(dims)
    for k, d in enumerate(dims):
        inv[d] = k
    perm = tuple(inv[p] for p in base)
    return SharedLayout(
        shape, layout.elem_bytes, 0, None if perm == tuple(range(len(dims))) else perm
    )


def shared_slice(layout: SharedLayout, ndrop: int) -> SharedLayout:
    """The layout of a sub-tile indexed by ``ndrop`` leading integer indices."""
    try:
        return layout.slice(ndrop)
    except ValueError as e:
        raise LayoutOperationError(str(e)) from None


def shared_compose(lhs: SharedLayout, rhs: SharedLayout) -> SharedLayout:
    """Tiles of ``rhs`` laid out by ``lhs``: supported when ``lhs`` is row-major over leading
    dims only (its last ``rhs.ndim`` dims of size 1), which stacks copies of ``rhs``."""
    k = len(rhs.shape)
    lead = lhs.shape[: max(0, len(lhs.shape) - k)]
    tail = lhs.shape[len(lead) :]
    if lhs.perm is not None or lhs.swizzle or any(n != 1 for n in tail):
        raise LayoutOperationError(
            "shared_compose supports a row-major outer layout over leading dims only"
        )
    eb = rhs.elem_bytes or lhs.elem_bytes
    return SharedLayout(lead + rhs.shape, eb, rhs.swizzle, None if rhs.perm is None else tuple(
        range(len(lead))) + tuple(p + len(lead) for p in rhs.perm))  # fmt: skip


def shared_transpose(layout: SharedLayout) -> SharedLayout:
    """The last two dims swapped."""
    n = len(layout.shape)
    return shared_permute(layout, tuple(range(n - 2)) + (n - 1, n - 2))


def with_elem_bytes(layout: SharedLayout, nbytes: int) -> SharedLayout:
    """``layout`` for elements of ``nbytes`` (a layout built without a size gets it here).

    Raises:
        LayoutOperationError: the layout was built for a different element size.
    """
    if layout.elem_bytes in (0, nbytes):
        return normalized(
            SharedLayout(
                layout.shape, nbytes, layout.swizzle, layout.perm, layout.modes, layout.xor
            )
        )
    raise LayoutOperationError(
        f"the shared layout is for {layout.elem_bytes}-byte elements, the tile has {nbytes}"
    )


def shared_reshape(layout: SharedLayout, shape) -> SharedLayout:
    """The same storage seen with another shape of as many elements (row-major order kept).

    Raises:
        LayoutOperationError: the sizes differ, or the layout is permuted, strided, or
            swizzled with a new last dim (its swizzle would then map differently).
    """
    shape = _shape(tuple(shape))
    if math.prod(shape) != math.prod(layout.shape):
        raise LayoutOperationError(f"cannot reshape {list(layout.shape)} to {list(shape)}")
    if layout.perm is not None or layout.modes is not None:
        raise LayoutOperationError("reshape of a permuted or strided shared layout")
    keep = 1 if layout.col_blocks == 1 else 2  # the dims the hardware swizzle depends on
    if layout.swizzle and (len(shape) < 2 or shape[-keep:] != layout.shape[-keep:]):
        raise LayoutOperationError(
            f"reshape of a {layout.swizzle}B-swizzled layout must keep its last "
            f"{'dim' if keep == 1 else 'two dims'} {list(layout.shape[-keep:])}"
        )
    return SharedLayout(shape, layout.elem_bytes, layout.swizzle, None, None, layout.xor)


def shared_unsqueeze(layout: SharedLayout, dims) -> SharedLayout:
    """The layout with size-1 dims inserted at ``dims`` (positions in the result)."""
    dims = [dims] if isinstance(dims, int) else list(dims)
    n = len(layout.shape) + len(dims)
    dims = sorted(d % n for d in dims)
    shape = list(layout.shape)
    for d in dims:
        shape.insert(d, 1)
    if layout.perm is None and layout.modes is None:
        return shared_reshape(layout, shape)
    if layout.modes is not None:  # a size-1 dim is a mode of size 1
        return SharedLayout.create(
            shape, (*layout.modes[0], 1), (*layout.modes[1], 0), layout.xor, layout.elem_bytes
        )
    old = [d for d in range(n) if d not in dims]  # result dim of each original dim
    perm = [*dims, *(old[p] for p in layout.perm)]  # size-1 dims stored outermost
    return SharedLayout(tuple(shape), layout.elem_bytes, 0, tuple(perm))
