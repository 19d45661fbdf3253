"""Named barriers: ``bar.sync`` / ``bar.arrive`` on a hardware barrier id shared by warp groups.

A block has 16 hardware barriers; id 0 is ``__syncthreads()``. A named barrier completes once
``num_threads`` threads (whole warps) have arrived on it; ``sync`` arrives and waits for the
completion, ``arrive`` only arrives. Producer/consumer and ping-pong schedules between warp
groups use one group's ``arrive`` to release another group's ``sync``.
"""

from __future__ import annotations

from tilus.ir.inst import Inst, InstError, instruction

#: user ids 1..15 (id 0 is the block-wide barrier of __syncthreads)
MAX_NAMED_BARRIER = 15


def _check(inst) -> None:
    what = inst.NAME.replace("named_barrier_", "named barrier ")
    bid, n = inst.barrier, inst.num_threads
    if isinstance(bid, bool) or not isinstance(bid, int) or not 1 <= bid <= MAX_NAMED_BARRIER:
        raise InstError(
            f"{what}: the barrier id must be a compile-time int in [1, {MAX_NAMED_BARRIER}] "
            f"(id 0 is the block-wide barrier), got {bid!r}"
        )
    if isinstance(n, bool) or not isinstance(n, int) or n <= 0 or n % 32:
        raise InstError(
            f"{what}: num_threads must be a positive compile-time multiple of 32 (barriers "
            f"count whole warps), got {n!r}"
        )


@instruction("named_barrier_sync", ptx="9.7.13.1 bar.sync a, b")
class NamedBarrierSync(Inst):
    """The group's threads arrive on barrier ``barrier`` and wait until ``num_threads``
    threads have arrived (the arrivals of other groups' ``arrive`` count)."""

    barrier: int
    num_threads: int

    def validate(self) -> None:
        """The id is in [1, 15] and the count a positive multiple of 32."""
        _check(self)


@instruction("named_barrier_arrive", ptx="9.7.13.1 bar.arrive a, b")
class NamedBarrierArrive(Inst):
    """The group's threads arrive on barrier ``barrier`` (of ``num_threads``) without waiting."""

    barrier: int
    num_threads: int

    def validate(self) -> None:
        """The id is in [1, 15] and the count a positive multiple of 32."""
        _check(self)
