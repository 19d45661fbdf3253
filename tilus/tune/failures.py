"""Why configs fail: refusals versus errors, the user's file:line, one-line summaries."""

from __future__ import annotations

import os
import re
import sys
import sysconfig
import traceback
from collections import Counter

from tilus.errors import SourceLoc, TilusCompileError, TilusError, TilusProgramError

_TILUS_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _library_dirs() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    dirs = {paths.get(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    dirs |= {sys.prefix, sys.base_prefix, _TILUS_DIR}
    return tuple(os.path.abspath(d) + os.sep for d in dirs if d)


def is_refusal(exc: BaseException) -> bool:
    """Whether a config failed because tilus refused it (a ``TilusProgramError``: a limit, a
    layout, a construct the target lacks), not because something broke."""
    return isinstance(exc, TilusProgramError)


def user_location(exc: BaseException) -> SourceLoc | None:
    """Where in the user's code ``exc`` happened: a tilus error's own location, else the
    innermost traceback frame outside tilus, the standard library and installed packages
    (else the innermost frame)."""
    loc = getattr(exc, "loc", None)
    if isinstance(loc, SourceLoc):
        return loc
    if isinstance(exc, TilusError):
        return None  # raised by tilus on purpose: its frames are tilus's, not the user's
    frames = traceback.extract_tb(exc.__traceback__) if exc.__traceback__ else []
    if not frames:
        return None
    skip = _library_dirs()
    user = [f for f in frames if not os.path.abspath(f.filename).startswith(skip)]
    f = (user or frames)[-1]
    return SourceLoc(f.filename, f.lineno or 0, 0, f.name)


def describe_failure(exc: BaseException) -> str:
    """A config's failure reason: a tilus error as it prints (it names the user's line),
    another exception as ``Type: message (at file:line)``."""
    if isinstance(exc, TilusProgramError):
        return str(exc)
    msg = str(exc).strip()
    text = f"{type(exc).__name__}: {msg}" if msg else type(exc).__name__
    if type(exc).__module__.startswith("tilus"):
        return text
    loc = user_location(exc)
    if loc is not None:
        text += f" (at {loc.file}:{loc.line})"
    return text


_AT = re.compile(r" \(at (.+):(\d+)\)$")


def _short(reason: str, width: int = 72) -> str:
    """The first line of a reason, cut to ``width``; a trailing ``(at file:line)`` is kept
    (with the file's base name)."""
    line = reason.strip().splitlines()[0] if reason.strip() else "?"
    m = _AT.search(line)
    at = f" (at {os.path.basename(m.group(1))}:{m.group(2)})" if m else ""
    msg = line[: m.start()] if m else line
    room = max(width - len(at), 16)
    return (msg if len(msg) <= room else msg[: room - 3] + "...") + at


def summary(failures) -> str:
    """``"7 x RuntimeError: ..., 2 refused by the compiler"`` of ``(refused, reason)`` pairs:
    the errors grouped by their first line (most frequent first), then the refusals."""
    errors = Counter(_short(r) for refused, r in failures if not refused)
    parts = [f"{n} x {r}" for r, n in errors.most_common(3)]
    if len(errors) > 3:
        parts.append(f"{sum(errors.values()) - sum(n for _, n in errors.most_common(3))} other")
    refused = sum(1 for refused, _ in failures if refused)
    if refused:
        parts.append(f"{refused} refused by the compiler")
    return ", ".join(parts)


def no_config_error(name: str, failures, what: str = "compiles", fmt=str) -> TilusCompileError:
    """The error when every config failed: it points at the first failure's line in the
    user's code and lists every config's reason.

    Args:
        name: The kernel's name.
        failures: ``(config, reason, exception or None)`` of every config, in order.
        what: The verb of the message (``"no config of K compiles"``).
        fmt: How a config is written.
    """
    loc = next(
        (user_location(e) for _, _, e in failures if e is not None and user_location(e)), None
    )
    lines = [f"  {fmt(cfg)}: {_indent(reason)}" for cfg, reason, _ in failures]
    head = f"no config of {name} {what}"
    if loc is not None:
        head += " (the first failure is at this line)"
    return TilusCompileError(head + "; every config's reason:\n" + "\n".join(lines), loc)


def _indent(reason: str) -> str:
    return reason.strip().replace("\n", "\n    ")
