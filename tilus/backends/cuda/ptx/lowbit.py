"""Low-bit family: sub-byte float codes to and from float32, packed-bit stores, f16x2 tricks.

Plain CUDA C++ except ``tl_hsub2``, ``tl_hmul2`` and ``tl_hfma2`` (``sub``/``mul``/``fma.rn.f16x2``,
PTX ISA 9.7.4 half-precision arithmetic, subnormals kept: no ``.ftz``); the CPU
emulator of the tests compiles the rest as it is. The code generator calls these only for
kernels with sub-byte tiles.
"""

from __future__ import annotations

from tilus.backends.cuda.ptx.registry import register

FAMILY = "lowbit"

#: A sub-byte float (1 sign, E exponent, M mantissa bits, bias 2^(E-1) - 1; IEEE: the all-ones
#: exponent is inf/NaN, else every code is finite) to float32: exact (every value is a float32).
DECODE = register(
    FAMILY,
    "tl_dec_sf",
    r"""
template <int E, int M, bool IEEE> __device__ __forceinline__ float tl_dec_sf(uint32_t c) {
  const int BIAS = (1 << (E - 1)) - 1;
  const uint32_t ex = (c >> M) & ((1u << E) - 1u), man = c & ((1u << M) - 1u);
  float v;
  if (IEEE && ex == (1u << E) - 1u) {
    if (man) return __uint_as_float(0x7fc00000u);  // one NaN, positive, as the interpreter's
    v = __uint_as_float(0x7f800000u);
  } else {
    const int k = (ex ? (int)ex : 1) - BIAS - M;  // value = significand * 2^k, k >= -16
    v = (float)(ex ? (man | (1u << M)) : man) * __uint_as_float((uint32_t)(127 + k) << 23);
  }
  return ((c >> (E + M)) & 1u) ? -v : v;
}
""",
)

#: float32 to a sub-byte float code, rounding to nearest even on the unbounded-exponent grid
#: of the format (subnormals included) like ``tilus.ir.cscalar.round_float_format``: beyond
#: the largest finite value it saturates (IEEE, E = 5: becomes inf); NaN becomes +max
#: (IEEE: the positive NaN with all mantissa bits set).
ENCODE = register(
    FAMILY,
    "tl_enc_sf",
    r"""
template <int E, int M, bool IEEE> __device__ __forceinline__ uint32_t tl_enc_sf(float x) {
  const int BIAS = (1 << (E - 1)) - 1;
  const uint32_t INF = ((1u << E) - 1u) << M;
  const uint32_t MAXMAG = IEEE ? INF - 1u : (1u << (E + M)) - 1u;
  const uint32_t sign = (__float_as_uint(x) >> 31) << (E + M);
  const float a = fabsf(x);
  if (a != a) return IEEE ? (INF | ((1u << M) - 1u)) : MAXMAG;
  const int e = (int)((__float_as_uint(a) >> 23) & 255u) - 127;  // a = 1.f * 2^e (normal a)
  uint32_t mag;
  if (e > BIAS + 1) {
    mag = 0xffffffffu;  // out of range (inf included): saturated below
  } else if (e < 1 - BIAS) {  // the format's subnormals: multiples of 2^(1 - BIAS - M)
    mag = (uint32_t)__float2int_rn(a * __uint_as_float((uint32_t)(127 + M + BIAS - 1) << 23));
  } else {  // a / 2^(e - M) lies in [2^M, 2^(M+1)]: its rounding carries into the exponent
    const float q = a * __uint_as_float((uint32_t)(127 + M - e) << 23);
    mag = ((uint32_t)(e + BIAS) << M) + (uint32_t)__float2int_rn(q) - (1u << M);
  }
  if (mag > MAXMAG) mag = IEEE ? INF : MAXMAG;
  return sign | mag;
}
""",
)

