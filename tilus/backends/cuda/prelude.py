"""Assemble the C++ prelude (typedefs, CUtensorMap_t, inline-PTX helpers) a kernel needs."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable

from tilus.backends.cuda.ptx.registry import Fragment, families, fragments

#: Always emitted: fixed-width integers, the opaque tensor-map type, the shared-window cast.
BASE = """\
// ---- tilus prelude: base ----
typedef signed char int8_t;
typedef unsigned char uint8_t;
typedef short int16_t;
typedef unsigned short uint16_t;
typedef int int32_t;
typedef unsigned int uint32_t;
typedef long long int64_t;
typedef unsigned long long uint64_t;

// The driver's CUtensorMap: 128 opaque bytes, 64-byte aligned, passed by value as a
// __grid_constant__ kernel parameter.
struct alignas(64) CUtensorMap_t { unsigned long long opaque[16]; };

// Generic pointer -> 32-bit address in the CTA's shared-memory window.
__device__ __forceinline__ uint32_t tl_smem_addr(const void* p) {
  uint32_t addr;
  asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(addr) : "l"(p));
  return addr;
}
"""


def prelude(wanted: Iterable[str | Fragment] = ()) -> str:
    """Return the prelude text for the given families and extra fragments.

    Args:
        wanted: Family names (``"mbarrier"``, ``"tma"``, ``"wgmma"``, ``"mma"``, ``"sync"``,
            ``"ldst"``; each brings all its fixed helpers and the families they need) and/or
            ``Fragment`` objects built on demand (e.g. ``wgmma.mma_async(256)``).

    Returns:
        C++ source: BASE, then each family's fragments in a fixed family order, then the
        extra fragments in the order given (duplicates by name dropped).
    """
    names: set[str] = set()
    extra: list[Fragment] = []
    for item in wanted:
        if isinstance(item, Fragment):
            if item.name not in {f.name for f in extra}:
                extra.append(item)
            names.add(item.family)
            names.update(item.requires)
        else:
            names.add(item)
    # Close over requirements, then emit in sorted order so the output is deterministic.
    pending = list(names)
    while pending:
        fam = pending.pop()
        for frag in fragments(fam):
            for req in frag.requires:
                if req not in names:
                    names.add(req)
                    pending.append(req)
    parts = [BASE]
    seen: set[str] = set()
    for fam in sorted(names):
        parts.append(f"// ---- tilus prelude: {fam} ----\n")
        for frag in fragments(fam):
            parts.append(frag.text)
            seen.add(frag.name)
    for frag in extra:
        if frag.name not in seen:
            parts.append(frag.text)
            seen.add(frag.name)
    return "".join(parts)


# --- only what a kernel uses ---------------------------------------------------------------------

_NAME = re.compile(r"\btl_\w+")
# a definition: `__forceinline__ <type words> tl_name` (functions, templates), `struct tl_name`,
# an aligned `__device__` variable or a `__constant__` one
_DEFINES = re.compile(
    r"(?:__forceinline__|struct|__device__ __align__\(\d+\)|__constant__)\s+"
    r"(?:[\w:]+\s+[*&]*)*?(tl_\w+)\b"
)
# what brace counting ignores: string literals (inline asm templates) and line comments
_NOT_CODE = re.compile(r'"(?:[^"\\]|\\.)*"|//.*')


@functools.cache
def _definitions(text: str) -> tuple[str, tuple[tuple[tuple[str, ...], str], ...]]:
    """Split a fragment's text into its preamble (the comment and blank lines before its first
    definition) and its top-level definitions, each ``(names it defines, text)`` with the
    comment lines just above it."""
    preamble, items, pending, cur, depth, opened = "", [], [], None, 0, False
    for line in text.splitlines(keepends=True):
        code = _NOT_CODE.sub("", line)
        if cur is None:
            if not code.strip():  # a comment or blank line: it belongs to what follows
                pending.append(line)
                continue
            if not items and not preamble:
                preamble, pending = "".join(pending), []
            cur, depth, opened = [*pending, line], 0, False
            pending = []
        else:
            cur.append(line)
        depth += code.count("{") - code.count("}")
        opened = opened or "{" in code
        if depth == 0 and (opened or code.rstrip().endswith(";")):
            body = "".join(cur)
            names = tuple(dict.fromkeys(_DEFINES.findall(body)))
            assert names, f"prelude text defines no tl_ name:\n{body}"
            items.append((names, body))
            cur = None
    assert cur is None, f"unbalanced prelude text:\n{text}"
    if pending and items:  # trailing comments stay with the last definition
        items[-1] = (items[-1][0], items[-1][1] + "".join(pending))
    return preamble, tuple(items)


def prelude_for(code: str, extra: Iterable[Fragment] = (), tail: Iterable[str] = ()) -> str:
    """The prelude of one kernel: BASE, then only the helpers ``code`` calls, transitively.

    Args:
        code: The kernel's C++ (signature and body); every ``tl_*`` name in it is looked up.
        extra: Fragments built on demand (wgmma shapes), candidates like the families'.
        tail: Further helper texts (the code generator's), emitted after everything else.

    Returns:
        The same text ``prelude`` would give for every family plus ``extra`` and ``tail``, less
        every definition the kernel does not reach (a family's header, and a fragment's leading
        comment, appear with its first definition that is kept). Deterministic: the order is
        ``prelude``'s whatever the order of use.
    """
    # (group header, fragment key, fragment preamble, names, text), in prelude order
    pieces = []
    for fam in families():
        for frag in fragments(fam):
            pre, items = _definitions(frag.text)
            pieces += [
                (f"// ---- tilus prelude: {fam} ----\n", frag.name, pre, n, t) for n, t in items
            ]
    known = {p[1] for p in pieces}
    for frag in extra:
        if frag.name not in known:
            known.add(frag.name)
            pre, items = _definitions(frag.text)
            pieces += [("", frag.name, pre, n, t) for n, t in items]
    for k, text in enumerate(tail):
        pre, items = _definitions(text)
        pieces += [("", f"tail{k}", pre, n, t) for n, t in items]
    where = {}
    for i, (_, _, _, names, _) in enumerate(pieces):
        for n in names:
            assert n not in where, f"{n} is defined twice in the prelude"
            where[n] = i
    keep, pending = set(), list(_NAME.findall(code))
    while pending:
        i = where.get(pending.pop())
        if i is not None and i not in keep:
            keep.add(i)
            pending += _NAME.findall(pieces[i][4])
    parts, said = [BASE], set()
    for i, (head, key, pre, _, text) in enumerate(pieces):
        if i not in keep:
            continue
        if ("head", head) not in said:
            said.add(("head", head))
            parts.append(head)
        if ("frag", key) not in said:
            said.add(("frag", key))
            parts.append(pre)
        parts.append(text)
    return "".join(parts)


__all__ = ["BASE", "prelude", "prelude_for", "families"]
