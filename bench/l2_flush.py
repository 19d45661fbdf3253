"""The L2 flushes the benchmarks run before each timed call: ``dirty`` and ``clean``."""

from __future__ import annotations

from types import SimpleNamespace

from tilus.option import TUNE_FLUSHES
from tilus.tune.timing import l2_flush

#: the protocols of the benchmarks' ``--flush`` (the tuner's ``tune_flush`` ones)
FLUSHES = TUNE_FLUSHES


def make_flush(torch, protocol: str = "dirty"):
    """The object ``time_ms`` flushes the L2 with (its ``zero_()`` before each timed run): the
    tuner's flush of ``protocol`` (``tilus.tune.timing.l2_flush``): ``dirty`` writes 256 MiB
    and leaves the L2 full of dirty lines, which the timed kernel then writes back; ``clean``
    then reads another 256 MiB, so their write-back falls before the timed span and the L2
    holds clean lines only."""
    if protocol not in FLUSHES:
        raise SystemExit(f"--flush must be one of {FLUSHES}, got {protocol!r}")
    return SimpleNamespace(zero_=l2_flush(torch, protocol))
