"""Pass: place shared tiles and mbarriers in the block's dynamic shared memory."""

from __future__ import annotations

from dataclasses import dataclass

from tilus.errors import TilusCompileError
from tilus.ir import inst as I
from tilus.ir.function import Function
from tilus.passes.walk import instructions

ALIGN = 128  # TMA and the 128B swizzle need 128-byte aligned tiles (1024 for the swizzle atom)
SWIZZLE_ALIGN = 1024
MBARRIER_BYTES = 8
SM90_SMEM_LIMIT = 232448  # bytes of dynamic shared memory one block may opt in to on sm_90


@dataclass(frozen=True)
class SharedPlan:
    """Byte offsets of shared tiles and barriers, and the block's total shared memory."""

    offsets: dict  # AllocShared.out -> byte offset
    barrier_offsets: dict  # MBarrierAlloc.out -> byte offset of its first barrier
    total_bytes: int
    # the kernel keeps wgmma groups in flight and stores to global: the CUDA backend sends
    # out-of-bounds elements to a sink word instead of predicating its stores (see ptx.ldst)
    redirect_stores: bool = False


def _round_up(x: int, a: int) -> int:
    return (x + a - 1) // a * a


def plan_shared_memory(
    fn: Function, limit: int = SM90_SMEM_LIMIT, target: str = "sm_90a"
) -> SharedPlan:
    """First-fit allocation in program order; frees return space to the free list.

    ``limit`` is the target's shared memory per block (``tilus.target``): the pipeline plans
    for sm_90a, the largest, and a build for a smaller target plans again with its limit.
    """
    free: list[tuple[int, int]] = [(0, 1 << 40)]  # (start, size) holes, sorted
    offsets, live, peak = {}, {}, 0
    barriers = []
    in_flight = stores = False
    for stmt, inst in instructions(fn.body):
        in_flight = in_flight or (isinstance(inst, I.WgmmaWaitGroup) and inst.n > 0)
        stores = stores or isinstance(inst, I.StoreGlobal)
        if isinstance(inst, I.AllocShared):
            size = _round_up(max(inst.out.nbytes, 1), ALIGN)
            align = SWIZZLE_ALIGN  # every tile may be swizzled by the CUDA backend
            for i, (start, hole) in enumerate(free):
                at = _round_up(start, align)
                if at + size <= start + hole:
                    free.pop(i)
                    if at > start:
                        free.insert(i, (start, at - start))
                        i += 1
                    if at + size < start + hole:
                        free.insert(i, (at + size, start + hole - at - size))
                    break
            offsets[inst.out] = at
            live[inst.out] = (at, size)
            peak = max(peak, at + size)
            if peak > limit:
                raise TilusCompileError(
                    f"shared memory: allocating {inst.out.type_str()} ({inst.out.nbytes} bytes) "
                    f"brings the block to {peak} bytes, over the {target} per-block limit of "
                    f"{limit} bytes",
                    stmt.loc,
                )
        elif isinstance(inst, I.FreeShared):
            src = inst.tensor
            if src not in live:
                raise TilusCompileError(
                    "free_shared of a tile that is not allocated (freed "
                    "twice, or a slice of a tile)",
                    stmt.loc,
                )
            at, size = live.pop(src)
            free.append((at, size))
            free.sort()
            merged = []
            for s, n in free:
                if merged and merged[-1][0] + merged[-1][1] == s:
                    merged[-1] = (merged[-1][0], merged[-1][1] + n)
                else:
                    merged.append((s, n))
            free = merged
        elif isinstance(inst, I.MBarrierAlloc):
            barriers.append((stmt, inst))
    # barriers are hoisted after every tile so no tile ever aliases a barrier
    at = _round_up(peak, 8)
    barrier_offsets = {}
    for stmt, inst in barriers:
        barrier_offsets[inst.out] = at
        at += MBARRIER_BYTES * len(inst.counts)
        if at > limit:
            raise TilusCompileError(
                f"shared memory: the mbarriers bring the block to {at} bytes, over the {target} "
                f"per-block limit of {limit} bytes",
                stmt.loc,
            )
    return SharedPlan(offsets, barrier_offsets, at, in_flight and stores)