#: Store the low ``nbits`` bits of ``v`` at bit ``bit`` of the bytes at ``base`` with atomic
#: compare-and-swap on the aligned 32-bit word(s) holding them: other threads may be writing
#: the other bits of those words (a packed element shares its byte with its neighbours).
STORE_BITS = register(
    FAMILY,
    "tl_st_bits",
    r"""
__device__ __forceinline__ void tl_or_bits32(uint32_t* w, uint32_t mask, uint32_t v) {
  uint32_t old = *(volatile uint32_t*)w, seen;
  do {
    seen = old;
    old = atomicCAS(w, seen, (seen & ~mask) | (v & mask));
  } while (old != seen);
}
__device__ __forceinline__ void tl_st_bits(uint8_t* base, int64_t bit, uint32_t v, int nbits) {
  const uint64_t addr = (uint64_t)(base + (bit >> 3));
  uint32_t* w = (uint32_t*)(addr & ~(uint64_t)3);
  const int sh = (int)((addr & 3u) * 8u) + (int)(bit & 7);
  const uint32_t m = (1u << nbits) - 1u;
  tl_or_bits32(w, m << sh, (v & m) << sh);
  if (sh + nbits > 32) tl_or_bits32(w + 1, m >> (32 - sh), (v & m) >> (32 - sh));
}
""",
)


def _f16x2_op(name: str, ptx: str, op: str) -> str:
    """A helper ``name(a, b)`` applying ``ptx`` (``sub``/``mul``) to two f16 pairs in one
    instruction on the GPU, half by half in float (C operator ``op``) in the CPU emulator."""
    return f"""
__device__ __forceinline__ uint32_t {name}(uint32_t a, uint32_t b) {{
#ifdef __CUDA_ARCH__
  uint32_t d;
  asm("{ptx}.rn.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
#else
  return (uint32_t)tl_f2h(tl_h2f((uint16_t)a) {op} tl_h2f((uint16_t)b)) |
         ((uint32_t)tl_f2h(tl_h2f((uint16_t)(a >> 16)) {op} tl_h2f((uint16_t)(b >> 16))) << 16);
#endif
}}
"""


#: Two f16 subtractions in one instruction (the u4/i4 -> f16 magic-number conversion).
HSUB2 = register(FAMILY, "tl_hsub2", _f16x2_op("tl_hsub2", "sub", "-"))

#: Two f16 multiplications in one instruction (sub-byte float -> f16 by a power of two).
HMUL2 = register(FAMILY, "tl_hmul2", _f16x2_op("tl_hmul2", "mul", "*"))

#: The u4/i4 -> f16 cast's 32-bit constants (``_int4_to_f16``: the nibble mask, the exponent
#: key of an unsigned and a signed code, the (1, 1/16) multiplier, the two biases) in constant
#: memory: each instruction reads one as a constant-bank operand, where ptxas would otherwise
#: rematerialize the second immediate of every logic op and fma into a register first.
I4_CONSTANTS = register(
    FAMILY,
    "tl_i4k",
    r"""
__constant__ struct tl_i4k { uint32_t mask, key_u, key_s, mul, bias_u, bias_s; } tl_i4k = {
    0x00f0000fu, 0x64006400u, 0x64806408u, 0x2c003c00u, 0xd400e400u, 0xd480e408u};
""",
)

#: Two f16 fused multiply-adds in one instruction (``fma.rn.f16x2``; the u4/i4 -> f16 cast of
#: a byte's two codes, whose products and sums are exact, so the emulator's float is too).
HFMA2 = register(
    FAMILY,
    "tl_hfma2",
    r"""
__device__ __forceinline__ uint32_t tl_hfma2(uint32_t a, uint32_t b, uint32_t c) {
#ifdef __CUDA_ARCH__
  uint32_t d;
  asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
#else
  return (uint32_t)tl_f2h(tl_h2f((uint16_t)a) * tl_h2f((uint16_t)b) + tl_h2f((uint16_t)c)) |
         ((uint32_t)tl_f2h(tl_h2f((uint16_t)(a >> 16)) * tl_h2f((uint16_t)(b >> 16)) +
                           tl_h2f((uint16_t)(c >> 16))) << 16);
#endif
}
""",
)

