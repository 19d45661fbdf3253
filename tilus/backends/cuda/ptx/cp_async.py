"""cp.async family: 4/8/16-byte global -> shared copies with zero fill, commit and wait groups.

Used only by kernels that call copy_async: the code generator adds the fragments on demand.
"""

from __future__ import annotations

from tilus.backends.cuda.ptx.registry import check_operands, register

FAMILY = "cp_async"


def _copy(size: int, hint: bool) -> str:
    # PTX ISA 9.7.9.25.3.1 cp.async: .cg (L2 only) takes 16 bytes, .ca 4, 8 or 16; the bytes
    # past src-size are zero-filled; .L2::cache_hint takes a createpolicy operand
    cache = "cg" if size == 16 else "ca"
    suffix = "_hint" if hint else ""
    args = "uint32_t dst, const void* src, uint32_t src_size" + (", uint64_t pol" if hint else "")
    qual = ".L2::cache_hint" if hint else ""
    asm = f"cp.async.{cache}.shared.global{qual} [%0], [%1], {size}, %2" + (
        ", %3;" if hint else ";"
    )
    ops = '"r"(dst), "l"(src), "r"(src_size)' + (', "l"(pol)' if hint else "")
    return f"""
__device__ __forceinline__ void tl_cp_async_{size}{suffix}({args}) {{
  asm volatile("{check_operands(asm, 4 if hint else 3)}" :: {ops} : "memory");
}}"""


COPIES = register(
    FAMILY,
    "tl_cp_async",
    "".join(_copy(s, h) for s in (4, 8, 16) for h in (False, True))
    + f"""
// PTX ISA 9.7.9.18 createpolicy: a fraction-1.0 L2 evict_first policy for .L2::cache_hint
__device__ __forceinline__ uint64_t tl_policy_evict_first() {{
  uint64_t pol;
  asm volatile("{check_operands("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;", 1)}"
               : "=l"(pol));
  return pol;
}}
// PTX ISA 9.7.9.25.3.2-3 cp.async.commit_group / wait_group / wait_all
__device__ __forceinline__ void tl_cp_async_commit() {{
  asm volatile("cp.async.commit_group;" ::: "memory");
}}
template <int N> __device__ __forceinline__ void tl_cp_async_wait() {{
  asm volatile("{check_operands("cp.async.wait_group %0;", 1)}" :: "n"(N) : "memory");
}}
__device__ __forceinline__ void tl_cp_async_wait_all() {{
  asm volatile("cp.async.wait_all;" ::: "memory");
}}
""",
)
