"""Shared-memory layouts: row-major tiles with the hardware swizzles TMA and WGMMA use."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

SWIZZLES = (0, 32, 64, 128)


def choose_swizzle(inner_bytes: int) -> int:
    """The widest hardware swizzle (bytes) whose span a row of ``inner_bytes`` fills exactly:
    128 for rows of 128 bytes, 64, 32; 0 (none) when the row is not one of those widths."""
    return inner_bytes if inner_bytes in (32, 64, 128) else 0


@dataclass(frozen=True)
class Swizzle:
    """XOR the ``bits``-bit field at bit ``base + shift`` of an offset into the field at bit
    ``base`` (an element offset; :meth:`to_byte_swizzle` moves it to bytes)."""

    base: int
    bits: int
    shift: int

    def __call__(self, offset):
        """The swizzled offset (an int or a NumPy array of them)."""
        mask = (1 << self.bits) - 1
        return offset ^ (((offset >> (self.base + self.shift)) & mask) << self.base)

    def to_byte_swizzle(self, nbytes: int) -> Swizzle:
        """The same swizzle on byte offsets of ``nbytes``-byte elements."""
        from tilus.errors import LayoutOperationError

        k = int(math.log2(nbytes))
        if 1 << k != nbytes:
            raise LayoutOperationError(f"element size {nbytes} is not a power of two")
        return Swizzle(self.base + k, self.bits, self.shift)


@dataclass(frozen=True)
class SharedLayout:
    """A tile of ``shape`` stored row-major, its 2-D leaves swizzled.

    With ``swizzle`` W bytes (32/64/128) each row of the innermost two dims spans W bytes (the
    K-major canonical form of TMA boxes and WGMMA operands): the 16-byte chunk index of byte
    offset ``o`` is XORed with ``(o >> 7) % (W // 16)``, repeating every ``8 * W`` bytes; the
    leaf must start at a multiple of ``8 * W`` bytes (1024 for 128B).

    A leaf whose rows are a multiple of W bytes wide is stored as ``col_blocks`` column blocks
    of W bytes, one after the other, each a swizzled ``[rows, W / elem_bytes]`` leaf (how TMA
    moves a tile wider than its swizzle span: one box per block). Element ``(r, c)`` of a leaf
    of R rows sits at ``(c // cb) * R * W + r * W + (c % cb) * elem_bytes``, ``cb = W /
    elem_bytes``; with one block that is plain row-major.
    """

    shape: tuple[int, ...]
    elem_bytes: int
    swizzle: int = 0
    # storage order: the tile is stored row-major as its dims ``perm`` (None: as is); built by
    # shared_column_major / shared_permute; the CUDA backend lowers only perm None so far
    perm: tuple[int, ...] | None = None
    # a general layout (SharedLayout.create): (mode_shape, mode_strides) in elements, every dim
    # split row-major into modes; and an arbitrary element-offset XOR swizzle. Only the
    # interpreter takes these (the CUDA backend refuses them where the layout is given).
    modes: tuple[tuple[int, ...], tuple[int, ...]] | None = None
    xor: Swizzle | None = None

    def __post_init__(self):
        if (self.modes is not None or self.xor is not None) and (self.swizzle or self.perm):
            raise ValueError("a strided or XOR-swizzled shared layout has no other swizzle/perm")
        if self.swizzle not in SWIZZLES:
            raise ValueError(f"swizzle must be one of {SWIZZLES}, got {self.swizzle}")
        if self.perm is not None and self.swizzle:
            raise ValueError("a permuted shared layout cannot be swizzled")
        if self.swizzle and (len(self.shape) < 2 or self.row_bytes % self.swizzle):
            raise ValueError(
                f"a {self.swizzle}B swizzle needs 2-D leaves with rows of a multiple of "
                f"{self.swizzle} bytes, got shape {self.shape} of {self.elem_bytes}-byte elements"
            )

    @property
    def row_bytes(self) -> int:
        """Bytes of one row of the innermost dim."""
        return self.shape[-1] * self.elem_bytes

    @property
    def col_blocks(self) -> int:
        """Column blocks per leaf: ``row_bytes / swizzle`` (1 when unswizzled)."""
        return self.row_bytes // self.swizzle if self.swizzle else 1

    @property
    def block_cols(self) -> int:
        """Elements of one row of a column block."""
        return self.shape[-1] // self.col_blocks

    @property
    def block_bytes(self) -> int:
        """Bytes of one column block of a leaf (its rows times the swizzle span)."""
        return self.shape[-2] * self.row_bytes // self.col_blocks if self.swizzle else self.nbytes

    @property
    def nbytes(self) -> int:
        """Bytes of the whole tile."""
        return self.count_size() * self.elem_bytes

    @classmethod
    def create(cls, shape, mode_shape, mode_strides, optional_swizzle=None, dtype_nbytes=0):
        """The layout storing element ``i`` at ``swizzle(sum(mode_index * stride))``: each dim
        of ``shape`` split row-major into consecutive ``mode_shape`` entries, ``mode_strides``
        in elements, ``optional_swizzle`` a :class:`Swizzle` on element offsets (None: none).
        A row-major layout with one of the 32/64/128-byte hardware swizzles comes back as that
        layout (the CUDA backend honours it); any other takes the interpreter only.

        Raises:
            LayoutOperationError: the modes do not split the shape.
        """
        from tilus.errors import LayoutOperationError

        shape, ms, st = (tuple(int(x) for x in v) for v in (shape, mode_shape, mode_strides))
        rest, p, n = list(ms), 1, 1
        for n in shape:  # each dim takes the next modes whose product is the dim
            p = 1
            while p < n and rest:
                p *= rest.pop(0)
            while rest and rest[0] == 1 and p == n:
                rest.pop(0)
            if p != n:
                break
        if len(ms) != len(st) or rest or p != n or any(x < 1 for x in ms + shape):
            raise LayoutOperationError(
                f"modes {list(ms)} (strides {list(st)}) do not split shape {list(shape)}"
            )
        row = SharedLayout(ms, 1)._row_strides()
        modes = None if tuple(st) == row else (ms, st)
        sw = optional_swizzle if optional_swizzle and optional_swizzle.bits else None
        return normalized(cls(shape, int(dtype_nbytes), 0, None, modes, sw))

    def with_swizzle(self, swizzle: Swizzle) -> SharedLayout:
        """This (unswizzled, unpermuted) layout with ``swizzle`` applied to element offsets."""
        from tilus.errors import LayoutOperationError

        if self.swizzle or self.perm is not None or self.xor is not None:
            raise LayoutOperationError("the layout is already swizzled or permuted")
        return normalized(SharedLayout(self.shape, self.elem_bytes, 0, None, self.modes, swizzle))

    @property
    def general(self) -> bool:
        """Whether this is a strided or XOR-swizzled layout only the interpreter takes."""
        return self.modes is not None or self.xor is not None

    def count_size(self) -> int:
        """Elements to allocate: one more than the largest element offset."""
        if not self.general:
            return math.prod(self.shape)
        return int(self.as_numpy_grid().max()) + 1

    def as_numpy_grid(self) -> np.ndarray:
        """An integer array of ``shape``: the element offset at which each element is stored."""
        if self.general:
            ms, st = self.modes if self.modes is not None else (self.shape, self._row_strides())
            grid = np.zeros((), np.int64)
            for n, s in zip(ms, st):
                grid = grid[..., None] + np.arange(n, dtype=np.int64) * s
            grid = grid.reshape(self.shape)
            return self.xor(grid) if self.xor is not None else grid
        if self.swizzle and not self.elem_bytes:
            raise ValueError("a swizzled layout needs its element size to give offsets")
        lay = self if self.elem_bytes else SharedLayout(self.shape, 1, 0, self.perm)
        out = np.zeros(self.shape, np.int64)
        for c in np.ndindex(*self.shape):
            out[c] = lay.offset(c) // lay.elem_bytes
        return out

    def _row_strides(self) -> tuple[int, ...]:
        out, s = [], 1
        for n in reversed(self.shape):
            out.append(s)
            s *= n
        return tuple(out[::-1])

    def strides_bytes(self) -> tuple[int, ...]:
        """Row-major byte strides of every dim (before swizzling)."""
        out, s = [], self.elem_bytes
        for n in reversed(self.shape):
            out.append(s)
            s *= n
        return tuple(out[::-1])

    def apply_swizzle(self, offset: int) -> int:
        """The physical byte offset of linear byte offset ``offset`` (from an aligned base)."""
        if not self.swizzle:
            return offset
        mask = self.swizzle // 16 - 1
        return offset ^ (((offset >> 7) & mask) << 4)

    def offset(self, coords) -> int:
        """The physical byte offset of element ``coords``."""
        if self.general:
            return int(self.as_numpy_grid()[tuple(coords)]) * self.elem_bytes
        if self.perm is not None:
            stored = SharedLayout(tuple(self.shape[p] for p in self.perm), self.elem_bytes)
            return stored.offset(tuple(coords[p] for p in self.perm))
        strides = self.strides_bytes()
        if self.col_blocks == 1:
            return self.apply_swizzle(sum(c * s for c, s in zip(coords, strides)))
        lead = sum(c * s for c, s in zip(coords[:-2], strides[:-2]))
        r, c, cb = coords[-2], coords[-1], self.block_cols  # rows stacked per column block
        leaf = (c // cb) * self.block_bytes + r * self.swizzle + (c % cb) * self.elem_bytes
        return self.apply_swizzle(lead + leaf)

    def slice(self, ndrop: int) -> SharedLayout:
        """The layout of a sub-tile indexed by ``ndrop`` leading integer indices."""
        if self.perm is not None and ndrop:
            raise ValueError("slicing a permuted shared layout is not supported")
        if self.general and ndrop:
            raise ValueError("slicing a strided or XOR-swizzled shared layout is not supported")
        return SharedLayout(self.shape[ndrop:], self.elem_bytes, self.swizzle, self.perm)


def normalized(layout: SharedLayout) -> SharedLayout:
    """A row-major layout whose XOR swizzle is one of the hardware ones, as that hardware
    layout (``swizzle`` W bytes); any other layout unchanged."""
    sw, eb, shape = layout.xor, layout.elem_bytes, layout.shape
    if sw is None or layout.modes is not None or not eb or len(shape) < 2 or eb & (eb - 1):
        return layout
    k = eb.bit_length() - 1
    for w in (32, 64, 128):
        if shape[-1] * eb == w and sw == Swizzle(4 - k, (w // 16).bit_length() - 1, 3):
            return SharedLayout(shape, eb, w)
    return layout
