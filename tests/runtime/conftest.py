"""Shared CUDA sources and GPU gating for the tilus.runtime tests."""

from __future__ import annotations

import importlib.util
import pathlib
import sys

import pytest

# Let `pytest tests/runtime` work from a plain checkout (tilus not pip-installed).
if importlib.util.find_spec("tilus") is None:  # pragma: no cover - depends on the setup
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))

# Self-contained on purpose: generated tilus code must compile without CUDA include paths.
TENSORMAP_STRUCT = "struct alignas(64) CUtensorMap_t { unsigned long long opaque[16]; };\n"

# A kernel exercising the Hopper features tilus emits: a TMA tile load completing on an
# mbarrier, and one wgmma with (arbitrary) shared memory descriptors. Compile-only.
PROBE_KERNEL = (
    TENSORMAP_STRUCT
    + r"""
extern "C" __global__ void __launch_bounds__(128)
probe(const __grid_constant__ CUtensorMap_t tmap, float* out,
      unsigned long long desc_a, unsigned long long desc_b) {
  __shared__ alignas(128) unsigned short tile[64 * 64];
  __shared__ alignas(8) unsigned long long bar;
  unsigned bar_addr = (unsigned)__cvta_generic_to_shared(&bar);
  unsigned tile_addr = (unsigned)__cvta_generic_to_shared(tile);
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(bar_addr));
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
                 :: "r"(bar_addr), "r"(64 * 64 * 2) : "memory");
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
        " [%0], [%1, {%2, %3}], [%4];"
        :: "r"(tile_addr), "l"(reinterpret_cast<unsigned long long>(&tmap)),
           "r"(0), "r"((int)blockIdx.x * 64), "r"(bar_addr) : "memory");
  }
  asm volatile(
      "{\n.reg .pred done;\nWAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT_%=;\n}" :: "r"(bar_addr), "r"(0) : "memory");
  float d[32];
  for (int i = 0; i < 32; ++i) d[i] = 0.0f;
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
      "%32, %33, p, 1, 1, 0, 0;\n}"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
        "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
        "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]),
        "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
        "+f"(d[30]), "+f"(d[31])
      : "l"(desc_a), "l"(desc_b), "r"(1));
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
  asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
  for (int i = 0; i < 32; ++i)
    out[(blockIdx.x * 128 + threadIdx.x) * 32 + i] = d[i] + (float)tile[threadIdx.x];
}
"""
)

# Adds 1 to every element; also echoes every scalar argument kind to check the packing.
ADD_ONE_KERNEL = r"""
extern "C" __global__ void add_one(float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] += 1.0f;
}

extern "C" __global__ void echo(int a, unsigned b, long long c, unsigned long long d, float e,
                                long long* out, float* out_f) {
  if (threadIdx.x == 0 && blockIdx.x == 0) {
    out[0] = a; out[1] = (long long)b; out[2] = c; out[3] = (long long)d; out_f[0] = e;
  }
}
"""

# Copies 64x64 fp16 tiles global -> shared (TMA) -> global; out-of-bounds parts of a tile
# arrive as zeros. Uses dynamic shared memory so launches above 48 KB are exercised.
TMA_COPY_KERNEL = (
    TENSORMAP_STRUCT
    + r"""
extern "C" __global__ void __launch_bounds__(128)
tma_copy(const __grid_constant__ CUtensorMap_t tmap, unsigned short* out, int out_ld) {
  extern __shared__ __align__(1024) unsigned char smem[];
  unsigned short* tile = reinterpret_cast<unsigned short*>(smem);
  unsigned long long* bar = reinterpret_cast<unsigned long long*>(smem + 64 * 64 * 2);
  unsigned bar_addr = (unsigned)__cvta_generic_to_shared(bar);
  unsigned tile_addr = (unsigned)__cvta_generic_to_shared(tile);
  int col0 = blockIdx.x * 64, row0 = blockIdx.y * 64;
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(bar_addr));
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
                 :: "r"(bar_addr), "r"(64 * 64 * 2) : "memory");
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
        " [%0], [%1, {%2, %3}], [%4];"
        :: "r"(tile_addr), "l"(reinterpret_cast<unsigned long long>(&tmap)),
           "r"(col0), "r"(row0), "r"(bar_addr) : "memory");
  }
  asm volatile(
      "{\n.reg .pred done;\nWAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT_%=;\n}" :: "r"(bar_addr), "r"(0) : "memory");
  for (int i = threadIdx.x; i < 64 * 64; i += blockDim.x) {
    int r = i / 64, c = i % 64;
    out[(long long)(row0 + r) * out_ld + col0 + c] = tile[i];
  }
}
"""
)


@pytest.fixture
def torch_cuda():
    """The torch module, on a machine with a Hopper (sm_90) GPU; skips otherwise."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("cuda.bindings")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    major, _ = torch.cuda.get_device_capability()
    if major != 9:
        pytest.skip("the test kernels are compiled for sm_90a (Hopper)")
    torch.cuda.init()
    from tilus.runtime.driver import ensure_context

    ensure_context(torch.cuda.current_device())
    return torch


@pytest.fixture(scope="session")
def probe_source() -> str:
    """CUDA source of the compile-only TMA + wgmma probe kernel `probe`."""
    return PROBE_KERNEL


@pytest.fixture(scope="session")
def add_one_source() -> str:
    """CUDA source of `add_one(float*, int)` and the argument echo kernel `echo`."""
    return ADD_ONE_KERNEL


@pytest.fixture(scope="session")
def tma_copy_source() -> str:
    """CUDA source of `tma_copy(tmap, unsigned short* out, int out_ld)`."""
    return TMA_COPY_KERNEL
