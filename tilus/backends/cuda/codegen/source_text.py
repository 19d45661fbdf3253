"""The user's source of a location for code comments: its whole statement on one line."""

from __future__ import annotations

import ast
import io
import tokenize

from tilus import source_cache

#: per file: (the lines list it was built from, statement spans, lookups done)
_FILES: dict[str, tuple[list, list, dict]] = {}


def _header_end(node: ast.stmt, lines: list) -> int:
    """The last line of what a comment shows of ``node``: a compound statement's header only."""
    if isinstance(node, (ast.For, ast.AsyncFor)):
        return node.iter.end_lineno
    if isinstance(node, (ast.While, ast.If)):
        return node.test.end_lineno
    if isinstance(node, (ast.With, ast.AsyncWith)):
        item = node.items[-1]
        return (item.optional_vars or item.context_expr).end_lineno
    if hasattr(node, "body"):  # a def (its parameters bind): up to the colon of its header
        return _colon_line(lines, node.lineno)
    return node.end_lineno


def _colon_line(lines: list, first: int) -> int:
    """The line of the first ``:`` outside brackets from line ``first`` on."""
    depth = 0
    try:
        for tok in tokenize.generate_tokens(io.StringIO("".join(lines[first - 1 :])).readline):
            if tok.type == tokenize.OP:
                if tok.string in "([{":
                    depth += 1
                elif tok.string in ")]}":
                    depth -= 1
                elif tok.string == ":" and depth == 0:
                    return first + tok.start[0] - 1
    except (tokenize.TokenError, SyntaxError):
        pass
    return first


def _spans(lines: list) -> list:
    try:
        tree = ast.parse("".join(lines))
    except (SyntaxError, ValueError):
        return []
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.stmt):
            start, end = (node.lineno, node.col_offset), (node.end_lineno, node.end_col_offset)
            out.append((start, end, _header_end(node, lines)))
    return out


def _collapse(lines: list[str]) -> str:
    """Lines of one statement as one line: comments dropped but the last line's, and no space
    inside brackets where the lines were joined (nor a trailing comma before the bracket)."""
    cut = {}  # row -> column where a comment starts
    try:
        for tok in tokenize.generate_tokens(io.StringIO("".join(lines)).readline):
            if tok.type == tokenize.COMMENT:
                cut[tok.start[0]] = tok.start[1]
    except (tokenize.TokenError, SyntaxError):
        return lines[0].strip()
    parts = []
    for row, line in enumerate(lines, 1):
        if row < len(lines) and row in cut:
            line = line[: cut[row]]
        line = line.strip().removesuffix("\\").strip()
        if line:
            parts.append(line)
    text = parts[0] if parts else ""
    for part in parts[1:]:
        if part[0] in ")]}":
            text = text.removesuffix(",") + part
        elif text[-1] in "([{":
            text += part
        else:
            text += " " + part
    return text


def statement_text(file: str, line: int, col: int = 0) -> tuple[int, str]:
    """(first line, text) of the innermost statement of ``file`` holding ``line:col`` (its
    header for a compound statement), collapsed onto one line; the line itself when the file
    does not parse."""
    lines = source_cache.lines(file)  # as imported: see tilus/source_cache.py
    cached = _FILES.get(file)
    if cached is None or cached[0] is not lines:
        cached = _FILES[file] = (lines, _spans(lines), {})
    hit = cached[2].get((line, col))
    if hit is None:
        best = None
        for start, end, head_end in cached[1]:
            if start <= (line, col) <= end and (best is None or start >= best[0]):
                best = (start, end, head_end)
        if best is None:
            hit = (line, lines[line - 1].strip() if 0 < line <= len(lines) else "")
        else:
            first = best[0][0]
            hit = (first, _collapse(lines[first - 1 : best[2]]))
        cached[2][(line, col)] = hit
    return hit
