"""Tensor memory accelerator family: cp.async.bulk.tensor loads/stores and bulk async-groups."""

from __future__ import annotations

from tilus.backends.cuda.ptx.registry import check_operands, register

FAMILY = "tma"

# Coordinates are given innermost-first (c0 is the contiguous dimension), as in the tensor map.


def _coords(dims: int, first: int) -> tuple[str, str, str]:
    """(C++ parameter list, PTX coordinate vector, asm input list) for `dims` coordinates."""
    params = ", ".join(f"int32_t c{i}" for i in range(dims))
    vector = "{" + ", ".join(f"%{first + i}" for i in range(dims)) + "}"
    inputs = ", ".join(f'"r"(c{i})' for i in range(dims))
    return params, vector, inputs


def _load(dims: int) -> str:
    params, vector, inputs = _coords(dims, 3)
    asm = (
        f"cp.async.bulk.tensor.{dims}d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
        f" [%0], [%1, {vector}], [%2];"
    )
    return f"""
__device__ __forceinline__ void tl_tma_load_{dims}d(uint32_t dst, const CUtensorMap_t* map,
                                                  uint32_t bar, {params}) {{
  asm volatile("{check_operands(asm, 3 + dims)}"
               :: "r"(dst), "l"(map), "r"(bar), {inputs} : "memory");
}}
"""


def _load_multicast(dims: int) -> str:
    params, vector, inputs = _coords(dims, 4)
    asm = (
        f"cp.async.bulk.tensor.{dims}d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
        f".multicast::cluster [%0], [%1, {vector}], [%2], %3;"
    )
    return f"""
__device__ __forceinline__ void tl_tma_load_{dims}d_multicast(uint32_t dst,
                                                            const CUtensorMap_t* map,
                                                            uint32_t bar, uint16_t cta_mask,
                                                            {params}) {{
  asm volatile("{check_operands(asm, 4 + dims)}"
               :: "r"(dst), "l"(map), "r"(bar), "h"(cta_mask), {inputs} : "memory");
}}
"""


def _store(dims: int) -> str:
    params, vector, inputs = _coords(dims, 2)
    asm = f"cp.async.bulk.tensor.{dims}d.global.shared::cta.tile.bulk_group [%0, {vector}], [%1];"
    return f"""
__device__ __forceinline__ void tl_tma_store_{dims}d(const CUtensorMap_t* map, uint32_t src,
                                                   {params}) {{
  asm volatile("{check_operands(asm, 2 + dims)}"
               :: "l"(map), "r"(src), {inputs} : "memory");
}}
"""


# PTX ISA 9.7.9.27.1.2 Data Movement and Conversion Instructions: cp.async.bulk.tensor
# (global -> shared::cluster, .tile, completion on an mbarrier with complete_tx::bytes)
LOADS = {d: register(FAMILY, f"tl_tma_load_{d}d", _load(d)) for d in range(1, 6)}

# PTX ISA 9.7.9.27.1.2 Data Movement and Conversion Instructions: cp.async.bulk.tensor
# (.multicast::cluster: the same box lands at the same offset in every CTA of `cta_mask`, and
# each destination CTA's mbarrier at offset `bar` gets the complete-tx)
LOADS_MULTICAST = {
    d: register(FAMILY, f"tl_tma_load_{d}d_multicast", _load_multicast(d)) for d in range(1, 6)
}

# PTX ISA 9.7.9.27.1.2 Data Movement and Conversion Instructions: cp.async.bulk.tensor
# (shared::cta -> global, .tile, bulk async-group completion)
STORES = {d: register(FAMILY, f"tl_tma_store_{d}d", _store(d)) for d in range(1, 6)}

# PTX ISA 9.7.9.27.2.1 Data Movement and Conversion Instructions: cp.async.bulk.commit_group
COMMIT = register(
    FAMILY,
    "tl_tma_store_commit",
    f"""
__device__ __forceinline__ void tl_tma_store_commit() {{
  asm volatile("{check_operands("cp.async.bulk.commit_group;", 0)}" ::: "memory");
}}
""",
)

# PTX ISA 9.7.9.27.2.2 Data Movement and Conversion Instructions: cp.async.bulk.wait_group
# (N = how many most recent bulk groups may stay pending; .read waits only for the source
# reads, so the shared memory may be reused, not for the global writes to land)
WAIT = register(
    FAMILY,
    "tl_tma_store_wait",
    f"""
template <int N>
__device__ __forceinline__ void tl_tma_store_wait() {{
  asm volatile("{check_operands("cp.async.bulk.wait_group %0;", 1)}" :: "n"(N) : "memory");
}}
template <int N>
__device__ __forceinline__ void tl_tma_store_wait_read() {{
  asm volatile("{check_operands("cp.async.bulk.wait_group.read %0;", 1)}" :: "n"(N) : "memory");
}}
""",
)

# PTX ISA 9.7.9.15 Data Movement and Conversion Instructions: prefetch, prefetchu
# (prefetch.tensormap: pull a tensor map into the cache ahead of its first use)
PREFETCH_MAP = register(
    FAMILY,
    "tl_tma_prefetch_map",
    f"""
__device__ __forceinline__ void tl_tma_prefetch_map(const CUtensorMap_t* map) {{
  asm volatile("{check_operands("prefetch.tensormap [%0];", 1)}" :: "l"(map) : "memory");
}}
""",
)


def _prefetch(dims: int) -> str:
    params, vector, inputs = _coords(dims, 1)
    asm = f"cp.async.bulk.prefetch.tensor.{dims}d.L2.global.tile [%0, {vector}];"
    return f"""
__device__ __forceinline__ void tl_tma_prefetch_{dims}d(const CUtensorMap_t* map, {params}) {{
  asm volatile("{check_operands(asm, 1 + dims)}" :: "l"(map), {inputs} : "memory");
}}
"""


# PTX ISA 9.7.9.25.5.3 Data Movement and Conversion Instructions: cp.async.bulk.prefetch.tensor
# (.L2.global.tile: the box is fetched into L2; nothing lands in shared memory, nothing completes)
PREFETCHES = {d: register(FAMILY, f"tl_tma_prefetch_{d}d", _prefetch(d)) for d in range(1, 6)}
