"""Kernels for the named-barrier tests (tests/test_named_barriers.py): two warp groups take
turns on a shared counter, ordered only by ``sync_named`` / ``arrive_named``.

Each planted bug's line carries a `# BUG:<name>` marker so the tests can assert the reported line.
"""

import tilus
from tilus import int32


class PingPong(tilus.Script):
    """Group ``g`` in its turn ``i`` writes the counter's value to ``out[2 i + g]`` and
    increments it; turns alternate 0, 1, 0, 1, ... (``out`` = 0, 1, 2, ...)."""

    def __init__(self, bug: str = "none", turns: int = 3):
        super().__init__()
        self.bug = bug
        self.turns = turns

    def turn(self, g: int, i: int32, buf, gout):
        mine, other = 1 + g, 2 - g
        self.sync_named(mine, 256)
        x = self.load_shared(buf)
        self.store_global(gout, x, offsets=[2 * i + g, 0], dims=[1])
        self.sync()
        self.store_shared(buf, x + 1)
        if self.bug == "wrong_count":
            self.arrive_named(other, 128)  # BUG:wrong_count
        elif self.bug != "no_arrive" or g == 0:
            self.arrive_named(other, 256)

    def __call__(self, out_ptr: ~int32):
        self.attrs.blocks = 1
        self.attrs.warps = 8
        gout = self.global_view(out_ptr, dtype=int32, shape=[2 * self.turns, 128])
        buf = self.shared_tensor(dtype=int32, shape=[128])
        self.store_shared(buf, self.register_tensor(dtype=int32, shape=[128], init=0))
        self.sync()
        with self.warp_group(0, 4):
            for i in range(self.turns):
                self.turn(0, i, buf, gout)
        with self.warp_group(4, 4):
            if self.bug != "no_start":
                self.arrive_named(1, 256)  # group 0 takes the first turn
            for i in range(self.turns):
                self.turn(1, i, buf, gout)  # BUG:no_arrive
        if self.bug == "overshoot":
            self.sync()  # group 1's last arrival (128 threads) is still on barrier 1
            self.arrive_named(1, 256)  # BUG:overshoot


class BadUse(tilus.Script):
    """Named barriers used where the front end must refuse them."""

    def __init__(self, bug: str):
        super().__init__()
        self.bug = bug

    def __call__(self, out_ptr: ~int32):
        self.attrs.blocks = 1
        self.attrs.warps = 8
        if self.bug == "id0":
            self.sync_named(0, 256)  # BUG:id0
        elif self.bug == "odd_count":
            self.sync_named(1, 100)  # BUG:odd_count
        elif self.bug == "too_many":
            self.sync_named(1, 512)  # BUG:too_many
        elif self.bug == "fewer_than_group":
            self.sync_named(1, 128)  # BUG:fewer_than_group
        else:
            with self.single_thread():
                self.arrive_named(1, 256)  # BUG:single
