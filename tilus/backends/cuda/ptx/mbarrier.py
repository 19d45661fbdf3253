"""mbarrier family: init, arrive (plain, counted, expect-tx), parity waits, and the proxy fences."""

from __future__ import annotations

from tilus.backends.cuda.ptx.registry import Fragment, check_operands, register

FAMILY = "mbarrier"

# Every function takes the barrier as a 32-bit shared-window address (see tl_smem_addr).

# PTX ISA 9.7.13.15.9 Parallel Synchronization and Communication Instructions: mbarrier.init
INIT = register(
    FAMILY,
    "tl_mbar_init",
    f"""
__device__ __forceinline__ void tl_mbar_init(uint32_t bar, uint32_t count) {{
  asm volatile("{check_operands("mbarrier.init.shared::cta.b64 [%0], %1;", 2)}"
               :: "r"(bar), "r"(count) : "memory");
}}
""",
)

# PTX ISA 9.7.13.15.13 Parallel Synchronization and Communication Instructions: mbarrier.arrive
ARRIVE = register(
    FAMILY,
    "tl_mbar_arrive",
    f"""
__device__ __forceinline__ void tl_mbar_arrive(uint32_t bar) {{
  asm volatile("{check_operands("mbarrier.arrive.release.cta.shared::cta.b64 _, [%0];", 1)}"
               :: "r"(bar) : "memory");
}}
""",
)

# PTX ISA 9.7.13.15.13 Parallel Synchronization and Communication Instructions: mbarrier.arrive
# (the count operand form, sm_90)
ARRIVE_COUNT = register(
    FAMILY,
    "tl_mbar_arrive_count",
    f"""
__device__ __forceinline__ void tl_mbar_arrive_count(uint32_t bar, uint32_t count) {{
  asm volatile("{check_operands("mbarrier.arrive.release.cta.shared::cta.b64 _, [%0], %1;", 2)}"
               :: "r"(bar), "r"(count) : "memory");
}}
""",
)

# PTX ISA 9.7.13.15.13 Parallel Synchronization and Communication Instructions: mbarrier.arrive
# (.expect_tx: raise the phase's tx-count by `bytes`, then arrive once)
_EXPECT_TX_ASM = check_operands(
    "mbarrier.arrive.expect_tx.release.cta.shared::cta.b64 _, [%0], %1;", 2
)
ARRIVE_EXPECT_TX = register(
    FAMILY,
    "tl_mbar_arrive_expect_tx",
    f"""
__device__ __forceinline__ void tl_mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {{
  asm volatile("{_EXPECT_TX_ASM}"
               :: "r"(bar), "r"(bytes) : "memory");
}}
""",
)

# PTX ISA 9.7.13.15.13 Parallel Synchronization and Communication Instructions: mbarrier.arrive
# (on a barrier of any CTA of the cluster: `bar` is a shared::cluster address, see tl_mapa).
# The .relaxed form orders nothing: use it when the work being signalled is already complete
# (e.g. after wgmma.wait_group). The .release.cluster form costs a GPU-scope memory barrier
# (MEMBAR.ALL.GPU in SASS) per call: keep it out of hot loops.
_ARRIVE_CLUSTER_ASM = check_operands(
    "mbarrier.arrive.relaxed.cluster.shared::cluster.b64 _, [%0];", 1
)
_ARRIVE_CLUSTER_RELEASE_ASM = check_operands(
    "mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];", 1
)
ARRIVE_CLUSTER = register(
    FAMILY,
    "tl_mbar_arrive_cluster",
    f"""
__device__ __forceinline__ void tl_mbar_arrive_cluster(uint32_t bar) {{
  asm volatile("{_ARRIVE_CLUSTER_ASM}" :: "r"(bar) : "memory");
}}
__device__ __forceinline__ void tl_mbar_arrive_cluster_release(uint32_t bar) {{
  asm volatile("{_ARRIVE_CLUSTER_RELEASE_ASM}" :: "r"(bar) : "memory");
}}
""",
)

# PTX ISA 9.7.13.15.11 Parallel Synchronization and Communication Instructions: mbarrier.expect_tx
EXPECT_TX = register(
    FAMILY,
    "tl_mbar_expect_tx",
    f"""
__device__ __forceinline__ void tl_mbar_expect_tx(uint32_t bar, uint32_t bytes) {{
  asm volatile("{check_operands("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;", 2)}"
               :: "r"(bar), "r"(bytes) : "memory");
}}
""",
)


