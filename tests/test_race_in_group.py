"""A group's own conflicting shared accesses with no sync() between: a group spreads each
access over its threads by the tile's layout, so a read after its write (or a write after its
read, or writes of differently shaped parts) is a race on a GPU; reported at the second line,
naming the first. The same accesses with a sync() between, and a tile rewritten whole in place,
run clean."""

from __future__ import annotations

import numpy as np
import pytest

import tilus
from tilus import float32
from tilus.testing import marker_line


class InGroup(tilus.Script):
    """One warp group: ``s`` stored from x, then read back transposed into y (``raw``), read
    then overwritten (``war``), filled then a part of it rewritten (``waw``), or rewritten
    whole from a tile of the same shape (``rewrite``, no race); ``synced`` puts a sync()
    between."""

    def __init__(self, case, synced=False):
        super().__init__()
        self.case, self.synced = case, synced

    def __call__(self, x_ptr: ~float32, y_ptr: ~float32):
        self.attrs.blocks = 1
        self.attrs.warps = 4
        gx = self.global_view(x_ptr, dtype=float32, shape=[32, 32])
        gy = self.global_view(y_ptr, dtype=float32, shape=[32, 32])
        s = self.shared_tensor(dtype=float32, shape=[32, 32])
        x = self.load_global(gx, offsets=[0, 0], shape=[32, 32])
        if self.case == "war":
            self.store_shared(s, x)
            self.sync()
            t = self.load_shared(s)  # FIRST:war
            if self.synced:
                self.sync()
            self.store_shared(s, self.transpose(t))  # SECOND:war
            self.sync()
        else:
            self.store_shared(s, x)  # FIRST:raw FIRST:waw FIRST:rewrite
            if self.synced:
                self.sync()
            if self.case == "waw":
                half = self.load_global(gx, offsets=[0, 0], shape=[16, 32])
                self.store_shared(s, half * 2.0, offsets=[16, 0])  # SECOND:waw
            elif self.case == "rewrite":
                self.store_shared(s, x * 2.0)  # SECOND:rewrite
            if self.case != "raw":
                self.sync()
        t = self.load_shared(s)  # SECOND:raw
        self.store_global(gy, t, offsets=[0, 0])


def _run(case, synced=False):
    x = np.random.default_rng().standard_normal((32, 32)).astype(np.float32)
    y = np.full_like(x, np.nan)
    with tilus.option.scoped(interpret=True):
        InGroup(case, synced)(x, y)
    return x, y


@pytest.mark.parametrize("case", ["raw", "war", "waw"])
def test_conflicts_within_a_group_are_reported_at_the_second_access(case):
    with pytest.raises(tilus.TilusRuntimeError) as info:
        _run(case)
    err = info.value
    assert "race within thread group [0, 128)" in str(err) and "sync()" in str(err)
    assert err.loc.line == marker_line(InGroup, f"SECOND:{case}")
    assert str(marker_line(InGroup, f"FIRST:{case}")) in str(err)


@pytest.mark.parametrize("case", ["raw", "war", "waw", "rewrite"])
def test_a_sync_between_or_a_rewrite_in_place_runs_clean(case):
    x, y = _run(case, synced=True)
    want = {"raw": x, "war": x.T, "waw": np.concatenate([x[:16], x[:16] * 2]), "rewrite": 2 * x}
    np.testing.assert_array_equal(y, want[case])
    if case == "rewrite":
        _run(case)  # two writes of one shape: taken to spread alike, no report
