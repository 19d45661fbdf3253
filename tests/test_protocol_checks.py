"""Planted-bug kernels: each protocol check reports its error at the right line, never hangs."""

from __future__ import annotations

import numpy as np
import pytest
from hopper_bug_kernels import MisuseTma, MisuseWgmma, RingOverwrite, TmaWgmma, WarpSpecialized

import tilus
from tilus.testing import marker_line


def _inputs(m=64, n=64, k=32):
    rng = np.random.default_rng()
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((n, k)).astype(np.float16)
    c = np.full((m, n), np.nan, dtype=np.float16)
    return a, b, c


def _check(a, b, c):
    ref = a.astype(np.float64) @ b.astype(np.float64).T
    assert not np.isnan(c).any()
    assert np.abs(c - ref).max() / np.abs(ref).max() < 1e-3


def _raises(kernel, args, cls, fragment, line):
    with pytest.raises(cls) as info:
        kernel(*args)
    err = info.value
    assert fragment in str(err), str(err)
    assert err.loc is not None and err.loc.line == line, str(err)
    assert err.loc.file.endswith("hopper_bug_kernels.py")
    return err


@pytest.mark.parametrize("seed", [None, 0, 1, 2])
def test_correct_kernels_pass_under_every_schedule(seed):
    with tilus.option.scoped(schedule_seed=seed):
        a, b, c = _inputs(100, 64, 80)
        TmaWgmma("none")(100, 64, 80, a, b, c)
        _check(a, b, c)
        a, b, c = _inputs(100, 64, 80)
        WarpSpecialized("none")(100, 64, 80, a, b, c)
        _check(a, b, c)
        a, b, c = _inputs(64, 64, 64)
        RingOverwrite("none")(64, 64, 64, a, b, c)
        _check(a, b, c)


def test_deadlock_lists_every_blocked_group():
    a, b, c = _inputs(64, 64, 64)
    err = _raises(
        WarpSpecialized("deadlock"),
        (64, 64, 64, a, b, c),
        tilus.TilusRuntimeError,
        "deadlock",
        marker_line(WarpSpecialized, "BUG:deadlock"),
    )
    text = str(err)
    assert "thread group [128, 160)" in text and "thread group [0, 128)" in text
    assert "ring.empty[0]" in text and "ring.full[0]" in text


def test_transaction_mismatch_too_few_expected_bytes():
    a, b, c = _inputs()
    _raises(
        TmaWgmma("tx_mismatch"),
        (64, 64, 32, a, b, c),
        tilus.TilusRuntimeError,
        "transaction mismatch",
        marker_line(TmaWgmma, "BUG:tx_mismatch"),
    )


def test_transaction_still_pending_is_reported_not_hung():
    a, b, c = _inputs()
    err = _raises(
        TmaWgmma("tx_pending"),
        (64, 64, 32, a, b, c),
        tilus.TilusRuntimeError,
        "transaction mismatch",
        marker_line(TmaWgmma, "BUG:tx_pending"),
    )
    assert "bars[0] expects 2 more byte(s)" in str(err)


def test_too_many_arrivals():
    a, b, c = _inputs()
    _raises(
        TmaWgmma("over_arrival"),
        (64, 64, 32, a, b, c),
        tilus.TilusRuntimeError,
        "more arrivals than the barrier's count",
        marker_line(TmaWgmma, "BUG:over_arrival"),
    )


@pytest.mark.parametrize("bug", ["missing_wait", "no_expect", "wrong_phase"])
def test_reading_a_tile_while_tma_writes_it(bug):
    a, b, c = _inputs()
    _raises(
        TmaWgmma(bug),
        (64, 64, 32, a, b, c),
        tilus.TilusRuntimeError,
        "while a TMA write into it",
        marker_line(TmaWgmma, f"BUG:{bug}"),
    )


def test_tma_overwrites_stage_read_by_unretired_wgmma():
    a, b, c = _inputs(64, 64, 64)
    _raises(
        RingOverwrite("overwrite"),
        (64, 64, 64, a, b, c),
        tilus.TilusRuntimeError,
        "still reads it",
        marker_line(RingOverwrite, "BUG:overwrite"),
    )


def test_accumulator_read_before_wait_group():
    a, b, c = _inputs(64, 64, 16)  # one K step: the cast reads the un-retired accumulator
    _raises(
        TmaWgmma("no_retire"),
        (64, 64, 16, a, b, c),
        tilus.TilusRuntimeError,
        "has not been retired",
        marker_line(TmaWgmma, "BUG:no_retire"),
    )


def test_wgmma_without_fence():
    a, b, c = _inputs()
    _raises(
        TmaWgmma("no_fence"),
        (64, 64, 32, a, b, c),
        tilus.TilusRuntimeError,
        "without a wgmma.fence()",
        marker_line(TmaWgmma, "BUG:no_fence"),
    )


def test_wgmma_outside_a_warp_group_is_refused():
    a, _, _ = _inputs()
    _raises(
        MisuseWgmma(),
        (a,),
        tilus.TilusProgramError,
        "needs a warp group",
        marker_line(MisuseWgmma, "BUG:misuse_wgmma"),
    )


def test_tma_from_a_partial_group_is_refused():
    a, _, _ = _inputs()
    _raises(
        MisuseTma(),
        (a,),
        tilus.TilusProgramError,
        "one thread",
        marker_line(MisuseTma, "BUG:misuse_tma"),
    )
