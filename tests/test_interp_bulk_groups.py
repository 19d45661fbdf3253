"""Interpreter: TMA-store bulk groups belong to the elected thread, across single_thread blocks."""

from __future__ import annotations

import numpy as np
import pytest

import tilus
from tilus import float16, int32
from tilus.testing import marker_line


class TileStores(tilus.Script):
    """Copies ``x`` to ``y`` one [64, 64] tile per round through one shared tile and TMA
    stores, waiting for each store only before the tile is rewritten (a persistent kernel's
    epilogue). ``bug`` leaves out one of the waits."""

    def __init__(self, bug: str = "none"):
        super().__init__()
        self.bug = bug

    def __call__(self, rows: int32, x: ~float16, y: ~float16):
        self.attrs.blocks = 1
        self.attrs.warps = 4
        gx = self.global_view(x, dtype=float16, shape=[rows, 64])
        gy = self.global_view(y, dtype=float16, shape=[rows, 64])
        s = self.shared_tensor(dtype=float16, shape=[64, 64])
        for r in self.range(0, rows, 64):
            if self.bug != "rewrite":
                with self.single_thread():
                    self.tma.wait_group(0, read=True)  # the previous round's store read s
            self.sync()
            tile = self.load_global(gx, offsets=[r, 0], shape=[64, 64])
            self.store_shared(s, tile)  # BUG:rewrite
            self.fence.proxy_async()
            self.sync()
            with self.single_thread():
                self.tma.shared_to_global(s, gy, offsets=[r, 0])  # BUG:final
                self.tma.commit_group()
        if self.bug != "final":
            with self.single_thread():
                self.tma.wait_group(0, read=True)


def _run(bug, rows=200, seed=None):
    x = np.random.default_rng().uniform(-1, 1, size=(rows, 64)).astype(np.float16)
    y = np.full_like(x, np.nan)
    with tilus.option.scoped(interpret=True, schedule_seed=seed):
        TileStores(bug)(rows, x, y)
    return x, y


@pytest.mark.parametrize("seed", [None, 0, 1, 2])
def test_store_waited_for_in_a_later_single_thread_block(seed):
    # the group may run ahead of its single_thread() children (shuffled schedules): its
    # stores are checked once all of them have ended
    x, y = _run("none", seed=seed)  # 4 rounds, the last one ragged
    np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize(
    "bug, fragment",
    [
        ("final", "thread group [0, 128) ends with the TMA store of `s`"),
        ("rewrite", "store_shared"),
    ],
)
@pytest.mark.parametrize("seed", [None, 1])
def test_missing_waits_are_reported_at_the_line(bug, fragment, seed):
    with pytest.raises(tilus.TilusRuntimeError) as info:
        _run(bug, seed=seed)
    err = info.value
    assert fragment in str(err), str(err)
    assert err.loc.line == marker_line(TileStores, f"BUG:{bug}"), str(err)
