"""Helpers for tilus's own tests and for users testing kernels: source-marker lookup."""

from __future__ import annotations

import inspect


def marker_line(obj, marker: str) -> int:
    """The line number of the first source line of ``obj`` that contains ``marker``.

    Refusal tests use it to assert the line an error reports without hard-coding numbers.
    """
    lines, first = inspect.getsourcelines(obj)
    for i, text in enumerate(lines):
        if marker in text:
            return first + i
    raise AssertionError(f"marker {marker!r} not found in {obj}")
