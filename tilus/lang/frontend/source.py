"""Source access for the front end: parsed function ASTs with file positions, and scopes."""

from __future__ import annotations

import ast
import inspect
import textwrap
from dataclasses import dataclass, field
from functools import lru_cache

from tilus import source_cache
from tilus.errors import SourceLoc, TilusProgramError


@dataclass(frozen=True)
class ParsedFunction:
    """A function's AST with the file and offsets needed to report user positions."""

    node: ast.FunctionDef
    filename: str
    col_shift: int  # indentation removed by dedent
    name: str

    def loc(self, node: ast.AST) -> SourceLoc:
        return SourceLoc(
            self.filename,
            getattr(node, "lineno", self.node.lineno),
            getattr(node, "col_offset", 0) + self.col_shift,
            self.name,
        )


def _source_lines(func) -> tuple[list[str], int, str]:
    """``func``'s lines, its first line and its file: from the file as imported when a kernel
    class of that file kept it (``tilus.source_cache``), else from the file now."""
    try:
        filename = inspect.getsourcefile(func) or inspect.getfile(func)
        if source_cache.has_snapshot(filename):
            first = inspect.unwrap(getattr(func, "__func__", func)).__code__.co_firstlineno
            return inspect.getblock(source_cache.lines(filename)[first - 1 :]), first, filename
        lines, first = inspect.getsourcelines(func)
        return lines, first, filename
    except (OSError, TypeError, AttributeError, IndexError) as e:
        raise TilusProgramError(
            f"cannot read the source of {func.__qualname__}: tilus transpiles kernel source, so "
            f"it must live in a file ({e})"
        ) from None


@lru_cache(maxsize=512)
def parse_function(func) -> ParsedFunction:
    """Parse ``func``'s source (cached); raises a located error if the source is unavailable or
    no longer defines ``func`` (its file was edited after the import)."""
    lines, first, filename = _source_lines(func)
    text = "".join(lines)
    dedented = textwrap.dedent(text)
    shift = len(lines[0]) - len(lines[0].lstrip()) if lines else 0
    shift -= len(dedented.splitlines()[0]) - len(dedented.splitlines()[0].lstrip())
    try:
        tree = ast.parse(dedented)
    except SyntaxError:
        tree = None
    node = tree.body[0] if tree is not None and tree.body else None
    if tree is None or (isinstance(node, ast.FunctionDef) and node.name != func.__name__):
        raise TilusProgramError(
            f"{filename}:{first} no longer defines {func.__qualname__}: the file changed after it "
            "was imported; re-import the module (or restart) so that tilus and Python see the "
            "same source",
            SourceLoc(filename, first, 0, func.__name__),
        )
    if not isinstance(node, ast.FunctionDef):
        raise TilusProgramError(f"{func.__qualname__} is not a plain function definition")
    ast.increment_lineno(tree, first - 1)
    return ParsedFunction(node, filename, shift, func.__name__)


@dataclass
class Scope:
    """Names bound in one block; ``runtime`` marks blocks under runtime control flow."""

    names: dict = field(default_factory=dict)
    runtime: bool = False
    kind: str = "block"  # block / loop / if / group


@dataclass
class Frame:
    """One function being transpiled (the kernel, or an inlined helper / Class method)."""

    parsed: ParsedFunction
    globals: dict
    closure: dict
    self_obj: object
    cls: type | None
    scopes: list = field(default_factory=lambda: [Scope()])
    branch_locals: dict = field(default_factory=dict)
    loop_depth: int = 0
    group_depth: int = 0
    is_kernel: bool = False

    def lookup(self, name):
        """(scope index, value) of the innermost binding of ``name`` in this frame, or None."""
        for i in range(len(self.scopes) - 1, -1, -1):
            if name in self.scopes[i].names:
                return i, self.scopes[i].names[name]
        return None

    def runtime_between(self, index: int) -> bool:
        """Whether a runtime block lies between scope ``index`` and the innermost scope."""
        return any(s.runtime for s in self.scopes[index + 1 :])

    def flat_names(self) -> dict:
        """Every visible name of the frame (globals, closure, scopes), for host evaluation."""
        env = dict(self.globals)
        env.update(self.closure)
        for s in self.scopes:
            env.update(s.names)
        return env


def closure_vars(func) -> dict:
    """The free variables a function closes over (for name lookup)."""
    try:
        cv = inspect.getclosurevars(func)
        return dict(cv.nonlocals)
    except (TypeError, ValueError):
        return {}
