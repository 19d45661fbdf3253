"""Load/store family: vectorized global stores and loads, fp32 -> f16x2 / bf16x2 packing."""

from __future__ import annotations

from tilus.backends.cuda.ptx.registry import check_operands, register

FAMILY = "ldst"

# PTX ISA 9.7.9.21 Data Movement and Conversion Instructions: cvt
# (cvt.rn.f16x2.f32 d, a, b puts a in the upper and b in the lower half; we take (lo, hi))
PACK = register(
    FAMILY,
    "tl_pack_f16x2",
    f"""
__device__ __forceinline__ uint32_t tl_pack_f16x2(float lo, float hi) {{
  uint32_t r;
  asm("{check_operands("cvt.rn.f16x2.f32 %0, %1, %2;", 3)}" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}}
__device__ __forceinline__ uint32_t tl_pack_bf16x2(float lo, float hi) {{
  uint32_t r;
  asm("{check_operands("cvt.rn.bf16x2.f32 %0, %1, %2;", 3)}" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}}
""",
)

# PTX ISA 9.7.9.11 Data Movement and Conversion Instructions: st
# (st.global of 1, 2 or 4 32-bit words; the address must be aligned to the access size)
STORES = register(
    FAMILY,
    "tl_st_global",
    f"""
__device__ __forceinline__ void tl_st_global_b32(void* ptr, uint32_t a) {{
  asm volatile("{check_operands("st.global.b32 [%0], %1;", 2)}"
               :: "l"(ptr), "r"(a) : "memory");
}}
__device__ __forceinline__ void tl_st_global_v2_b32(void* ptr, uint32_t a, uint32_t b) {{
  asm volatile("{check_operands("st.global.v2.b32 [%0], {%1, %2};", 3)}"
               :: "l"(ptr), "r"(a), "r"(b) : "memory");
}}
__device__ __forceinline__ void tl_st_global_v4_b32(void* ptr, uint32_t a, uint32_t b,
                                                    uint32_t c, uint32_t d) {{
  asm volatile("{check_operands("st.global.v4.b32 [%0], {%1, %2, %3, %4};", 5)}"
               :: "l"(ptr), "r"(a), "r"(b), "r"(c), "r"(d) : "memory");
}}
""",
)

# PTX ISA 9.7.9.8 Data Movement and Conversion Instructions: ld
LOADS = register(
    FAMILY,
    "tl_ld_global",
    f"""
__device__ __forceinline__ void tl_ld_global_v4_b32(const void* ptr, uint32_t (&r)[4]) {{
  asm volatile("{check_operands("ld.global.v4.b32 {%0, %1, %2, %3}, [%4];", 5)}"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "l"(ptr) : "memory");
}}
""",
)

# PTX ISA 9.7.9.11 Data Movement and Conversion Instructions: st (.shared, for staging epilogues)
SHARED_STORES = register(
    FAMILY,
    "tl_st_shared",
    f"""
__device__ __forceinline__ void tl_st_shared_b32(uint32_t addr, uint32_t a) {{
  asm volatile("{check_operands("st.shared.b32 [%0], %1;", 2)}" :: "r"(addr), "r"(a) : "memory");
}}
__device__ __forceinline__ void tl_st_shared_v4_b32(uint32_t addr, uint32_t a, uint32_t b,
                                                    uint32_t c, uint32_t d) {{
  asm volatile("{check_operands("st.shared.v4.b32 [%0], {%1, %2, %3, %4};", 5)}"
               :: "r"(addr), "r"(a), "r"(b), "r"(c), "r"(d) : "memory");
}}
""",
)


_STORE_TYPES = (  # C type, helper suffix, st type, asm constraint, cast to the operand
    ("int8_t", "i8", "b8", "h", "(uint16_t)"),
    ("uint8_t", "u8", "b8", "h", "(uint16_t)"),
    ("bool", "bool", "b8", "h", "(uint16_t)"),
    ("int16_t", "i16", "b16", "h", ""),
    ("uint16_t", "u16", "b16", "h", ""),
    ("int32_t", "i32", "b32", "r", ""),
    ("uint32_t", "u32", "b32", "r", ""),
    ("int64_t", "i64", "b64", "l", ""),
    ("uint64_t", "u64", "b64", "l", ""),
    ("float", "f32", "f32", "f", ""),
    ("double", "f64", "f64", "d", ""),
)
#: C type of a stored element -> suffix of its guarded-store helpers (``tl_st_global_if_f32``).
GUARDED_SUFFIX = {t[0]: t[1] for t in _STORE_TYPES} | {"int": "i32"}


