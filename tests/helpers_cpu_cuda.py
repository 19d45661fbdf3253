"""Run a generated CUDA kernel on the CPU: its body compiled by g++ with one std::thread per
CUDA thread (barriers, warp shuffles and shared memory emulated), for checking the code the
CUDA backend emits without a GPU. Only the plain-C++ subset is emulated (register tiles,
global loads/stores, shuffles, __syncthreads/named barriers, shared scratch, cp.async done
synchronously), not TMA,
mbarriers or tensor cores."""

from __future__ import annotations

import ctypes
import hashlib
import pathlib
import re
import shutil
import subprocess
import tempfile

import numpy as np

HEADER = r"""
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <cmath>
#include <thread>
#include <vector>
#include <barrier>
#include <memory>
#include <map>
#include <mutex>
#define __device__
#define __constant__
#define __forceinline__ inline
#define __restrict__
#define __builtin_assume(x) ((void)0)
struct tl_dim3 { unsigned x, y, z; };
static thread_local tl_dim3 threadIdx, blockIdx;
static tl_dim3 gridDim;
static thread_local uint8_t* tl_smem_base;
static std::barrier<>* tl_block_bar;
static std::vector<std::unique_ptr<std::barrier<>>>* tl_warp_bars;
static std::vector<uint64_t>* tl_lanes;
static inline void __syncthreads() { tl_block_bar->arrive_and_wait(); }
static inline void tl_bar_sync(int, int) { tl_block_bar->arrive_and_wait(); }
static inline void __syncwarp() { (*tl_warp_bars)[threadIdx.x / 32]->arrive_and_wait(); }
static inline void __syncwarp(unsigned mask) {  // the lanes of ``mask`` (blocks run in turn)
  if (mask == 0xffffffffu) { __syncwarp(); return; }
  static std::mutex mu;
  static std::map<uint64_t, std::unique_ptr<std::barrier<>>> bars;
  std::barrier<>* b;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto& p = bars[((uint64_t)(threadIdx.x / 32) << 32) | mask];
    if (!p) p.reset(new std::barrier<>(__builtin_popcount(mask)));
    b = p.get();
  }
  b->arrive_and_wait();
}
template <class T> static inline T __shfl_xor_sync(unsigned, T v, int m) {
  unsigned t = threadIdx.x, w = t / 32;
  uint64_t bits = 0; std::memcpy(&bits, &v, sizeof(T));
  (*tl_lanes)[t] = bits;
  (*tl_warp_bars)[w]->arrive_and_wait();
  uint64_t o = (*tl_lanes)[w * 32 + ((t % 32) ^ m)];
  (*tl_warp_bars)[w]->arrive_and_wait();
  T r; std::memcpy(&r, &o, sizeof(T)); return r;
}
template <class T> static inline T __shfl_sync(unsigned, T v, int lane) {  // whole warps
  unsigned t = threadIdx.x, w = t / 32;
  uint64_t bits = 0; std::memcpy(&bits, &v, sizeof(T));
  (*tl_lanes)[t] = bits;
  (*tl_warp_bars)[w]->arrive_and_wait();
  uint64_t o = (*tl_lanes)[w * 32 + (lane & 31)];
  (*tl_warp_bars)[w]->arrive_and_wait();
  T r; std::memcpy(&r, &o, sizeof(T)); return r;
}
static inline uint32_t tl_smem_addr(const void* p) {
  return (uint32_t)((const uint8_t*)p - tl_smem_base);
}
static inline float __uint_as_float(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }
static inline uint32_t __float_as_uint(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
static inline float __int_as_float(int u) { float f; std::memcpy(&f, &u, 4); return f; }
static inline double __longlong_as_double(long long u) { double f; std::memcpy(&f, &u, 8); return f; }
static inline float tl_h2f(uint16_t h) { _Float16 x; std::memcpy(&x, &h, 2); return (float)x; }
static inline uint16_t tl_f2h(float f) { _Float16 x = (_Float16)f; uint16_t h; std::memcpy(&h, &x, 2); return h; }
// the codegen's one-instruction fp16 ops: the float op rounded (the same bits)
static inline uint16_t tl_hmul1(uint16_t a, uint16_t b) { return tl_f2h(tl_h2f(a) * tl_h2f(b)); }
static inline uint16_t tl_hadd1(uint16_t a, uint16_t b) { return tl_f2h(tl_h2f(a) + tl_h2f(b)); }
static inline uint16_t tl_hsub1(uint16_t a, uint16_t b) { return tl_f2h(tl_h2f(a) - tl_h2f(b)); }
static inline float tl_b2f(uint16_t h) { return __uint_as_float(((uint32_t)h) << 16); }
static inline uint16_t tl_f2b(float f) {
  uint32_t u = __float_as_uint(f);
  if (std::isnan(f)) return 0x7fc0;
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
// the pair ops (f16x2 / bf16x2): each half the float op rounded
#define TL_PAIR(name, op, to, from) \
  static inline void name(uint16_t &o0, uint16_t &o1, uint16_t a0, uint16_t a1, uint16_t b0, \
                          uint16_t b1) { \
    uint16_t r0 = to(from(a0) op from(b0)), r1 = to(from(a1) op from(b1)); o0 = r0; o1 = r1; }
TL_PAIR(tl_hmul_pair, *, tl_f2h, tl_h2f) TL_PAIR(tl_hadd_pair, +, tl_f2h, tl_h2f)
TL_PAIR(tl_hsub_pair, -, tl_f2h, tl_h2f) TL_PAIR(tl_bmul_pair, *, tl_f2b, tl_b2f)
TL_PAIR(tl_badd_pair, +, tl_f2b, tl_b2f) TL_PAIR(tl_bsub_pair, -, tl_f2b, tl_b2f)
static inline uint16_t tl_badd1(uint16_t a, uint16_t b) { return tl_f2b(tl_b2f(a) + tl_b2f(b)); }
static inline uint16_t tl_hfma1(uint16_t a, uint16_t b, uint16_t c) {
  _Float16 x, y, z; std::memcpy(&x, &a, 2); std::memcpy(&y, &b, 2); std::memcpy(&z, &c, 2);
  _Float16 r = (_Float16)((double)x * (double)y + (double)z); uint16_t h; std::memcpy(&h, &r, 2);
  return h;
}
static inline uint16_t tl_bfma1(uint16_t a, uint16_t b, uint16_t c) {
  return tl_f2b((float)((double)tl_b2f(a) * tl_b2f(b) + tl_b2f(c)));
}
#define TL_FMA_PAIR(name, one) \
  static inline void name(uint16_t &o0, uint16_t &o1, uint16_t a0, uint16_t a1, uint16_t b0, \
                          uint16_t b1, uint16_t c0, uint16_t c1) { \
    uint16_t r0 = one(a0, b0, c0), r1 = one(a1, b1, c1); o0 = r0; o1 = r1; }
TL_FMA_PAIR(tl_hfma_pair, tl_hfma1) TL_FMA_PAIR(tl_bfma_pair, tl_bfma1)
template <class T> static inline void tl_unpack2(uint32_t w, T &lo, T &hi) {
  uint16_t a = (uint16_t)(w & 0xffffu), b = (uint16_t)(w >> 16);
  std::memcpy(&lo, &a, 2); std::memcpy(&hi, &b, 2);
}
static inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
using std::isinf;
using std::isnan;
static inline float tl_ex2(float x) { return std::exp2(x); }
static inline float tl_lg2(float x) { return std::log2(x); }
template <class T> static inline T tl_min(T a, T b) { return b < a ? b : a; }
template <class T> static inline T tl_max(T a, T b) { return a < b ? b : a; }
static inline float tl_fmin(float a, float b) { return a != a || b != b ? NAN : (b < a ? b : a); }
static inline float tl_fmax(float a, float b) { return a != a || b != b ? NAN : (a < b ? b : a); }
template <class T> static inline T tl_abs(T a) { return a < T(0) ? -a : a; }
template <int W> static inline uint32_t tl_swz(uint32_t o) {
  return W == 0 ? o : o ^ (((o >> 7) & (uint32_t)(W / 16 - 1)) << 4);
}
struct uint2 { uint32_t x, y; };
struct uint4 { uint32_t x, y, z, w; };
static inline uint2 make_uint2(uint32_t x, uint32_t y) { return {x, y}; }
static inline uint4 make_uint4(uint32_t x, uint32_t y, uint32_t z, uint32_t w) {
  return {x, y, z, w};
}
template <class T> static inline void tl_st_if(T* p, T v, uint32_t ok) { if (ok) *p = v; }
#define TL_ST(s, T) static inline void tl_st_global_if_##s(T* p, T v, uint32_t ok) { tl_st_if(p, v, ok); }
TL_ST(i8, int8_t) TL_ST(u8, uint8_t) TL_ST(bool, bool) TL_ST(i16, int16_t) TL_ST(u16, uint16_t)
TL_ST(i32, int) TL_ST(u32, uint32_t) TL_ST(i64, int64_t) TL_ST(u64, uint64_t) TL_ST(f32, float)
TL_ST(f64, double)
static inline void tl_st_global_if_pair(uint16_t* p, uint32_t w, uint32_t both, uint32_t lo,
                                        uint32_t hi) {
  if (both) { std::memcpy(p, &w, 4); return; }
  if (lo) p[0] = (uint16_t)(w & 0xffffu);
  if (hi) p[1] = (uint16_t)(w >> 16);
}
// cache-hinted vector accesses (load_global/store_global cache=): the plain access
static inline uint64_t tl_policy_evict_first_l2() { return 0; }
static inline uint64_t tl_policy_evict_last_l2() { return 0; }
#define TL_HINT(c) \
  static inline uint2 tl_ld_##c##_v2(const void* p, uint64_t) { uint2 r; std::memcpy(&r, p, 8); return r; } \
  static inline uint4 tl_ld_##c##_v4(const void* p, uint64_t) { uint4 r; std::memcpy(&r, p, 16); return r; } \
  static inline void tl_st_##c##_v2(void* p, uint2 v, uint64_t) { std::memcpy(p, &v, 8); } \
  static inline void tl_st_##c##_v4(void* p, uint4 v, uint64_t) { std::memcpy(p, &v, 16); }
TL_HINT(evict_first) TL_HINT(evict_last) TL_HINT(no_allocate) TL_HINT(stream)
static inline int __float2int_rn(float x) { return (int)std::nearbyint(x); }
static inline int __float2int_rz(float x) {
  if (std::isnan(x)) return 0;
  if (x >= 2147483647.0f) return 2147483647;
  if (x <= -2147483648.0f) return (int)-2147483648LL;
  return (int)x;
}
static inline uint32_t atomicCAS(uint32_t* p, uint32_t cmp, uint32_t v) {
  __atomic_compare_exchange_n(p, &cmp, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
  return cmp;
}
static inline long long __double_as_longlong(double d) { long long u; std::memcpy(&u, &d, 8); return u; }
// cp.async done at once (a legal order of the asynchronous copy): the bytes past src_size zero
#define TL_CP(N) static inline void tl_cp_async_##N(uint32_t dst, const void* src, uint32_t n) { \
  std::memset(tl_smem_base + dst, 0, N); std::memcpy(tl_smem_base + dst, src, n); }
TL_CP(4) TL_CP(8) TL_CP(16)
static inline void tl_cp_async_commit() {}
template <int N> static inline void tl_cp_async_wait() {}
static inline void tl_cp_async_wait_all() {}
// cvt.rn.satfinite.e4m3x2.f32: nearest even, |x| past 448 saturated, NaN to 0x7f
static inline uint32_t tl_e4m3_emul(float x) {
  if (x != x) return 0x7fu;
  const uint32_t sign = (__float_as_uint(x) >> 31) << 7;
  const float a = std::fmin(std::fabs(x), 448.0f);
  const uint32_t ab = __float_as_uint(a);
  if (ab < (uint32_t)(127 - 6) << 23) {  // subnormal: multiples of 2^-9, rounded by an addition
    const uint32_t magic = (uint32_t)(127 - 9 + 23) << 23;
    return sign | (__float_as_uint(a + __uint_as_float(magic)) - magic);
  }
  return sign | (((ab + 0x7ffffu + ((ab >> 20) & 1u)) >> 20) - ((uint32_t)(127 - 7) << 3));
}
static inline uint16_t tl_f2_to_e4m3x2(float lo, float hi) {
  return (uint16_t)(tl_e4m3_emul(lo) | (tl_e4m3_emul(hi) << 8));
}
"""


