"""Assemble the C++ prelude (typedefs, CUtensorMap_t, inline-PTX helpers) a kernel needs."""

from __future__ import annotations

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


__all__ = ["BASE", "prelude", "families"]
