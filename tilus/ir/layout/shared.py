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

    With ``swizzle`` W bytes (32/64/128) each row of the innermost two dims spans exactly W
    bytes (the K-major canonical form of TMA boxes and WGMMA operands): the 16-byte chunk index
    of byte offset ``o`` is XORed with ``(o >> 7) % (W // 16)``, repeating every ``8 * W``
    bytes; the leaf must start at a multiple of ``8 * W`` bytes (1024 for 128B).
    """

    shape: tuple[int, ...]
    elem_bytes: int
    swizzle: int = 0

    def __post_init__(self):
        if self.swizzle not in SWIZZLES:
            raise ValueError(f"swizzle must be one of {SWIZZLES}, got {self.swizzle}")
        if self.swizzle and self.row_bytes != self.swizzle:
            raise ValueError(
                f"a {self.swizzle}B swizzle needs {self.swizzle}-byte rows, got {self.row_bytes}"
            )

    @property
    def row_bytes(self) -> int:
        """Bytes of one row of the innermost dim."""
        return self.shape[-1] * self.elem_bytes

    @property
    def nbytes(self) -> int:
        """Bytes of the whole tile."""
        return math.prod(self.shape) * self.elem_bytes

    @property
    def atom_bytes(self) -> int:
        """The swizzle pattern's period in bytes (a leaf must be aligned to it)."""
        return 8 * self.swizzle if self.swizzle else 16

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
        lin = sum(c * s for c, s in zip(coords, self.strides_bytes()))
        return self.apply_swizzle(lin)

    def slice(self, ndrop: int) -> SharedLayout:
        """The layout of a sub-tile indexed by ``ndrop`` leading integer indices."""
        return SharedLayout(self.shape[ndrop:], self.elem_bytes, self.swizzle)
