"""Interpreter rules of the named barriers (``bar.sync`` / ``bar.arrive``), with misuse checks.

Each block has one :class:`NamedBarrier` per id in use. A thread group's arrival adds its
threads; the barrier completes when ``num_threads`` have arrived, which releases the groups
waiting in ``sync`` and starts the next round. An arrival that overshoots the count, or a use
with another thread count while a round is partly arrived, is an error at the user's line; a
``sync`` nobody completes is reported by the scheduler's deadlock check.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tilus.backends.interp import races
from tilus.backends.interp.rules import rule
from tilus.backends.interp.sched import Wait
from tilus.errors import SourceLoc, TilusRuntimeError, at
from tilus.ir import inst_sync as SY


@dataclass
class NamedBarrier:
    """One hardware barrier of a block: its thread count and the current round's arrivals."""

    id: int
    count: int
    arrived: int = 0
    rounds: int = 0  # completed rounds; a sync in round r waits until rounds > r
    first_loc: SourceLoc | None = None  # the first arrival of the current round
    vc: dict = field(default_factory=dict)  # releases into the current round (races.py)
    last_vc: dict = field(default_factory=dict)  # what the last completed round releases
    tx: int = 0  # (the scheduler's transaction check reads it: a named barrier has none)
    pending: int = 0

    @property
    def label(self) -> str:
        return f"named barrier {self.id}"

    def parity_done(self, round_: int) -> bool:
        """Whether round ``round_`` has completed (the scheduler's ``Wait`` protocol)."""
        return self.rounds > round_

    def describe(self, round_: int) -> str:
        """What a group waiting in round ``round_`` waits for."""
        return (
            f"{self.label} ({self.arrived} of {self.count} threads arrived; the rest never arrive)"
        )


def _barrier(task, inst, loc) -> NamedBarrier:
    bars = task.cta.__dict__.setdefault("named_barriers", {})
    bar = bars.get(inst.barrier)
    n = inst.num_threads
    if n > task.cta.program.fn.num_threads:
        raise TilusRuntimeError(
            f"{inst.NAME}: barrier {inst.barrier} waits for {n} threads but the block has "
            f"{task.cta.program.fn.num_threads}",
            loc,
        )
    if bar is None:
        bar = bars[inst.barrier] = NamedBarrier(inst.barrier, n)
    elif bar.count != n:
        if bar.arrived:
            raise TilusRuntimeError(
                f"{bar.label} is used with {n} threads by {task.label} while {bar.arrived} "
                f"thread(s) of a round of {bar.count} (first arrival at {at(bar.first_loc)}) "
                f"have arrived: every use of one round must give the same count",
                loc,
            )
        bar.count = n
    return bar


def _arrive(task, inst, loc) -> tuple[NamedBarrier, int, bool]:
    """Add the group's threads; returns (barrier, round arrived in, whether it completed)."""
    bar = _barrier(task, inst, loc)
    if bar.arrived + task.size > bar.count:
        raise TilusRuntimeError(
            f"{bar.label}: {task.label} arrives with {task.size} thread(s) but only "
            f"{bar.count - bar.arrived} of the round's {bar.count} remain (first arrival at "
            f"{at(bar.first_loc)}): more threads arrive than the barrier's count",
            loc,
        )
    if not bar.arrived:
        bar.first_loc = loc
    bar.arrived += task.size
    races.join(bar.vc, races.release(task))
    round_ = bar.rounds
    if bar.arrived == bar.count:
        bar.rounds += 1
        bar.arrived = 0
        bar.last_vc, bar.vc = bar.vc, {}
        task.cta.wake(bar)
        return bar, round_, True
    return bar, round_, False


@rule(SY.NamedBarrierSync)
def _named_sync(task, inst, loc):
    bar, round_, _ = _arrive(task, inst, loc)
    yield Wait(bar, round_, loc)  # returns at once (and acquires) if this arrival completed it


@rule(SY.NamedBarrierArrive)
def _named_arrive(task, inst, loc):
    _arrive(task, inst, loc)
