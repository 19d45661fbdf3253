"""Small helpers usable on the host and inside kernels."""

from __future__ import annotations


def cdiv(a, b):
    """Ceiling division ``(a + b - 1) // b``; works on ints and on kernel scalars."""
    return (a + b - 1) // b
