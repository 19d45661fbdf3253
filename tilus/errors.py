"""Error types of tilus, and the source locations they point at."""

from __future__ import annotations

from dataclasses import dataclass

from tilus import source_cache


@dataclass(frozen=True, slots=True)
class SourceLoc:
    """A position in the user's source: file, 1-based line, 0-based column, function name."""

    file: str
    line: int
    col: int = 0
    func: str = ""

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col + 1}"

    def snippet(self) -> str:
        """The source line with a caret under the column (empty if the file is unreadable)."""
        text = source_cache.line(self.file, self.line).rstrip("\n")
        if not text:
            return ""
        return f"    {text}\n    {' ' * self.col}^"


def at(loc: SourceLoc | None) -> str:
    """Short ``file.py:LINE`` of a location, for messages that mention a second place."""
    if loc is None:
        return "an unknown line"
    return f"{loc.file.rsplit('/', 1)[-1]}:{loc.line}"


class TilusError(Exception):
    """Base class of every error tilus raises on purpose."""


class TilusProgramError(TilusError):
    """An error in the user's kernel program, pointing at the offending source line."""

    def __init__(self, msg: str, loc: SourceLoc | None = None, notes: list[str] | None = None):
        self.msg = msg
        self.loc = loc
        self.notes = list(notes or [])
        super().__init__(self._format())

    def _format(self) -> str:
        parts = []
        if self.loc is not None:
            where = f"{self.loc}"
            if self.loc.func:
                where += f" (in {self.loc.func})"
            parts.append(f"{where}: {self.msg}")
            snippet = self.loc.snippet()
            if snippet:
                parts.append(snippet)
        else:
            parts.append(self.msg)
        parts.extend(self.notes)
        return "\n".join(parts)


class TilusCompileError(TilusProgramError):
    """The program is well formed but cannot be compiled for the target (limits, layouts...)."""


class TilusRuntimeError(TilusProgramError):
    """A failure while running a kernel: bad arguments, a deadlock, a race, a protocol error."""


class TilusArgumentError(TilusError):
    """A kernel was called with arguments that do not match its parameters."""


class LayoutOperationError(ValueError):
    """A layout function got layouts it cannot combine (a divide with no quotient, a reshape
    that splits a thread mode, a mode list that does not cover the shape); raised in a kernel,
    it is reported at the calling line."""


class TilusBackendError(TilusError):
    """The compiler toolchain or the CUDA driver failed (NVRTC log or driver error attached)."""


class TilusPerformanceWarning(UserWarning):
    """The generated kernel compiled, but the toolchain reports code that will run slowly
    (for example, ptxas serialized the kernel's wgmma instructions)."""


class TilusCacheWarning(UserWarning):
    """An on-disk cache entry or dispatch-table entry failed its checks and is rebuilt, or the
    cache directory cannot be written (kernels are then kept in memory) or is writable by other
    users."""
