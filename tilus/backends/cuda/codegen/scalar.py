"""Scalar expressions to C++: types, constants, operators (C semantics, like the IR), calls."""

from __future__ import annotations

import math
import struct

import numpy as np

from tilus.dtypes import DataType, PointerType
from tilus.ir import fp8
from tilus.ir.enums import VarKind
from tilus.ir.expr import Binary, Call, Cast, Const, Select, TensorElement, Unary, Var

C_TYPES = {
    "bool": "bool",
    "boolean": "bool",
    "int8": "int8_t",
    "int16": "int16_t",
    "int32": "int",
    "int64": "int64_t",
    "uint8": "uint8_t",
    "uint16": "uint16_t",
    "uint32": "uint32_t",
    "uint64": "uint64_t",
    "float32": "float",
    "float64": "double",
    "float16": "uint16_t",  # bits; arithmetic goes through float
    "bfloat16": "uint16_t",
    "tfloat32": "float",  # a float whose low 13 mantissa bits are zero
    "float8_e4m3": "uint8_t",  # bits; converted through the sm_89 fp8 cvt
    "float8_e5m2": "uint8_t",
}
FP8 = ("float8_e4m3", "float8_e5m2")
#: Floats held as their bits in C and computed in float (16-bit and fp8).
HALF = ("float16", "bfloat16", *FP8)
#: Short PTX names of the fp8 formats (``cvt`` and ``wgmma`` type suffixes).
FP8_PTX = {"float8_e4m3": "e4m3", "float8_e5m2": "e5m2"}


def minmax(op: str, ctype_name: str, a: str, b: str) -> str:
    """C code of ``min``/``max`` (``op``) of ``a`` and ``b`` computed in C type ``ctype_name``."""
    if ctype_name == "float":
        return f"tl_f{op}({a}, {b})"
    return f"tl_{op}<{ctype_name}>({a}, {b})"


#: The fp8 <-> float helpers of one format (``{f}``: its PTX name), for :data:`HELPERS`.
_FP8_HELPER = """__device__ __forceinline__ float tl_{f}_to_f(uint8_t v) {{
  uint32_t h2; asm("cvt.rn.f16x2.{f}x2 %0, %1;" : "=r"(h2) : "h"((uint16_t)v));
  return tl_h2f((uint16_t)h2);
}}
__device__ __forceinline__ uint8_t tl_f_to_{f}(float f) {{
  uint16_t r; asm("cvt.rn.satfinite.{f}x2.f32 %0, %1, %2;" : "=h"(r) : "f"(0.0f), "f"(f));
  return (uint8_t)r;
}}
__device__ __forceinline__ void tl_{f}x2_to_f2(uint16_t v, float &lo, float &hi) {{
  uint32_t h2; asm("cvt.rn.f16x2.{f}x2 %0, %1;" : "=r"(h2) : "h"(v));
  lo = tl_h2f((uint16_t)h2); hi = tl_h2f((uint16_t)(h2 >> 16));
}}
__device__ __forceinline__ uint16_t tl_f2_to_{f}x2(float lo, float hi) {{
  uint16_t r; asm("cvt.rn.satfinite.{f}x2.f32 %0, %1, %2;" : "=h"(r) : "f"(hi), "f"(lo));
  return r;
}}
__device__ __forceinline__ void tl_{f}x2_to_h2(uint16_t v, uint16_t &lo, uint16_t &hi) {{
  uint32_t h2; asm("cvt.rn.f16x2.{f}x2 %0, %1;" : "=r"(h2) : "h"(v));
  lo = (uint16_t)h2; hi = (uint16_t)(h2 >> 16);
}}
__device__ __forceinline__ uint16_t tl_h2_to_{f}x2(uint16_t lo, uint16_t hi) {{
  uint16_t r;
  asm("cvt.rn.satfinite.{f}x2.f16x2 %0, %1;" : "=h"(r) : "r"((uint32_t)lo | ((uint32_t)hi << 16)));
  return r;
}}
"""

