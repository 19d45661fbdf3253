"""Synchronization family: named and cluster barriers, __syncwarp, elect.sync, setmaxnreg."""

from __future__ import annotations

from tilus.backends.cuda.ptx.registry import check_operands, register

FAMILY = "sync"

# PTX ISA 9.7.13.1 Parallel Synchronization and Communication Instructions: bar, barrier
# (bar.sync / bar.arrive on named barrier `id` for `nthreads` threads, a multiple of 32)
BAR = register(
    FAMILY,
    "tl_bar_sync",
    f"""
__device__ __forceinline__ void tl_bar_sync(uint32_t id, uint32_t nthreads) {{
  asm volatile("{check_operands("bar.sync %0, %1;", 2)}" :: "r"(id), "r"(nthreads) : "memory");
}}
__device__ __forceinline__ void tl_bar_arrive(uint32_t id, uint32_t nthreads) {{
  asm volatile("{check_operands("bar.arrive %0, %1;", 2)}" :: "r"(id), "r"(nthreads) : "memory");
}}
__device__ __forceinline__ void tl_syncthreads() {{
  asm volatile("{check_operands("bar.sync 0;", 0)}" ::: "memory");
}}
""",
)

# PTX ISA 9.7.13.2 Parallel Synchronization and Communication Instructions: bar.warp.sync
SYNCWARP = register(
    FAMILY,
    "tl_syncwarp",
    f"""
__device__ __forceinline__ void tl_syncwarp(uint32_t mask = 0xffffffffu) {{
  asm volatile("{check_operands("bar.warp.sync %0;", 1)}" :: "r"(mask) : "memory");
}}
""",
)

# PTX ISA 9.7.13.14 Parallel Synchronization and Communication Instructions: elect.sync
# (returns 1 in exactly one active lane of `mask`, 0 in the others)
_ELECT_ASM = check_operands(
    "{\\n\\t.reg .pred p;\\n\\telect.sync _|p, %1;\\n\\tselp.u32 %0, 1, 0, p;\\n\\t}", 2
)
ELECT = register(
    FAMILY,
    "tl_elect_one",
    f"""
__device__ __forceinline__ uint32_t tl_elect_one(uint32_t mask = 0xffffffffu) {{
  uint32_t pred;
  asm volatile("{_ELECT_ASM}"
               : "=r"(pred) : "r"(mask));
  return pred;
}}
""",
)

# PTX ISA 9.7.19.5 Miscellaneous Instructions: setmaxnreg
# (warpgroup-wide; N in 24..256, a multiple of 8; needs a register cap at kernel entry)
SETMAXNREG = register(
    FAMILY,
    "tl_setmaxnreg",
    f"""
template <int N>
__device__ __forceinline__ void tl_setmaxnreg_inc() {{
  asm volatile("{check_operands("setmaxnreg.inc.sync.aligned.u32 %0;", 1)}" :: "n"(N));
}}
template <int N>
__device__ __forceinline__ void tl_setmaxnreg_dec() {{
  asm volatile("{check_operands("setmaxnreg.dec.sync.aligned.u32 %0;", 1)}" :: "n"(N));
}}
""",
)

# PTX ISA 9.7.13.3 Parallel Synchronization and Communication Instructions: barrier.cluster
# (every non-exited thread of every CTA of the cluster arrives, then waits)
CLUSTER_SYNC = register(
    FAMILY,
    "tl_cluster_sync",
    f"""
__device__ __forceinline__ void tl_cluster_arrive() {{
  asm volatile("{check_operands("barrier.cluster.arrive.release.aligned;", 0)}" ::: "memory");
}}
__device__ __forceinline__ void tl_cluster_wait() {{
  asm volatile("{check_operands("barrier.cluster.wait.acquire.aligned;", 0)}" ::: "memory");
}}
__device__ __forceinline__ void tl_cluster_sync() {{
  tl_cluster_arrive();
  tl_cluster_wait();
}}
""",
)

# PTX ISA: Special Registers: %cluster_ctarank
CLUSTER_RANK = register(
    FAMILY,
    "tl_cluster_ctarank",
    f"""
__device__ __forceinline__ uint32_t tl_cluster_ctarank() {{
  uint32_t r;
  asm volatile("{check_operands("mov.u32 %0, %%cluster_ctarank;", 1)}" : "=r"(r));
  return r;
}}
""",
)

# PTX ISA 9.7.9.23 Data Movement and Conversion Instructions: mapa
# (the shared::cluster address of the same shared-memory offset in CTA `rank` of the cluster)
MAPA = register(
    FAMILY,
    "tl_mapa",
    f"""
__device__ __forceinline__ uint32_t tl_mapa(uint32_t addr, uint32_t rank) {{
  uint32_t r;
  asm volatile("{check_operands("mapa.shared::cluster.u32 %0, %1, %2;", 3)}"
               : "=r"(r) : "r"(addr), "r"(rank));
  return r;
}}
""",
)