#: float32 to the code of a sub-byte float without inf/NaN codes, branch-free and equal to
#: ``tl_enc_sf`` (``IEEE`` false): |x| clamped to the largest value (NaN -> +max, as fminf
#: returns the number); a normal result rounds the float32 mantissa to M bits (the carry
#: goes into the exponent), a subnormal one is rounded by a float32 addition whose ulp is
#: the format's quantum.
ENCODE_FAST = register(
    FAMILY,
    "tl_enc_sfn",
    r"""
template <int E, int M> __device__ __forceinline__ uint32_t tl_enc_sfn(float x) {
  constexpr int BIAS = (1 << (E - 1)) - 1;
  constexpr uint32_t MAXBITS = (uint32_t)(127 + (1 << E) - 1 - BIAS) << 23 |
                               (((1u << M) - 1u) << (23 - M));
  constexpr uint32_t MINNORM = (uint32_t)(127 + 1 - BIAS) << 23;
  constexpr uint32_t MAGIC = (uint32_t)(127 + 1 - BIAS - M + 23) << 23;
  constexpr uint32_t REBIAS = (uint32_t)(127 - BIAS) << M;
  const float a = fminf(fabsf(x), __uint_as_float(MAXBITS));
  const uint32_t ab = __float_as_uint(a);
  const uint32_t nrm = ((ab + ((1u << (22 - M)) - 1u) + ((ab >> (23 - M)) & 1u)) >> (23 - M)) - REBIAS;
  const uint32_t sub = __float_as_uint(a + __uint_as_float(MAGIC)) - MAGIC;
  const uint32_t sign = (x != x) ? 0u : (__float_as_uint(x) >> 31) << (E + M);
  return sign | (ab < MINNORM ? sub : nrm);
}
""",
)