#: Helpers every kernel gets (conversions of 16-bit floats, min/max, the shared swizzle).
HELPERS = (
    r"""
// ---- tilus codegen helpers ----
__device__ __forceinline__ float tl_h2f(uint16_t h) {
  float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f;
}
__device__ __forceinline__ uint16_t tl_f2h(float f) {
  uint16_t h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h;
}
__device__ __forceinline__ float tl_b2f(uint16_t h) {
  return __uint_as_float(((uint32_t)h) << 16);
}
__device__ __forceinline__ uint16_t tl_f2b(float f) {
  uint16_t h; asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h;
}
// float -> tf32 (10 mantissa bits), round to nearest even like the interpreter; NaN stays NaN
__device__ __forceinline__ float tl_f2tf(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7f800000u) == 0x7f800000u) return (u & 0x7fffffu) ? __uint_as_float(0x7fc00000u) : f;
  u += 0xfffu + ((u >> 13) & 1u);
  return __uint_as_float(u & 0xffffe000u);
}
template <class T> __device__ __forceinline__ T tl_min(T a, T b) { return b < a ? b : a; }
template <class T> __device__ __forceinline__ T tl_max(T a, T b) { return a < b ? b : a; }
// float min/max: one FMNMX that propagates NaN as NumPy does (tl_min/tl_max: two instructions)
__device__ __forceinline__ float tl_fmin(float a, float b) {
  float r; asm("min.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b)); return r;
}
__device__ __forceinline__ float tl_fmax(float a, float b) {
  float r; asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b)); return r;
}
template <class T> __device__ __forceinline__ T tl_abs(T a) { return a < T(0) ? -a : a; }
// fp8 <-> float through the sm_89 pair conversions (cvt.rn.satfinite: round to nearest even,
// finite overflow and Inf saturate to the largest finite value, NaN -> 0x7F; fp8 -> f16 is
// exact). A pair's element i sits in the low byte / low half, element i + 1 in the high one.
"""
    + "".join(_FP8_HELPER.format(f=f) for f in FP8_PTX.values())
    + r"""// Hardware swizzle of a byte offset from a 1024-aligned base: W = 32, 64 or 128 bytes.
template <int W> __device__ __forceinline__ uint32_t tl_swz(uint32_t o) {
  return W == 0 ? o : o ^ (((o >> 7) & (uint32_t)(W / 16 - 1)) << 4);
}
"""
)

#: Emitted when a kernel has hidden ``fast_divmod`` divisors (tilus/passes/fast_divmod.py).
FASTDIV_HELPERS = r"""
// ---- fast_divmod by a launch-invariant divisor d: d, magic and shift come from the host ----
// shift = ceil(log2 d), magic = ceil(2^(32 + shift) / d) - 2^32 (the 33rd bit is the "+ n").
// Exact for 0 <= n < 2^31 and 1 <= d < 2^31; the sum cannot overflow since umulhi(n, m) < n.
struct tl_divisor_t { uint32_t d, magic, shift; };
__device__ __forceinline__ int tl_fastdiv(int n, tl_divisor_t v) {
  return (int)((__umulhi((uint32_t)n, v.magic) + (uint32_t)n) >> v.shift);
}
__device__ __forceinline__ int tl_fastmod(int n, tl_divisor_t v) {
  return n - tl_fastdiv(n, v) * (int)v.d;
}
"""

_F32_FUNCS = {
    "exp": "expf", "exp2": "exp2f", "log": "logf", "log2": "log2f", "sqrt": "sqrtf",
    "rsqrt": "rsqrtf", "sin": "sinf", "cos": "cosf", "tan": "tanf", "tanh": "tanhf",
    "floor": "floorf", "ceil": "ceilf", "round": "rintf", "trunc": "truncf",
}  # fmt: skip


