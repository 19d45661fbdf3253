"""Requests a thread group's generator yields to the interpreter's scheduler."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tilus.errors import SourceLoc

# The scheduler dispatches on ``type(req)``; the classes are small frozen records so a yield
# costs one allocation (Tick, which carries nothing, is a shared instance).


@dataclass(frozen=True, slots=True)
class Wait:
    """Block until the phase of ``parity`` of mbarrier ``bar`` has completed."""

    bar: Any  # the interpreter's mbarrier state
    parity: int
    loc: SourceLoc | None


@dataclass(frozen=True, slots=True)
class SemWait:
    """Block until the global word at ``ptr`` holds ``value`` (another block sets it)."""

    ptr: Any  # the interpreter's pointer value
    value: int
    loc: SourceLoc | None


@dataclass(frozen=True, slots=True)
class Sync:
    """Block until every child thread group of the task has ended (``self.sync()``)."""

    loc: SourceLoc | None


@dataclass(frozen=True, slots=True)
class ClusterWait:
    """Block until phase ``phase`` of the cluster's barrier.cluster has completed."""

    phase: int
    loc: SourceLoc | None


@dataclass(frozen=True, slots=True)
class Fork:
    """Start the body of a thread-group statement as a child task."""

    stmt: Any  # a ThreadGroupStmt


@dataclass(frozen=True, slots=True)
class Tick:
    """Give other runnable tasks a turn (the randomized schedule yields after each inst)."""


TICK = Tick()