#: Two f16 codes (the halves of a word) to codes of a sub-byte float without inf/NaN codes
#: (E < 5 exponent bits), in the halves of the result, equal to ``tl_enc_sf`` of each half:
#: integer and f16x2 operations on both halves at once (no carry crosses a half). |x| is
#: clamped to the largest value by ``min.f16x2`` (NaN -> the number); a NaN half loses its
#: sign (bit 15 of |x| + 0x3ff); a normal half's mantissa rounds to M bits (nearest even) on
#: its bits, a subnormal one by an f16 addition whose ulp is the format's quantum; a lane
#: mask (``prmt`` replicating bit 15 of |x| + 0x8000 - min normal) picks one.
ENCODE_F16X2 = register(
    FAMILY,
    "tl_enc_h2sf",
    r"""
__device__ __forceinline__ uint32_t tl_hmin2(uint32_t a, uint32_t b) {
#ifdef __CUDA_ARCH__
  uint32_t d;
  asm("min.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
#else
  return (uint32_t)tl_f2h(fminf(tl_h2f((uint16_t)a), tl_h2f((uint16_t)b))) |
         ((uint32_t)tl_f2h(fminf(tl_h2f((uint16_t)(a >> 16)), tl_h2f((uint16_t)(b >> 16)))) << 16);
#endif
}
__device__ __forceinline__ uint32_t tl_hadd2(uint32_t a, uint32_t b) {
#ifdef __CUDA_ARCH__
  uint32_t d;
  asm("add.rn.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
#else
  return (uint32_t)tl_f2h(tl_h2f((uint16_t)a) + tl_h2f((uint16_t)b)) |
         ((uint32_t)tl_f2h(tl_h2f((uint16_t)(a >> 16)) + tl_h2f((uint16_t)(b >> 16))) << 16);
#endif
}
__device__ __forceinline__ uint32_t tl_lanes_of_bit15(uint32_t x) {
#ifdef __CUDA_ARCH__
  uint32_t d;
  asm("prmt.b32 %0, %1, %2, 0xbb99;" : "=r"(d) : "r"(x), "r"(0u));
  return d;
#else
  return ((x & 0x8000u) ? 0xffffu : 0u) | ((x & 0x80000000u) ? 0xffff0000u : 0u);
#endif
}
__device__ __forceinline__ uint32_t tl_prmt(uint32_t a, uint32_t b, uint32_t sel) {
#ifdef __CUDA_ARCH__
  uint32_t d;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
  return d;
#else
  const uint64_t x = (uint64_t)a | ((uint64_t)b << 32);
  uint32_t d = 0;
  for (int i = 0; i < 4; ++i) d |= (uint32_t)((x >> (8 * ((sel >> (4 * i)) & 7u))) & 0xffu) << (8 * i);
  return d;
#endif
}
template <int E, int M> __device__ __forceinline__ uint32_t tl_enc_h2sf(uint32_t w) {
  constexpr uint32_t BIAS = (1u << (E - 1)) - 1u;
  constexpr uint32_t X2 = 0x10001u;
  constexpr uint32_t MAXH = (15u + (1u << E) - 1u - BIAS) << 10 | (((1u << M) - 1u) << (10 - M));
  constexpr uint32_t MINNORM = (15u + 1u - BIAS) << 10;
  constexpr uint32_t MAGIC = (15u + 1u - BIAS - M + 10u) << 10;
  constexpr uint32_t REBIAS = (15u - BIAS) << M;
  const uint32_t a0 = w & 0x7fff7fffu;
  const uint32_t sign = (w & ~(a0 + 0x03ff * X2)) & 0x80008000u;  // NaN halves: no sign
  const uint32_t a = tl_hmin2(a0, MAXH * X2);
  const uint32_t sub = tl_hadd2(a, MAGIC * X2) - (MAGIC - REBIAS) * X2;  // + REBIAS
  const uint32_t nrm = ((a + ((1u << (9 - M)) - 1u) * X2 + ((a >> (10 - M)) & X2)) >> (10 - M)) &
                       (((1u << (6 + M)) - 1u) * X2);
  const uint32_t big = tl_lanes_of_bit15(a + (0x8000u - MINNORM) * X2);
  const uint32_t mag = ((nrm & big) | (sub & ~big)) - REBIAS * X2;
  return (sign >> (15 - E - M)) | mag;
}
""",
)

#: Two f16 codes to codes of a sub-byte float with 2 exponent bits (e2m1, e2m2, e2m3, e2m4),
#: equal to ``tl_enc_h2sf<2, M>`` in fewer instructions: the format's three binades (the
#: subnormals share the first one's quantum) are the pieces of a concave map of |x| onto the
#: codes, ``code = min(2^M a, 2^(M-1) a + 2^M, 2^(M-2) a + 2^(M+1))`` (slopes halving, the
#: pieces meeting at 2 and 4), and each piece is rounded to an integer by one ``fma.rn.f16x2``
#: landing in [1024, 2048), where an f16's ulp is 1 (round to nearest even once: the even code
#: is the format's even mantissa); rounding is monotonic, so the min of the rounded pieces is
#: the rounded min. |x| is clamped to the largest value first (NaN -> the number, its sign
#: dropped, as ``tl_enc_h2sf``). The CPU emulator rounds each half's piece with ``rint``.
ENCODE_F16X2_E2 = register(
    FAMILY,
    "tl_enc_h2e2",
    r"""
template <int M> __device__ __forceinline__ uint32_t tl_enc_h2e2(uint32_t w) {
  constexpr uint32_t X2 = 0x10001u;
  constexpr uint32_t MAXH = 17u << 10 | (((1u << M) - 1u) << (10 - M));  // 2^2 (2 - 2^-M)
  constexpr uint32_t K = 0x6400u;  // 1024.0: the codes land in its binade
  const uint32_t a0 = w & 0x7fff7fffu;
  const uint32_t sign = (w & ~(a0 + 0x03ff * X2)) & 0x80008000u;  // NaN halves: no sign
  const uint32_t a = tl_hmin2(a0, MAXH * X2);
#ifdef __CUDA_ARCH__
  const uint32_t c1 = tl_hfma2(a, ((15u + M) << 10) * X2, K * X2);
  const uint32_t c2 = tl_hfma2(a, ((14u + M) << 10) * X2, (K + (1u << M)) * X2);
  const uint32_t c3 = tl_hfma2(a, ((13u + M) << 10) * X2, (K + (2u << M)) * X2);
  const uint32_t c = tl_hmin2(tl_hmin2(c1, c2), c3) & (((4u << M) - 1u) * X2);
#else
  uint32_t c = 0u;
  for (int h = 0; h < 2; ++h) {
    const double v = (double)tl_h2f((uint16_t)(a >> (16 * h)));
    const double k1 = rint(v * (double)(1 << M)), k2 = rint(v * (double)(1 << M) / 2) + (1 << M),
                 k3 = rint(v * (double)(1 << M) / 4) + (2 << M);
    c |= (uint32_t)fmin(fmin(k1, k2), k3) << (16 * h);
  }
#endif
  return (sign >> (13 - M)) | c;
}
""",
)