def ctype(dtype) -> str:
    """The C++ type holding a value of ``dtype``."""
    if isinstance(dtype, PointerType):
        base = dtype.base
        if getattr(base, "nbits", 8) % 8:  # sub-byte elements: the packed bytes
            return "uint8_t*"
        return "void*" if base is None else f"{ctype(base)}*"
    try:
        return C_TYPES[dtype.name]
    except KeyError:
        raise UnsupportedDtype(dtype) from None


class UnsupportedDtype(TypeError):
    """A dtype without a C type in the CUDA backend; codegen reports it at the user's line."""

    def __init__(self, dtype):
        super().__init__(f"the CUDA backend has no C type for {dtype.name} yet")
        self.dtype = dtype


def to_float(code: str, dtype: DataType) -> str:
    """Code converting a value of a 16-bit float dtype to float (other types unchanged)."""
    if dtype.name == "float16":
        return f"tl_h2f({code})"
    if dtype.name == "bfloat16":
        return f"tl_b2f({code})"
    if dtype.name in FP8_PTX:
        return f"tl_{FP8_PTX[dtype.name]}_to_f({code})"
    return code


def from_float(code: str, dtype: DataType) -> str:
    """Code rounding a float to a 16-bit float dtype's bits (other types unchanged)."""
    if dtype.name == "float16":
        return f"tl_f2h({code})"
    if dtype.name == "bfloat16":
        return f"tl_f2b({code})"
    if dtype.name == "tfloat32":
        return f"tl_f2tf({code})"
    if dtype.name in FP8_PTX:
        return f"tl_f_to_{FP8_PTX[dtype.name]}({code})"
    return code


def const(value, dtype: DataType) -> str:
    """A C++ literal of ``dtype``."""
    if isinstance(dtype, PointerType):
        return f"(({ctype(dtype)}){int(value)}ull)"
    n = dtype.name
    if dtype.kind == "bool":
        return "true" if value else "false"
    if n in FP8:
        return f"(uint8_t){int(fp8.encode(np.array([value], np.float32), dtype)[0]):#04x}"
    if n in HALF:
        bits = (
            int(np.array(value, np.float16).view(np.uint16))
            if n == "float16"
            else struct.unpack("<I", struct.pack("<f", float(value)))[0] >> 16
        )
        return f"(uint16_t){bits:#06x}"
    if dtype.is_float():
        v = float(value)
        if math.isnan(v):
            return (
                "__int_as_float(0x7fc00000)"
                if n == "float32"
                else "__longlong_as_double(0x7ff8000000000000ll)"
            )
        if math.isinf(v):
            s = "-" if v < 0 else ""
            return f"({s}__int_as_float(0x7f800000))" if n == "float32" else f"({s}(1.0/0.0))"
        text = repr(v)
        if "e" not in text and "." not in text:
            text += ".0"
        return f"{text}f" if n == "float32" else text
    v = int(value)
    suffix = {"uint32": "u", "int64": "ll", "uint64": "ull"}.get(n, "")
    text = f"{v}{suffix}"
    if n == "int32" and v == -(2**31):
        text = "(-2147483647 - 1)"
    elif n not in ("int32", "uint32", "int64", "uint64"):
        text = f"({ctype(dtype)}){v}"
    return f"({text})" if v < 0 else text


