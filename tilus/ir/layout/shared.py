"""Shared-memory layouts: row-major tiles with the hardware swizzles TMA and WGMMA use."""

from __future__ import annotations

import math
from dataclasses import dataclass

SWIZZLES = (0, 32, 64, 128)


def choose_swizzle(inner_bytes: int) -> int:
    """The widest hardware swizzle (bytes) whose span a row of ``inner_bytes`` fills exactly:
    128 for rows of 128 bytes, 64, 32; 0 (none) when the row is not one of those widths."""
    return inner_bytes if inner_bytes in (32, 64, 128) else 0


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

    def __post_init__(self):
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
        return math.prod(self.shape) * self.elem_bytes

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
        return SharedLayout(self.shape[ndrop:], self.elem_bytes, self.swizzle, self.perm)
