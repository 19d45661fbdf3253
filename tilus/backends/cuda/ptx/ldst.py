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