class ExprPrinter:
    """Prints IR scalar expressions; ``element`` prints a TensorElement (a register read)."""

    def __init__(self, ctx, element):
        self.ctx = ctx
        self.element = element

    def __call__(self, e) -> str:
        return self.expr(e)

    def expr(self, e) -> str:
        """C++ code of one expression."""
        if isinstance(e, int | float) and not isinstance(e, bool):
            return str(e)
        t = type(e)
        if t is Const:
            return const(e.value, e.dtype)
        if t is Var:
            if e.kind == VarKind.BUILTIN:
                return f"(int){e.name}"
            return self.ctx.name(e)
        if t is Binary:
            return self.binary(e)
        if t is Unary:
            a = self.expr(e.a)
            if e.dtype.name in HALF and e.op == "-":
                return from_float(f"(-{to_float(a, e.dtype)})", e.dtype)
            return f"({e.op}{a})"
        if t is Select:
            return f"({self.expr(e.cond)} ? {self.expr(e.a)} : {self.expr(e.b)})"
        if t is Cast:
            return self.cast(self.expr(e.a), e.a.dtype, e.dtype)
        if t is Call:
            return self.call(e)
        if t is TensorElement:
            return self.element(e)
        raise self.ctx.error(f"cannot generate code for the expression {e!r}")

    def binary(self, e: Binary) -> str:
        """``a op b``; 16-bit floats are computed in float and rounded back."""
        a, b = self.expr(e.a), self.expr(e.b)
        at, bt = e.a.dtype, e.b.dtype
        halves = [t for t in (at, bt, e.dtype) if isinstance(t, DataType) and t.name in HALF]
        if halves:
            # 16-bit floats are bits in C: compute in float, round to the result type
            a, b = to_float(a, at), to_float(b, bt)
            if e.op == "%":
                r = f"fmodf({a}, {b})"
            else:
                r = f"({a} {e.op} {b})"
            return from_float(r, e.dtype) if e.dtype.name in HALF else r
        if e.op in ("/", "%") and isinstance(e.dtype, DataType) and e.dtype.is_float():
            if e.op == "%":
                return f"fmod{'f' if e.dtype.name == 'float32' else ''}({a}, {b})"
        r = f"({a} {e.op} {b})"
        if isinstance(e.dtype, DataType) and e.dtype.is_integer() and e.dtype.nbits < 32:
            r = f"(({ctype(e.dtype)}){r})"
        return r

    def cast(self, code: str, src, dst: DataType) -> str:
        """Code converting ``code`` of type ``src`` to ``dst``."""
        if src == dst:
            return code
        if isinstance(dst, PointerType) or isinstance(src, PointerType):
            return f"(({ctype(dst)}){code})"
        if dst.kind == "bool":
            return f"({to_float(code, src)} != 0)"
        if src.name in HALF and dst.name in HALF:
            return from_float(to_float(code, src), dst)
        if dst.name in HALF:
            return from_float(f"(float)({code})", dst)
        if src.name in HALF:
            return f"(({ctype(dst)}){to_float(code, src)})"
        return f"(({ctype(dst)}){code})"

    def call(self, e: Call) -> str:
        """A built-in scalar function call."""
        f = e.func
        args = [self.expr(a) for a in e.args]
        dt = e.dtype
        if f in ("fastdiv", "fastmod"):
            d = self.ctx.program.fastdiv.divisor_of(e)
            if d is not None:  # launch-invariant divisor: host-computed magic numbers
                return f"tl_{f}({args[0]}, tl_div{d.index})"
            # constant divisors (strength-reduced by the compiler) and ones that vary in-kernel
            return f"({args[0]} {'/' if f == 'fastdiv' else '%'} {args[1]})"
        if f in ("isnan", "isinf"):
            x = to_float(args[0], e.args[0].dtype)
            return f"{f}({x})"
        if dt.name in HALF:
            args = [to_float(a, x.dtype) for a, x in zip(args, e.args)]
        if f in ("min", "max", "abs"):
            ct = "float" if dt.name in HALF else ctype(dt)
            r = f"tl_{f}<{ct}>({', '.join(args)})"
            return from_float(r, dt) if dt.name in HALF else r
        name = _F32_FUNCS.get(f)
        if name is None:
            raise self.ctx.error(f"scalar function {f} is not supported by the CUDA backend")
        if dt.name == "float64":
            name = name[:-1]
        r = f"{name}({', '.join(args)})"
        return from_float(r, dt) if dt.name in HALF else r
