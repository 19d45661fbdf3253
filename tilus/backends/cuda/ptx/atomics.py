"""Atomic family: ``atom``/``red`` per (space, op, type, sem, scope) and the semaphore helpers.

The atom/red helpers are built on demand (one per combination a kernel uses); the semaphore
helpers are fixed.
"""

from __future__ import annotations

from tilus.backends.cuda.ptx.registry import Fragment, check_operands, register

FAMILY = "atomic"

# PTX ISA 9.7.13.5 atom / 9.7.13.6 red: the type suffix and asm constraint of each dtype, per
# op kind (arithmetic, or bit-pattern exch/cas)
_ARITH = {
    "int32": ("s32", "r"),
    "uint32": ("u32", "r"),
    "int64": ("s64", "l"),
    "uint64": ("u64", "l"),
    "float32": ("f32", "f"),
    "float64": ("f64", "d"),
    "float16": ("noftz.f16", "h"),
    "bfloat16": ("noftz.bf16", "h"),
}
_BITS = {"int32": "b32", "uint32": "b32", "float32": "b32", "int64": "b64", "uint64": "b64",
         "float64": "b64"}  # fmt: skip
_CTYPE = {"int32": "int", "uint32": "uint32_t", "int64": "int64_t", "uint64": "uint64_t",
          "float32": "float", "float64": "double", "float16": "uint16_t",
          "bfloat16": "uint16_t"}  # fmt: skip


def atom_name(space: str, op: str, dtype: str, sem: str, scope: str, ret: bool) -> str:
    """The C name of the helper for one combination."""
    return f"tl_{'atom' if ret else 'red'}_{space}_{op}_{dtype}_{sem}_{scope}"


def atom(space: str, op: str, dtype: str, sem: str, scope: str, ret: bool) -> Fragment:
    """The helper ``T f(addr, b[, c])`` (``atom``) or ``void f(addr, b)`` (``red``) for
    ``op`` in add/min/max/exch/cas (``sub`` is the caller's add of the negation)."""
    name = atom_name(space, op, dtype, sem, scope, ret)
    ct = _CTYPE[dtype]
    if op in ("min", "max") and dtype in _HALF:
        return _cas_loop(name, space, op, dtype, sem, scope, ret)
    if op in ("exch", "cas"):
        ty, con = _BITS[dtype], _ARITH[dtype][1]
    else:
        ty, con = _ARITH[dtype]
        if op == "add" and dtype == "int64":
            ty = "u64"  # atom.add has no .s64; two's complement makes u64 the same
    sp = "shared::cta" if space == "shared" else "global"
    at = '"r"(addr)' if space == "shared" else '"l"(addr)'
    addr_t = "uint32_t" if space == "shared" else "void*"
    mnemonic = f"{'atom' if ret else 'red'}.{sem}.{scope}.{sp}.{op}.{ty}"
    if ret:
        ops = "%0, [%1], %2, %3" if op == "cas" else "%0, [%1], %2"
        n = 4 if op == "cas" else 3
        ins = f'{at}, "{con}"(b)' + (f', "{con}"(c)' if op == "cas" else "")
        params = f"{addr_t} addr, {ct} b" + (f", {ct} c" if op == "cas" else "")
        asm = check_operands(f"{mnemonic} {ops};", n)
        body = f'{ct} d;\n  asm volatile("{asm}" : "={con}"(d) : {ins} : "memory");\n  return d;'
        text = f"__device__ __forceinline__ {ct} {name}({params}) {{\n  {body}\n}}\n"
    else:
        asm = check_operands(f"{mnemonic} [%0], %1;", 2)
        text = (
            f"__device__ __forceinline__ void {name}({addr_t} addr, {ct} b) {{\n"
            f'  asm volatile("{asm}" :: {at}, "{con}"(b) : "memory");\n}}\n'
        )
    return Fragment(name=name, family=FAMILY, text=text)


_HALF = ("float16", "bfloat16")