def _lowbit_helpers() -> str:
    """The sub-byte helpers of the prelude: plain C++ (``tl_hsub2``'s PTX is under
    ``__CUDA_ARCH__``), compiled as they are."""
    from tilus.backends.cuda.ptx.registry import fragments

    return "".join(f.text for f in fragments("lowbit"))


def available() -> bool:
    """Whether g++ (C++20) is here."""
    return shutil.which("g++") is not None


def _kernel_text(source: str, name: str, params) -> str:
    body = source[source.index('extern "C" __global__') :]
    body = re.sub(
        r'extern "C" __global__ void __launch_bounds__\(\d+, \d+\)\n', "static void ", body
    )
    body = body.replace("extern __shared__ __align__(1024) uint8_t tl_smem_raw[];", "")
    body = body.replace("tl_smem_raw", "tl_smem_base")
    return body


def build(ck):
    """Compile a ``CompiledKernel``'s source for the CPU; returns a callable
    ``run(grid, args)`` (args: NumPy arrays for pointers, Python numbers for scalars)."""
    ks = ck.kernel
    fn = ks.program.fn
    body = _kernel_text(ks.source, ks.name, fn.params)
    if ks.plan.tmaps or ks.divisors:
        raise NotImplementedError("TMA maps and hidden divisors are not emulated")
    from tilus.backends.cuda.codegen.scalar import ctype

    casts = []
    for k, p in enumerate(fn.params):
        casts.append(f"*({ctype(p.dtype)}*)args[{k}]")
    smem = ks.smem_bytes + 2048
    launch = f"""
extern "C" void tl_launch(int gx, int gy, int gz, void** args) {{
  const int nt = {ks.num_threads};
  gridDim = {{(unsigned)gx, (unsigned)gy, (unsigned)gz}};
  std::vector<uint64_t> lanes(((nt + 31) / 32) * 32);
  tl_lanes = &lanes;
  for (int bz = 0; bz < gz; ++bz) for (int by = 0; by < gy; ++by) for (int bx = 0; bx < gx; ++bx) {{
    std::barrier<> bar(nt);
    tl_block_bar = &bar;
    std::vector<std::unique_ptr<std::barrier<>>> wb;
    for (int w = 0; w < (nt + 31) / 32; ++w)
      wb.emplace_back(new std::barrier<>(std::min(32, nt - 32 * w)));
    tl_warp_bars = &wb;
    std::vector<uint8_t> smem({smem} + 1024);
    uint8_t* base = (uint8_t*)(((uintptr_t)smem.data() + 1023) & ~(uintptr_t)1023);
    std::vector<std::thread> ts;
    for (int t = 0; t < nt; ++t)
      ts.emplace_back([=]() {{
        threadIdx = {{(unsigned)t, 0, 0}};
        blockIdx = {{(unsigned)bx, (unsigned)by, (unsigned)bz}};
        tl_smem_base = base;
        {ks.name}({", ".join(casts)});
      }});
    for (auto& th : ts) th.join();
    fflush(stdout);
  }}
}}
"""
    text = HEADER + _lowbit_helpers() + body + launch
    key = hashlib.sha256(text.encode()).hexdigest()[:16]
    d = pathlib.Path(tempfile.gettempdir()) / "tilus-cpu-cuda"
    d.mkdir(exist_ok=True)
    so = d / f"k{key}.so"
    if not so.exists():
        src = d / f"k{key}.cc"
        src.write_text(text)
        tmp = d / f"k{key}.{id(text)}.so"
        r = subprocess.run(
            [
                "g++",
                "-std=c++20",
                "-O1",
                "-fPIC",
                "-shared",
                "-pthread",
                "-w",
                str(src),
                "-o",
                str(tmp),
            ],
            capture_output=True,
            text=True,
        )
        if r.returncode:
            raise RuntimeError(f"g++ failed:\n{r.stderr[:4000]}")
        tmp.rename(so)
    lib = ctypes.CDLL(str(so))

    def run(grid, args):
        grid = tuple(grid) + (1,) * (3 - len(grid))
        keep, ptrs = [], []
        for p, a in zip(fn.params, args):
            if isinstance(a, np.ndarray):
                assert a.flags.c_contiguous
                cell = ctypes.c_void_p(a.ctypes.data)
            else:
                ct = ctype(p.dtype)
                cell = {
                    "int": ctypes.c_int,
                    "float": ctypes.c_float,
                    "bool": ctypes.c_bool,
                    "int64_t": ctypes.c_int64,
                    "uint32_t": ctypes.c_uint32,
                    "double": ctypes.c_double,
                }[ct](a)
            keep.append(cell)
            ptrs.append(ctypes.cast(ctypes.pointer(cell), ctypes.c_void_p))
        arr = (ctypes.c_void_p * max(1, len(ptrs)))(*[p.value for p in ptrs])
        lib.tl_launch(*grid, arr)

    return run


def emulate(kernel, args, grid, config: dict | None = None):
    """Compile ``kernel`` (one config) for sm_90a and run it on the CPU emulator with the
    call's ``args`` (NumPy arrays are written in place); returns the ``CompiledKernel``."""
    import tilus

    cfg = config if config is not None else (kernel.configs[0] if kernel.configs else None)
    ck = tilus.compile(kernel, *args, config=cfg) if cfg else tilus.compile(kernel, *args)
    _, runtime = kernel.bind(args, {})
    build(ck)(grid, [v for _, _, v in runtime])
    return ck
