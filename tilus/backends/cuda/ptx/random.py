"""Random-number family: Philox-4x32 and the 24-bit uniform conversion (plain CUDA C++).

Used only by kernels that draw random numbers: the code generator adds the fragment on demand.
"""

from __future__ import annotations

from tilus.backends.cuda.ptx.registry import register
from tilus.ir import inst_random as RN

FAMILY = "random"

_M0, _M1 = RN.Random.MULTIPLIERS
_W0, _W1 = RN.Random.KEY_STEPS

#: Philox-4x32 with counter (c0, 0, 0, 0): the same steps as the interpreter's philox4x32.
PHILOX = register(
    FAMILY,
    "tl_philox",
    f"""
__device__ __forceinline__ void tl_philox(uint64_t seed, uint32_t c0, int rounds, uint32_t* w) {{
  uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
  uint32_t c1 = 0u, c2 = 0u, c3 = 0u;
  for (int r = 0; r < rounds; ++r) {{
    const uint32_t hi0 = __umulhi({_M0:#x}u, c0), lo0 = {_M0:#x}u * c0;
    const uint32_t hi1 = __umulhi({_M1:#x}u, c2), lo1 = {_M1:#x}u * c2;
    c0 = hi1 ^ c1 ^ k0; c1 = lo1; c2 = hi0 ^ c3 ^ k1; c3 = lo0;
    k0 += {_W0:#x}u; k1 += {_W1:#x}u;
  }}
  w[0] = c0; w[1] = c1; w[2] = c2; w[3] = c3;
}}
__device__ __forceinline__ float tl_uniform24(uint32_t w) {{
  return (float)(w >> 8) * 5.9604644775390625e-08f;  // 2^-24: exact
}}
""",
)
