"""Named barriers between thread groups: ``self.sync_named`` / ``self.arrive_named``."""

from __future__ import annotations

from tilus.ir import inst_sync as SY
from tilus.ir.inst import InstError
from tilus.lang.builder import current


def _emit(cls, barrier, num_threads, what: str):
    b = current()
    inst = cls(barrier, num_threads)
    try:
        inst.validate()  # the id and the count first: the checks below assume them
    except InstError as e:
        raise b.error(str(e)) from None
    g = b.group
    if g.begin < 0 or g.size % 32 or g.abs_begin % 32:
        raise b.error(
            f"{what} must be executed by whole warps (a hardware barrier counts warps); the "
            f"current thread group has {g.size} thread(s)"
            + (" (a single elected thread)" if g.begin < 0 else f" from thread {g.abs_begin}")
        )
    block = b.groups[0].size
    if num_threads > block:
        raise b.error(f"{what}: num_threads {num_threads} exceeds the block's {block} threads")
    if num_threads < g.size:
        raise b.error(
            f"{what}: num_threads {num_threads} is fewer than the {g.size} threads of the "
            "current group, which all arrive"
        )
    b.inst(inst)


class NamedBarrierInstructions:
    """Hardware named barriers (``bar.sync`` / ``bar.arrive``), ids 1..15 chosen by the kernel.

    A barrier completes once ``num_threads`` threads (whole warps) have arrived; groups that
    ``arrive_named`` release the groups waiting in ``sync_named`` without waiting themselves,
    which orders warp groups (e.g. two consumer groups taking turns on the tensor cores).
    ``sync()`` of a sub-group takes its hardware barrier from the ids the kernel leaves free.
    """

    def sync_named(self, barrier: int, num_threads: int):
        """Arrive on named barrier ``barrier`` (a compile-time id in [1, 15]) with every thread
        of the current group and wait until ``num_threads`` threads (a multiple of 32, counting
        the current group's) have arrived since the barrier last completed (``bar.sync``).
        Memory writes before any arrival are visible after the wait."""
        _emit(SY.NamedBarrierSync, barrier, num_threads, "sync_named")

    def arrive_named(self, barrier: int, num_threads: int):
        """Arrive on named barrier ``barrier`` (of ``num_threads`` threads) with every thread of
        the current group, without waiting (``bar.arrive``): releases the groups that wait for
        it in ``sync_named``."""
        _emit(SY.NamedBarrierArrive, barrier, num_threads, "arrive_named")
