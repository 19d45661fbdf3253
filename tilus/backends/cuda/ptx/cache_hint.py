"""Cache-hinted vector loads and stores of global memory (``load_global``/``store_global`` ``cache=``).

Used only by kernels that pass ``cache=``: the code generator adds the fragment on demand.
"""

from __future__ import annotations

from tilus.backends.cuda.ptx.registry import check_operands, register

FAMILY = "cache_hint"

# PTX ISA 9.7.9.8 ld / 9.7.9.11 st: .L1::<eviction priority> and .L2::cache_hint with a
# 64-bit policy operand made by 9.7.9.18 createpolicy (fraction 1.0: every line it touches);
# st.global.cs is the streaming cache operator (likely accessed once). The qualifiers of each
# ``cache`` value, as (load, store) instruction prefixes and whether a policy operand follows.
QUALIFIERS = {
    "evict_first": ("ld.global.L1::evict_first.L2::cache_hint",
                    "st.global.L1::evict_first.L2::cache_hint", True),
    "evict_last": ("ld.global.L1::evict_last.L2::cache_hint",
                   "st.global.L1::evict_last.L2::cache_hint", True),
    "no_allocate": ("ld.global.L1::no_allocate", None, False),
    "stream": (None, "st.global.cs", False),
}  # fmt: skip


def _policy(kind: str) -> str:
    asm = f"createpolicy.fractional.L2::{kind}.b64 %0, 1.0;"
    return f"""
__device__ __forceinline__ uint64_t tl_policy_{kind}_l2() {{
  uint64_t pol;
  asm volatile("{check_operands(asm, 1)}" : "=l"(pol));
  return pol;
}}"""


def _load(cache: str, nwords: int) -> str:
    op, _, hinted = QUALIFIERS[cache]
    regs = ", ".join(f"%{k}" for k in range(nwords))
    asm = f"{op}.v{nwords}.b32 {{{regs}}}, [%{nwords}]" + (f", %{nwords + 1};" if hinted else ";")
    outs = ", ".join(f'"=r"(r.{c})' for c in "xyzw"[:nwords])
    ins = '"l"(ptr)' + (', "l"(pol)' if hinted else "")
    return f"""
__device__ __forceinline__ uint{nwords} tl_ld_{cache}_v{nwords}(const void* ptr, uint64_t pol) {{
  uint{nwords} r;
  asm volatile("{check_operands(asm, nwords + 1 + hinted)}" : {outs} : {ins} : "memory");
  return r;
}}"""


def _store(cache: str, nwords: int) -> str:
    _, op, hinted = QUALIFIERS[cache]
    regs = ", ".join(f"%{k + 1}" for k in range(nwords))
    asm = f"{op}.v{nwords}.b32 [%0], {{{regs}}}" + (f", %{nwords + 1};" if hinted else ";")
    ins = ", ".join(['"l"(ptr)', *(f'"r"(v.{c})' for c in "xyzw"[:nwords])])
    ins += ', "l"(pol)' if hinted else ""
    return f"""
__device__ __forceinline__ void tl_st_{cache}_v{nwords}(void* ptr, uint{nwords} v, uint64_t pol) {{
  asm volatile("{check_operands(asm, nwords + 1 + hinted)}" :: {ins} : "memory");
}}"""


HINTS = register(
    FAMILY,
    "tl_cache_hint",
    "".join(_policy(k) for k in ("evict_first", "evict_last"))
    + "".join(
        _load(c, w) + (_store(c, w) if QUALIFIERS[c][1] else "")
        for c, q in QUALIFIERS.items()
        for w in (2, 4)
        if q[0]
    )
    + "".join(_store(c, w) for c, q in QUALIFIERS.items() for w in (2, 4) if not q[0]),
)


def policy_call(cache: str) -> str | None:
    """The C call making the L2 policy operand of ``cache`` (None: the access takes none)."""
    return f"tl_policy_{cache}_l2()" if QUALIFIERS[cache][2] else None