def _try_wait(sem: str) -> str:
    name = f"tl_mbar_try_wait_parity_{sem}"
    asm = (
        "{\\n\\t.reg .pred p;\\n\\t"
        f"mbarrier.try_wait.parity.{sem}.cta.shared::cta.b64 p, [%1], %2;\\n\\t"
        "selp.u32 %0, 1, 0, p;\\n\\t}"
    )
    return f"""
__device__ __forceinline__ uint32_t {name}(uint32_t bar, uint32_t parity) {{
  uint32_t done;
  asm volatile("{check_operands(asm, 3)}"
               : "=r"(done) : "r"(bar), "r"(parity) : "memory");
  return done;
}}
"""


# PTX ISA 9.7.13.15.16 Parallel Synchronization and Communication Instructions:
# mbarrier.test_wait / mbarrier.try_wait (.parity; .acquire or .relaxed at .cta scope)
TRY_WAIT_ACQUIRE = register(FAMILY, "tl_mbar_try_wait_parity_acquire", _try_wait("acquire"))
TRY_WAIT_RELAXED = register(FAMILY, "tl_mbar_try_wait_parity_relaxed", _try_wait("relaxed"))

# Blocking waits: spin on try_wait (which itself suspends for a system-defined time).
WAIT = register(
    FAMILY,
    "tl_mbar_wait_parity",
    """
__device__ __forceinline__ void tl_mbar_wait_parity(uint32_t bar, uint32_t parity) {
  while (!tl_mbar_try_wait_parity_acquire(bar, parity)) {
  }
}
__device__ __forceinline__ void tl_mbar_wait_parity_relaxed(uint32_t bar, uint32_t parity) {
  while (!tl_mbar_try_wait_parity_relaxed(bar, parity)) {
  }
}
""",
)


# PTX ISA 9.7.13.15.16 mbarrier.try_wait (.parity, with the suspendTimeHint operand): a
# blocking wait whose retries suspend the thread for about the hinted nanoseconds (fewer spins
# taking issue slots from the warps on its scheduler). Built on demand, not part of the family
# text, so kernels that never use it keep their prelude.
def wait_suspend(sem: str) -> Fragment:
    """The fragment of ``tl_mbar_wait_parity_suspend_<sem>(bar, parity, ns)``."""
    asm = (
        "{\\n\\t.reg .pred p;\\n\\t"
        f"mbarrier.try_wait.parity.{sem}.cta.shared::cta.b64 p, [%1], %2, %3;\\n\\t"
        "selp.u32 %0, 1, 0, p;\\n\\t}"
    )
    name = f"tl_mbar_wait_parity_suspend_{sem}"
    text = f"""__device__ __forceinline__ void {name}(uint32_t bar, uint32_t parity, uint32_t ns) {{
  uint32_t done = 0;
  while (!done) {{
    asm volatile("{check_operands(asm, 4)}"
                 : "=r"(done) : "r"(bar), "r"(parity), "r"(ns) : "memory");
  }}
}}
"""
    return Fragment(name=name, family=FAMILY, text=text)


# PTX ISA 9.7.13.4 Parallel Synchronization and Communication Instructions: membar / fence
# (fence.mbarrier_init: make mbarrier.init visible to the async proxy and the cluster)
FENCE_INIT = register(
    FAMILY,
    "tl_fence_mbarrier_init",
    f"""
__device__ __forceinline__ void tl_fence_mbarrier_init() {{
  asm volatile("{check_operands("fence.mbarrier_init.release.cluster;", 0)}" ::: "memory");
}}
""",
)

# PTX ISA 9.7.13.4 Parallel Synchronization and Communication Instructions: membar / fence
# (fence.proxy.async: order generic-proxy shared-memory accesses against the async proxy)
FENCE_PROXY_ASYNC = register(
    FAMILY,
    "tl_fence_proxy_async",
    f"""
__device__ __forceinline__ void tl_fence_proxy_async() {{
  asm volatile("{check_operands("fence.proxy.async.shared::cta;", 0)}" ::: "memory");
}}
""",
)
# (fence.proxy.async.global: the same for global memory, e.g. generic stores that a later TMA
# load reads, or TMA stores that later generic loads read)
FENCE_PROXY_ASYNC_GLOBAL = register(
    FAMILY,
    "tl_fence_proxy_async_global",
    f"""
__device__ __forceinline__ void tl_fence_proxy_async_global() {{
  asm volatile("{check_operands("fence.proxy.async.global;", 0)}" ::: "memory");
}}
""",
)
