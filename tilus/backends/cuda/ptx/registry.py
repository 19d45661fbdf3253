"""Registry of C++ device-function fragments (inline PTX) grouped by instruction family."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# Each family module puts the PTX ISA section above every builder. Section numbers follow the
# PTX ISA 9.x document (they shift between releases; the titles are stable).

# family name -> fragment name -> fragment, in registration order. The family modules register
# into it when imported; the package (ptx/__init__.py) imports them all, so any import of this
# module sees every family.
_FAMILIES: dict[str, dict[str, Fragment]] = {}

_OPERAND_RE = re.compile(r"%(\d+)")


@dataclass(frozen=True)
class Fragment:
    """One piece of device code for the prelude.

    Attributes:
        name: The C++ name it defines (unique across the prelude, ``tl_`` prefixed).
        family: The instruction family it belongs to (``"mbarrier"``, ``"wgmma"``...).
        text: The C++ text, ending with a newline.
        requires: Names of families this fragment's text calls into.
    """

    name: str
    family: str
    text: str
    requires: tuple[str, ...] = field(default=())


def check_operands(asm: str, n_operands: int) -> str:
    """Assert that an inline-asm template uses exactly the operands ``%0 .. %{n-1}``.

    Args:
        asm: The PTX template, as it will appear inside ``asm volatile("...")``.
        n_operands: The number of output plus input operands bound to it.

    Returns:
        The template, unchanged, so that the call can wrap the string in place.
    """
    used = {int(m) for m in _OPERAND_RE.findall(asm)}
    expected = set(range(n_operands))
    assert used == expected, (
        f"inline asm operand mismatch: template uses {sorted(used)}, "
        f"{n_operands} operands bound\n{asm}"
    )
    return asm


def register(family: str, name: str, text: str, requires: tuple[str, ...] = ()) -> Fragment:
    """Add a fragment to ``family`` (idempotent for identical text) and return it."""
    assert name.startswith("tl_"), f"prelude names take the tl_ prefix: {name}"
    frag = Fragment(name=name, family=family, text=text.rstrip("\n") + "\n", requires=requires)
    table = _FAMILIES.setdefault(family, {})
    old = table.get(name)
    assert old is None or old == frag, f"conflicting definitions of {name} in {family}"
    table[name] = frag
    return frag


def fragments(family: str) -> list[Fragment]:
    """The fragments registered under ``family``, in registration order."""
    if family not in _FAMILIES:
        raise KeyError(f"unknown PTX family {family!r}; known: {sorted(_FAMILIES)}")
    return list(_FAMILIES[family].values())


def families() -> list[str]:
    """The names of all registered families, sorted."""
    return sorted(_FAMILIES)
