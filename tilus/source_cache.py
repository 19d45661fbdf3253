"""Kernel source files as Python imported them: edits made after the import do not leak in."""

# tilus transpiles a kernel from its source text, read when the kernel is first called. If the
# file was edited after its module was imported, the function objects still carry the old line
# numbers, and reading the file anew parsed some other lines as the kernel (seen: a test run
# that read a method half way through an edit failed with "name `wdtype` is not defined"). A
# class derived from ``tilus.Script`` or ``tilus.Class`` therefore snapshots its file's lines
# when it is defined (the module's import, or a reload), and every reader of kernel source
# (the front end, error snippets, comments in generated CUDA) takes the snapshot when there is
# one, so tilus sees what Python runs. Files without a kernel class (plain helper functions)
# are read as they are now; the front end then checks that the lines still define the function.

from __future__ import annotations

import inspect
import linecache
import weakref

_SNAPSHOTS: dict[str, list[str]] = {}
#: (file, qualname) of a plain base class of a kernel class -> the class object last seen
_BASES: dict[tuple[str, str], weakref.ref] = {}


def _file_of(cls) -> str | None:
    try:
        return inspect.getsourcefile(cls)
    except (TypeError, OSError):
        return None


def _take(file: str) -> None:
    linecache.checkcache(file)
    lines = linecache.getlines(file)
    if lines:
        _SNAPSHOTS[file] = list(lines)


def _at_module_level(frame) -> bool:
    """Whether the class statement being run (above ``__init_subclass__`` frames) is a module's
    top level: an import or a reload, which runs the file as it is now."""
    while frame is not None and frame.f_code.co_name == "__init_subclass__":
        frame = frame.f_back
    return frame is not None and frame.f_code.co_name == "<module>"


def snapshot(cls, frame=None) -> None:
    """Keep the lines of the files that define kernel class ``cls`` and its plain (mixin) bases,
    called when ``cls`` is created (``frame``: the caller's frame). A class statement at a
    module's top level (an import or a reload) takes its file anew; one inside a function keeps
    the file's first snapshot, as its module's other classes do. Files without source (a
    notebook cell) are skipped."""
    file = _file_of(cls)
    if file and (file not in _SNAPSHOTS or _at_module_level(frame)):
        _take(file)
    for base in cls.__mro__[1:]:
        if base.__module__.startswith(("tilus.", "builtins")):
            continue
        bfile = _file_of(base)
        if not bfile:
            continue
        # a plain base was imported just before the class that uses it; a new class object of
        # a name seen before means its module ran again (a reload): take its file anew
        key = (bfile, base.__qualname__)
        seen = _BASES.get(key)
        if bfile not in _SNAPSHOTS or (seen is not None and seen() is not base):
            _take(bfile)
        _BASES[key] = weakref.ref(base)


def lines(file: str) -> list[str]:
    """The lines of ``file`` as imported (its snapshot), else as they are now (``linecache``)."""
    snap = _SNAPSHOTS.get(file)
    return snap if snap is not None else linecache.getlines(file)


def line(file: str, lineno: int) -> str:
    """Line ``lineno`` (1-based) of ``file`` as imported; empty when there is none."""
    text = lines(file)
    return text[lineno - 1] if 1 <= lineno <= len(text) else ""


def has_snapshot(file: str) -> bool:
    """Whether ``file``'s lines were kept when one of its kernel classes was defined."""
    return file in _SNAPSHOTS
