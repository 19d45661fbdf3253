"""Warp-level MMA family: mma.sync (m16n8k16 16-bit, m16n8k32 8-bit, m16n8k8 tf32) and ldmatrix."""

from __future__ import annotations

from tilus.backends.cuda.ptx.registry import Fragment, check_operands, register

FAMILY = "mma"


def _mma(ab: str) -> str:
    asm = (
        f"mma.sync.aligned.m16n8k16.row.col.f32.{ab}.{ab}.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
    )
    return f"""
// D (f32x4) += A (4 x {ab}x2, row) * B (2 x {ab}x2, col), register fragments per the ISA.
__device__ __forceinline__ void tl_mma_m16n8k16_f32_{ab}(float (&d)[4], const uint32_t (&a)[4],
                                                         const uint32_t (&b)[2]) {{
  asm volatile("{check_operands(asm, 10)}"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}}
"""


# PTX ISA 9.7.14.5.14 Multiply-and-Accumulate Instruction: mma (.m16n8k16, f32 accumulate)
MMA_F16 = register(FAMILY, "tl_mma_m16n8k16_f32_f16", _mma("f16"))
MMA_BF16 = register(FAMILY, "tl_mma_m16n8k16_f32_bf16", _mma("bf16"))


def _ldmatrix(num: int, trans: bool) -> str:
    suffix = ".trans" if trans else ""
    regs = "{" + ", ".join(f"%{i}" for i in range(num)) + "}"
    asm = f"ldmatrix.sync.aligned.m8n8.x{num}{suffix}.shared.b16 {regs}, [%{num}];"
    outs = ", ".join(f'"=r"(r[{i}])' for i in range(num))
    name = f"tl_ldmatrix_x{num}{'_trans' if trans else ''}"
    return f"""
__device__ __forceinline__ void {name}(uint32_t (&r)[{num}], uint32_t addr) {{
  asm volatile("{check_operands(asm, num + 1)}" : {outs} : "r"(addr) : "memory");
}}
"""


# PTX ISA 9.7.14.5.15 Warp-level matrix load instruction: ldmatrix
# (each lane passes the shared-window address of one 16-byte row of the 8x8 matrices)
LDMATRIX = {
    (num, trans): register(
        FAMILY, f"tl_ldmatrix_x{num}{'_trans' if trans else ''}", _ldmatrix(num, trans)
    )
    for num in (1, 2, 4)
    for trans in (False, True)
}


_D_TYPES = {"f32": ("float", "f", 4), "s32": ("int", "r", 4), "f16": ("uint32_t", "r", 2)}


def mma_sync(k: int, ab: str, cd: str) -> Fragment:
    """The wrapper of ``mma.sync.aligned.m16n8k{k}.row.col.{cd}.{ab}.{ab}.{cd}``.

    ``void tl_mma_m16n8k{k}_{cd}_{ab}(D (&d)[n], const uint32_t (&a)[4], const uint32_t (&b)[2])``
    with D ``float[4]`` (f32), ``int[4]`` (s32) or ``uint32_t[2]`` (f16: two f16x2 pairs):
    ``d += a @ b`` on the register fragments of the PTX ISA (9.7.14.5.14). The s8/u8 forms have
    no ``.satfinite``: int32 sums wrap.
    """
    if cd not in _D_TYPES:
        raise ValueError(f"no mma.sync accumulator type {cd!r}")
    ct, con, nd = _D_TYPES[cd]
    d = ", ".join(f"%{i}" for i in range(nd))
    a = ", ".join(f"%{nd + i}" for i in range(4))
    b = f"%{nd + 4}, %{nd + 5}"
    asm = f"mma.sync.aligned.m16n8k{k}.row.col.{cd}.{ab}.{ab}.{cd} {{{d}}}, {{{a}}}, {{{b}}}, {{{d}}};"
    name = f"tl_mma_m16n8k{k}_{cd}_{ab}"
    outs = ", ".join(f'"+{con}"(d[{i}])' for i in range(nd))
    text = f"""
// PTX ISA 9.7.14.5.14 mma.m16n8k{k}: D ({cd}) += A ({ab}, row) * B ({ab}, col)
__device__ __forceinline__ void {name}({ct} (&d)[{nd}], const uint32_t (&a)[4],
                                       const uint32_t (&b)[2]) {{
  asm volatile("{check_operands(asm, nd + 6)}"
               : {outs}
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}}
"""
    return Fragment(name=name, family=FAMILY, text=text.lstrip("\n"))
