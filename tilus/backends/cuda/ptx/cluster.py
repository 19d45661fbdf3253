"""Cluster family: mbarrier arrivals on shared::cluster addresses and cluster-scope waits.

The barrier operand of the arrivals is a shared::cluster address (a block's own shared::cta
address, or ``tl_mapa`` of one for a peer block); ``barrier.cluster``, ``%cluster_ctarank``
and ``mapa`` themselves are in the sync family.
"""

from __future__ import annotations

from tilus.backends.cuda.ptx.registry import check_operands, register

FAMILY = "cluster"


def _arrive(sem: str) -> str:
    count = check_operands(f"mbarrier.arrive.{sem}.cluster.shared::cluster.b64 _, [%0], %1;", 2)
    tx = check_operands(
        f"mbarrier.arrive.expect_tx.{sem}.cluster.shared::cluster.b64 _, [%0], %1;", 2
    )
    return f"""
__device__ __forceinline__ void tl_mbar_arrive_cluster_count_{sem}(uint32_t bar, uint32_t n) {{
  asm volatile("{count}" :: "r"(bar), "r"(n) : "memory");
}}
__device__ __forceinline__ void tl_mbar_arrive_expect_tx_cluster_{sem}(uint32_t bar,
                                                                 uint32_t bytes) {{
  asm volatile("{tx}" :: "r"(bar), "r"(bytes) : "memory");
}}
"""


# PTX ISA 9.7.13.15.13 Parallel Synchronization and Communication Instructions: mbarrier.arrive
# (.cluster scope on a .shared::cluster address: the barrier may be a peer block's; the count
# and .expect_tx forms, sm_90)
ARRIVE_RELEASE = register(FAMILY, "tl_mbar_arrive_cluster_release", _arrive("release"))
ARRIVE_RELAXED = register(FAMILY, "tl_mbar_arrive_cluster_relaxed", _arrive("relaxed"))


def _wait(sem: str) -> str:
    asm = (
        "{\\n\\t.reg .pred p;\\n\\t"
        f"mbarrier.try_wait.parity.{sem}.cluster.shared::cta.b64 p, [%1], %2;\\n\\t"
        "selp.u32 %0, 1, 0, p;\\n\\t}"
    )
    return f"""
__device__ __forceinline__ void tl_mbar_wait_parity_cluster_{sem}(uint32_t bar, uint32_t parity) {{
  uint32_t done;
  do {{
    asm volatile("{check_operands(asm, 3)}"
                 : "=r"(done) : "r"(bar), "r"(parity) : "memory");
  }} while (!done);
}}
"""


# PTX ISA 9.7.13.15.16 Parallel Synchronization and Communication Instructions:
# mbarrier.test_wait / mbarrier.try_wait (.parity, .cluster scope: acquires what peer blocks
# released into the phase; the barrier is the block's own)
WAIT_ACQUIRE = register(FAMILY, "tl_mbar_wait_parity_cluster_acquire", _wait("acquire"))
WAIT_RELAXED = register(FAMILY, "tl_mbar_wait_parity_cluster_relaxed", _wait("relaxed"))