def _guarded(ctype: str, suffix: str, ptx: str, constraint: str, cast: str) -> str:
    pred = f"{{ .reg .pred p; setp.ne.b32 p, %2, 0; @p st.global.{ptx} [%0], %1; }}"
    redirect = (
        "{ .reg .pred p; .reg .b64 a; setp.ne.b32 p, %2, 0; "
        f"selp.b64 a, %0, %3, p; st.global.{ptx} [a], %1; }}"
    )
    head = "__device__ __forceinline__ void tl_st_global"
    return f"""
{head}_if_{suffix}({ctype}* ptr, {ctype} v, uint32_t ok) {{
  asm volatile("{check_operands(pred, 3)}"
               :: "l"(ptr), "{constraint}"({cast}v), "r"(ok) : "memory");
}}
{head}_or_{suffix}({ctype}* ptr, {ctype} v, uint32_t ok) {{
  asm volatile("{check_operands(redirect, 4)}"
               :: "l"(ptr), "{constraint}"({cast}v), "r"(ok), "l"(tl_store_sink) : "memory");
}}"""


_PAIR_IF = (
    "{ .reg .pred p; .reg .b32 h; .reg .b64 a; "
    "setp.ne.b32 p, %2, 0; @p st.global.b32 [%0], %1; "
    "setp.ne.b32 p, %3, 0; @p st.global.b16 [%0], %1; "
    "shr.b32 h, %1, 16; add.s64 a, %0, 2; setp.ne.b32 p, %4, 0; @p st.global.b16 [a], h; }"
)
_PAIR_OR = (
    "{ .reg .pred p; .reg .b32 h; .reg .b64 a; "
    "setp.ne.b32 p, %2, 0; selp.b64 a, %0, %5, p; st.global.b32 [a], %1; "
    "setp.ne.b32 p, %3, 0; selp.b64 a, %0, %5, p; st.global.b16 [a], %1; "
    "shr.b32 h, %1, 16; add.s64 a, %0, 2; setp.ne.b32 p, %4, 0; selp.b64 a, a, %5, p; "
    "st.global.b16 [a], h; }"
)

# A whole aligned run of 2 or 4 words: one vector store, to the sink (16 bytes, 16-aligned)
# when out of bounds.
_V2_OR = (
    "{ .reg .pred p; .reg .b64 a; setp.ne.b32 p, %3, 0; selp.b64 a, %0, %4, p; "
    "st.global.v2.b32 [a], {%1, %2}; }"
)
_V4_OR = (
    "{ .reg .pred p; .reg .b64 a; setp.ne.b32 p, %5, 0; selp.b64 a, %0, %6, p; "
    "st.global.v4.b32 [a], {%1, %2, %3, %4}; }"
)

# PTX ISA 9.7.9.11 st, 9.7.8.3 selp, 9.3 predicated execution. Bounds-checked element stores
# without branches. ``tl_st_global_if`` predicates the store. ``tl_st_global_or`` always
# stores, to the element when ``ok`` and otherwise to ``tl_store_sink``, a global word nothing
# reads (global: a shared word that every thread of a block writes is a hazard to
# compute-sanitizer's racecheck, and costs the kernel shared memory). Kernels that keep wgmma
# groups in flight (wait_group(n > 0)) use it: ptxas sinks accumulator reads (the fp32 -> fp16
# packs of an epilogue) under store predicates or branches, and then either serializes every
# wgmma of the kernel (info C7514) or, when the loop that keeps a group in flight is unrolled,
# schedules them above the final wait_group.
# A pair of adjacent 16-bit elements goes out of one packed register: the word when ``both``
# (in bounds and aligned), else each half in bounds. (st may take a register wider than its
# type: bytes go out of 16-bit registers.)
GUARDED_STORES = register(
    FAMILY,
    "tl_st_global_if",
    "\n__device__ __align__(16) uint64_t tl_store_sink[2];"
    + "".join(_guarded(*t) for t in _STORE_TYPES)
    + f"""
__device__ __forceinline__ void tl_st_global_if_pair(uint16_t* ptr, uint32_t w, uint32_t both,
                                                     uint32_t lo, uint32_t hi) {{
  asm volatile("{check_operands(_PAIR_IF, 5)}"
               :: "l"(ptr), "r"(w), "r"(both), "r"(lo), "r"(hi) : "memory");
}}
__device__ __forceinline__ void tl_st_global_or_v2_b32(void* ptr, uint32_t a, uint32_t b,
                                                      uint32_t ok) {{
  asm volatile("{check_operands(_V2_OR, 5)}"
               :: "l"(ptr), "r"(a), "r"(b), "r"(ok), "l"(tl_store_sink) : "memory");
}}
__device__ __forceinline__ void tl_st_global_or_v4_b32(void* ptr, uint32_t a, uint32_t b,
                                                      uint32_t c, uint32_t d, uint32_t ok) {{
  asm volatile("{check_operands(_V4_OR, 7)}"
               :: "l"(ptr), "r"(a), "r"(b), "r"(c), "r"(d), "r"(ok), "l"(tl_store_sink)
               : "memory");
}}
__device__ __forceinline__ void tl_st_global_or_pair(uint16_t* ptr, uint32_t w, uint32_t both,
                                                     uint32_t lo, uint32_t hi) {{
  asm volatile("{check_operands(_PAIR_OR, 6)}"
               :: "l"(ptr), "r"(w), "r"(both), "r"(lo), "r"(hi), "l"(tl_store_sink)
               : "memory");
}}
""",
)
