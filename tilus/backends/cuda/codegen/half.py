"""16-bit float register arithmetic: fp16/bf16 ops one or two at a time, and word unpacking."""

# A register tile of a 16-bit float is an array of 16-bit variables. These helpers are PTX
# f16/bf16 instructions on one of them or on a pair (registers 2p and 2p + 1 as one f16x2
# operand); ptxas keeps a pair that was unpacked from one word in that word's register.

from __future__ import annotations

from tilus.backends.cuda.ptx.registry import Fragment


def _f16_op(name: str, ptx: str, suffix: str = "f16") -> Fragment:
    text = (
        f"__device__ __forceinline__ uint16_t {name}(uint16_t a, uint16_t b) {{\n"
        f'  uint16_t r; asm("{ptx}.rn.{suffix} %0, %1, %2;" : "=h"(r) : "h"(a), "h"(b)); '
        "return r;\n"
        "}\n"
    )
    return Fragment(name, "ldst", text)


#: fp16 ``* + -`` as one f16 instruction each (HMUL2/HADD2 on one half) instead of two
#: conversions to float, the float op and a rounding: the same bits, as float has at least
#: 2 * 11 + 2 significand bits (a float op rounded to fp16 is the correctly rounded fp16 op)
F16_OPS = {
    "*": ("tl_hmul1", _f16_op("tl_hmul1", "mul")),
    "+": ("tl_hadd1", _f16_op("tl_hadd1", "add")),
    "-": ("tl_hsub1", _f16_op("tl_hsub1", "sub")),
}


def _pair_op(name: str, ptx: str, nargs: int = 2) -> Fragment:
    """``(o0, o1) = ptx(a, b[, c])`` on pairs of 16-bit floats (``nargs`` operand pairs). The
    halves go in and out through ``mov.b32 {lo, hi}``: ptxas keeps halves that sit in one
    register where they are, so the packing costs nothing when the operands were pairs."""
    names = "abc"[:nargs]
    params = ", ".join(f"uint16_t {x}0, uint16_t {x}1" for x in names)
    packs = " ".join(f"mov.b32 {x}, {{%{2 + 2 * k}, %{3 + 2 * k}}};" for k, x in enumerate(names))
    ins = ", ".join(f'"h"({x}0), "h"({x}1)' for x in names)
    text = (
        f"__device__ __forceinline__ void {name}(uint16_t &o0, uint16_t &o1, {params}) {{\n"
        f'  asm("{{.reg .b32 {", ".join(names)}, r; {packs} {ptx} r, {", ".join(names)}; '
        'mov.b32 {%0, %1}, r;}"\n'
        f'      : "=h"(o0), "=h"(o1) : {ins});\n'
        "}\n"
    )
    return Fragment(name, "ldst", text)


def _fma_op(name: str, suf: str) -> Fragment:
    text = (
        f"__device__ __forceinline__ uint16_t {name}(uint16_t a, uint16_t b, uint16_t c) {{\n"
        f'  uint16_t r; asm("fma.rn.{suf} %0, %1, %2, %3;" : "=h"(r) : "h"(a), "h"(b), '
        '"h"(c)); return r;\n'
        "}\n"
    )
    return Fragment(name, "ldst", text)


#: ``a * b + c`` of 16-bit floats rounded once, by dtype: (the pair op, the scalar op)
HALF_FMA = {
    dt: ((f"tl_{pre}fma_pair", _pair_op(f"tl_{pre}fma_pair", f"fma.rn.{suf}x2", 3)),
         (f"tl_{pre}fma1", _fma_op(f"tl_{pre}fma1", suf)))
    for dt, pre, suf in (("float16", "h", "f16"), ("bfloat16", "b", "bf16"))
}  # fmt: skip

#: ``* + -`` of two 16-bit floats at once (HMUL2/HADD2 on a pair, bf16x2 on sm_90): the same
#: bits as one at a time (each half rounded on its own), half the instructions
PAIR_OPS = {
    (dt, op): (f"tl_{pre}{name}_pair", _pair_op(f"tl_{pre}{name}_pair", f"{name}.rn.{suf}x2"))
    for dt, pre, suf in (("float16", "h", "f16"), ("bfloat16", "b", "bf16"))
    for op, name in (("*", "mul"), ("+", "add"), ("-", "sub"))
}


_UNPACK = Fragment(
    "tl_unpack2",
    "ldst",
    "template <class T> __device__ __forceinline__ void tl_unpack2(uint32_t w, T &lo, T &hi) {\n"
    '  asm("mov.b32 {%0, %1}, %2;" : "=h"(*(uint16_t*)&lo), "=h"(*(uint16_t*)&hi) : "r"(w));\n'
    "}\n",
)


def split_word(ctx, word: str, lo: str, hi: str):
    """Emit the two 16-bit halves of the 32-bit ``word`` into the lvalues ``lo`` and ``hi``
    as one PTX unpack (``mov.b32 {lo, hi}``): ptxas then knows them as the halves of one
    register, and a pair op on them (or a store of the pair) needs no repacking (shifts and
    masks instead leave two registers that PRMT must merge again)."""
    if _UNPACK not in ctx.fragments:
        ctx.fragments.append(_UNPACK)
    ctx.emit(f"tl_unpack2({word}, {lo}, {hi});")


#: the rounded scalar add of a 16-bit float sum's accumulator, by dtype
HALF_ADD = {
    "float16": F16_OPS["+"],
    "bfloat16": ("tl_badd1", _f16_op("tl_badd1", "add", "bf16")),
}