def _cas_loop(name, space, op, dtype, sem, scope, ret) -> Fragment:
    """f16/bf16 min/max, which scalar ``atom`` lacks (PTX ISA 9.7.13.5: only vector forms on
    global memory): a loop of ``atom.cas.b16`` (sm_70) until no other thread intervened. The
    first guess is ``b`` itself, so no separate load is needed; NaN propagates, as in the
    interpreter (NumPy minimum/maximum)."""
    sp = "shared::cta" if space == "shared" else "global"
    at = '"r"(addr)' if space == "shared" else '"l"(addr)'
    addr_t = "uint32_t" if space == "shared" else "void*"
    asm = check_operands(f"atom.{sem}.{scope}.{sp}.cas.b16 %0, [%1], %2, %3;", 4)
    cmp = "<" if op == "min" else ">"
    if dtype == "float16":  # PTX ISA 9.7.9.21 cvt: f16 -> f32 is exact
        cvt = check_operands("cvt.f32.f16 %0, %1;", 2)
        conv = (
            f'    float x, y;\n    asm("{cvt}" : "=f"(x) : "h"(seen));\n'
            f'    asm("{cvt}" : "=f"(y) : "h"(b));\n'
        )
    else:  # bf16 is the high half of an f32
        conv = "    const float x = __uint_as_float((uint32_t)seen << 16);\n"
        conv += "    const float y = __uint_as_float((uint32_t)b << 16);\n"
    body = (
        "uint16_t old = b, seen;\n"
        "  do {\n"
        "    seen = old;\n"
        + conv
        + f"    const uint16_t v = x != x ? seen : (y != y || y {cmp} x) ? b : seen;\n"
        f'    asm volatile("{asm}" : "=h"(old) : {at}, "h"(seen), "h"(v) : "memory");\n'
        "  } while (old != seen);\n"
    )
    if ret:
        text = (
            f"__device__ __forceinline__ uint16_t {name}({addr_t} addr, uint16_t b) {{\n"
            f"  {body}  return old;\n}}\n"
        )
    else:
        text = f"__device__ __forceinline__ void {name}({addr_t} addr, uint16_t b) {{\n  {body}}}\n"
    return Fragment(name=name, family=FAMILY, text=text)


def atom_pair(space: str, dtype: str, sem: str, scope: str, ret: bool) -> Fragment:
    """The helper adding two adjacent f16/bf16 elements at a 4-byte aligned ``addr`` with one
    ``atom``/``red`` ``.add.noftz.f16x2``/``.bf16x2`` (PTX ISA 9.7.13.5; bf16x2 needs sm_90):
    ``b`` packs the element at the lower address in its low half; ``atom`` returns the old
    pair packed the same way."""
    kind = "atom" if ret else "red"
    name = f"tl_{kind}2_{space}_add_{dtype}_{sem}_{scope}"
    ty = "f16x2" if dtype == "float16" else "bf16x2"
    sp = "shared::cta" if space == "shared" else "global"
    at = '"r"(addr)' if space == "shared" else '"l"(addr)'
    addr_t = "uint32_t" if space == "shared" else "void*"
    mnemonic = f"{kind}.{sem}.{scope}.{sp}.add.noftz.{ty}"
    if ret:
        asm = check_operands(f"{mnemonic} %0, [%1], %2;", 3)
        text = (
            f"__device__ __forceinline__ uint32_t {name}({addr_t} addr, uint32_t b) {{\n"
            f'  uint32_t d;\n  asm volatile("{asm}" : "=r"(d) : {at}, "r"(b) : "memory");\n'
            "  return d;\n}\n"
        )
    else:
        asm = check_operands(f"{mnemonic} [%0], %1;", 2)
        text = (
            f"__device__ __forceinline__ void {name}({addr_t} addr, uint32_t b) {{\n"
            f'  asm volatile("{asm}" :: {at}, "r"(b) : "memory");\n}}\n'
        )
    return Fragment(name=name, family=FAMILY, text=text)


# PTX ISA 9.7.9.8 ld (.acquire) / 9.7.9.9 st (.release), memory consistency model 8.x:
# a semaphore is an int32 in global memory; the lock spins with acquire loads at gpu scope
# until the value is the one waited for, the release publishes with a release store
SEMAPHORES = register(
    FAMILY,
    "tl_semaphore",
    f"""
__device__ __forceinline__ void tl_sem_wait_eq(const int* p, int v) {{
  int x;
  do {{
    asm volatile("{check_operands("ld.acquire.gpu.global.b32 %0, [%1];", 2)}"
                 : "=r"(x) : "l"(p) : "memory");
  }} while (x != v);
}}
__device__ __forceinline__ void tl_sem_store(int* p, int v) {{
  asm volatile("fence.acq_rel.gpu;" ::: "memory");
  asm volatile("{check_operands("st.release.gpu.global.b32 [%0], %1;", 2)}"
               :: "l"(p), "r"(v) : "memory");
}}
""",
)