def small_int_pair_constants(nb: int) -> list[tuple[int, int, int, int] | None]:
    """The four words (mask, key, multiplier, bias) of ``tl_ik<nb>``'s entry for a pair of
    ``nb``-bit integer codes whose first starts at bit ``o`` (0-7) of a byte, [unsigned,
    signed][o]; None where a code would not fit under f16's 10 mantissa bits.

    After a byte permute has put the 16 bits holding each code in one half of a word (the
    first code at bit ``o``, the second at ``(o + nb) % 8`` of its half), ``(w & mask) ^ key``
    keeps the two codes under the exponent bits of 1024.0 (each half is ``1024 + u * 2^o``)
    and flips a signed code's sign bit (``u = c + 2^(nb-1)``), and one ``fma.rn.f16x2`` by
    ``2^-o`` plus ``-(1024 * 2^-o + bias)`` leaves the integer exactly."""
    import numpy as np

    def f16(v: float) -> int:
        return int(np.array(v, np.float16).view(np.uint16))

    out = []
    for signed in (False, True):
        for o0 in range(8):
            o1 = (o0 + nb) % 8
            if o0 + nb > 10 or o1 + nb > 10:
                out.append(None)
                continue
            m = (1 << nb) - 1
            s = 1 << (nb - 1) if signed else 0
            flip = ((1 << (o0 + nb - 1)) | (1 << (16 + o1 + nb - 1))) if signed else 0
            mul = f16(2.0**-o0) | f16(2.0**-o1) << 16
            bias = f16(-(1024 * 2.0**-o0 + s)) | f16(-(1024 * 2.0**-o1 + s)) << 16
            out.append(((m << o0) | (m << (16 + o1)), 0x64006400 | flip, mul, bias))
    return out


def _small_int_table(nb: int) -> str:
    rows = [e or (0, 0, 0, 0) for e in small_int_pair_constants(nb)]
    body = ",\n    ".join("{" + ", ".join(f"{v:#010x}u" for v in r) + "}" for r in rows)
    return f"__constant__ struct tl_ik{nb} {{ uint32_t k[16][4]; }} tl_ik{nb} = {{{{\n    {body}}}}};\n"


#: The constants of the paired magic-number cast of ``nb``-bit integers to f16
#: (``lowbit_rules._small_int_to_half``), in constant memory for the reason of ``tl_i4k``:
#: ``tl_ik<nb>.k[8 * signed + o]`` is (mask, key, multiplier, bias).
SMALL_INT_CONSTANTS = {
    nb: register(FAMILY, f"tl_ik{nb}", _small_int_table(nb)) for nb in (1, 2, 3, 5, 6, 7)
}
