"""Planted ordering bugs: races between thread groups, missing proxy fences, global memory.

Each bug is reported on the deterministic default schedule at the line of the second access,
naming the first; under shuffled schedules the same pair is reported (either way round).
"""

from __future__ import annotations

import numpy as np
import pytest
from race_bug_kernels import Epilogue, Exchange, Leftovers, WgmmaOperands, WrongBarrier

import tilus
from tilus.backends.interp import machine
from tilus.testing import marker_line

SEEDS = [None, 0, 1, 2, 3]


def _exchange(bug):
    x = np.random.default_rng().standard_normal((32, 32)).astype(np.float32)
    y = np.full_like(x, np.nan)
    z = np.full_like(x, np.nan)
    Exchange(bug)(x, y, z)
    return x, y, z


def _epilogue(bug):
    x = np.random.default_rng().standard_normal((64, 64)).astype(np.float16)
    y = np.full_like(x, np.nan)
    z = np.full_like(x, np.nan)
    Epilogue(bug)(x, y, z)
    return x, y, z


def _wgmma(bug):
    rng = np.random.default_rng()
    a = rng.standard_normal((64, 16)).astype(np.float16)
    b = rng.standard_normal((64, 16)).astype(np.float16)
    c = np.full((64, 64), np.nan, dtype=np.float32)
    WgmmaOperands(bug)(a, b, c)
    return a, b, c


def _wrong_barrier(bug):
    x = np.random.default_rng().standard_normal((32, 64)).astype(np.float16)
    y = np.full_like(x, np.nan)
    WrongBarrier(bug)(x, y)
    return x, y


KERNELS = {
    Exchange: _exchange,
    Epilogue: _epilogue,
    WgmmaOperands: _wgmma,
    WrongBarrier: _wrong_barrier,
}


def _error(cls, bug, seed):
    with tilus.option.scoped(interpret=True, schedule_seed=seed):
        with pytest.raises(tilus.TilusRuntimeError) as info:
            KERNELS[cls](bug)
    return info.value


@pytest.mark.parametrize("seed", SEEDS)
def test_ordered_kernels_run_clean_under_every_schedule(seed):
    with tilus.option.scoped(interpret=True, schedule_seed=seed):
        x, y, z = _exchange("none")
        np.testing.assert_array_equal(y, x)
        np.testing.assert_array_equal(z, x)
        for bug in ("none", "elected_fence"):
            x, y, z = _epilogue(bug)
            np.testing.assert_array_equal(y, x)
            np.testing.assert_array_equal(z, x)
        a, b, c = _wgmma("none")
        ref = a.astype(np.float64) @ b.astype(np.float64).T
        assert np.abs(c - ref).max() / np.abs(ref).max() < 1e-3
        x, y = _wrong_barrier("none")
        np.testing.assert_array_equal(y, x)


CASES = [
    # (kernel, bug, fragment of the default schedule's report)
    (Exchange, "no_barrier", "race on bytes [0, 4096) of shared tile `s`"),
    (Exchange, "arrive_early", "race on bytes [0, 4096) of shared tile `s`"),
    (Exchange, "no_release", "race on bytes [0, 4096) of shared tile `s`"),
    (Exchange, "global", "race on bytes [0, 4096) of global tensor `z_ptr`"),
    (Epilogue, "no_sync", "sync() the group before single_thread()"),
    (Epilogue, "read_only", "the TMA store has not completed"),
    (Epilogue, "unsynced", "of global tensor `y_ptr`"),
    (Epilogue, "no_fence", "missing fence.proxy_async"),
    (Epilogue, "fence_first", "missing fence.proxy_async"),
    (Epilogue, "global_fence", "missing fence.proxy_async"),
    (WgmmaOperands, "no_fence", "missing fence.proxy_async: wgmma.mma (operand a)"),
    (WgmmaOperands, "late_write", "race on bytes [0, 2048) of shared tile `sb`"),
    (WrongBarrier, "wrong_barrier", "TMA"),
]


@pytest.mark.parametrize("cls, bug, fragment", CASES, ids=[c[1] for c in CASES])
def test_bug_reported_on_the_default_schedule(cls, bug, fragment):
    err = _error(cls, bug, None)
    text = str(err)
    assert fragment in text, text
    assert err.loc is not None and err.loc.file.endswith("race_bug_kernels.py"), text
    assert err.loc.line == marker_line(cls, f"BUG:{bug}"), text
    assert f"race_bug_kernels.py:{marker_line(cls, f'FIRST:{bug}')}" in text, text


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
@pytest.mark.parametrize("cls, bug, fragment", CASES, ids=[c[1] for c in CASES])
def test_bug_reported_under_shuffled_schedules(cls, bug, fragment, seed):
    err = _error(cls, bug, seed)
    lines = {marker_line(cls, f"BUG:{bug}"), marker_line(cls, f"FIRST:{bug}")}
    assert err.loc is not None and err.loc.line in lines, str(err)
    other = (lines - {err.loc.line}).pop()
    assert f"race_bug_kernels.py:{other}" in str(err), str(err)


@pytest.mark.parametrize(
    "bug, fragment",
    [
        ("double_tma", "overlaps another TMA write still in flight"),
        ("unretired", "ends with wgmma operations never retired"),
        ("endless", "did not finish after 20000 statements"),
    ],
)
def test_checks_that_are_not_about_ordering(bug, fragment, monkeypatch):
    monkeypatch.setattr(machine, "MAX_STEPS", 20_000)  # the endless loop is cut off sooner
    rng = np.random.default_rng()
    a = rng.standard_normal((64, 16)).astype(np.float16)
    b = rng.standard_normal((64, 16)).astype(np.float16)
    c = np.full((64, 64), np.nan, dtype=np.float32)
    with tilus.option.scoped(interpret=True), pytest.raises(tilus.TilusRuntimeError) as info:
        Leftovers(bug)(a, b, c)
    err = info.value
    assert fragment in str(err), str(err)
    assert err.loc.line == marker_line(Leftovers, f"BUG:{bug}"), str(err)


def test_leftovers_kernel_is_correct():
    rng = np.random.default_rng()
    a = rng.standard_normal((64, 16)).astype(np.float16)
    b = rng.standard_normal((64, 16)).astype(np.float16)
    c = np.full((64, 64), np.nan, dtype=np.float32)
    with tilus.option.scoped(interpret=True):
        Leftovers("none")(a, b, c)
    ref = a.astype(np.float64) @ b.astype(np.float64).T
    assert np.abs(c - ref).max() / np.abs(ref).max() < 1e-3
