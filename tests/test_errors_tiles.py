"""Bad tile programs are refused at the user's line before anything runs: a broadcast of shapes
that do not broadcast, a reshape that changes the element count, ``.item()`` of a tile of more
than one element, a reduction over a dim the tile does not have."""

from __future__ import annotations

import numpy as np
import pytest

import tilus
from tilus import float32


class Bad(tilus.Script):
    def __init__(self, case):
        super().__init__()
        self.case = case

    def __call__(self, x_ptr: ~float32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        g = self.global_view(x_ptr, dtype=float32, shape=[32])
        x = self.load_global(g, offsets=[0], shape=[32])
        y = self.load_global(g, offsets=[0], shape=[16])
        if self.case == "item":
            self.printf("%f", x.item())
        elif self.case == "broadcast":
            self.store_global(g, x + y, offsets=[0])
        elif self.case == "reshape":
            self.store_global(g, self.reshape(x, [5, 7]), offsets=[0])
        elif self.case == "scan":
            self.store_global(g, self.scan(x, dim=0, op="sub"), offsets=[0])
        else:
            self.store_global(g, self.max(y, dim=1), offsets=[0])


CASES = {
    "item": ('self.printf("%f", x.item())', "one-element"),
    "broadcast": ("x + y", "do not broadcast"),
    "reshape": ("self.reshape(x, [5, 7])", "32 vs 35 elements"),
    "reduce": ("self.max(y, dim=1)", "out of range"),
    "scan": ('self.scan(x, dim=0, op="sub")', "scan op must be one of"),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("backend", ["interpreter", "cuda"])
def test_located_error(case, backend):
    line, why = CASES[case]
    with pytest.raises(tilus.TilusProgramError) as e:
        if backend == "interpreter":
            with tilus.option.scoped(interpret=True):
                Bad(case)(np.zeros(32, np.float32))
        else:
            tilus.compile(Bad(case), None)
    msg = str(e.value)
    assert "test_errors_tiles.py:" in msg and line in msg and why in msg, msg
