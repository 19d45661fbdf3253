"""Operand checks live on the instruction (validate / class checks) and report the user's line."""

from __future__ import annotations

import numpy as np
import pytest

import tilus
from tilus import float16, int32
from tilus.testing import marker_line


class Checks(tilus.Script):
    def __init__(self, case):
        super().__init__()
        self.case = case

    def __call__(self, n: int32, x: ~float16):
        self.attrs.blocks = 1
        self.attrs.warps = 4
        g = self.global_view(x, dtype=float16, shape=[n, 64])
        if self.case == "box":
            s = self.shared_tensor(dtype=float16, shape=[512, 64])
            bars = self.mbarrier.alloc(counts=[1])
            with self.single_thread():
                self.tma.global_to_shared(src=g, dst=s, offsets=[0, 0], mbarrier=bars[0])  # BOX
        if self.case == "store_box":
            s = self.shared_tensor(dtype=float16, shape=[64, 512])
            with self.single_thread():
                self.tma.shared_to_global(s, g, offsets=[0, 0])  # SBOX
        if self.case == "count":
            self.mbarrier.alloc(counts=[1, 1 << 20])  # COUNT
        if self.case == "runtime_count":
            self.mbarrier.alloc(counts=[n])  # RCOUNT


@pytest.mark.parametrize(
    "case, marker, text",
    [
        ("box", "# BOX", "tma.global_to_shared: tile dim 0 is 512 elements, over the TMA box"),
        ("store_box", "# SBOX", "tma.shared_to_global: tile dim 1 is 512 elements"),
        ("count", "# COUNT", r"expected arrival count must be in [1, 2^20), got 1048576"),
    ],
)
def test_build_time_checks_name_the_line(case, marker, text):
    with pytest.raises(tilus.TilusProgramError) as info:
        Checks(case)(8, np.zeros((8, 64), np.float16))
    assert text in info.value.msg
    assert info.value.loc.line == marker_line(Checks, marker)


def test_the_same_count_rule_applies_at_run_time():
    # a count known only at launch is checked by the interpreter with the class's own rule
    with pytest.raises(tilus.TilusRuntimeError) as info:
        Checks("runtime_count")(0, np.zeros((8, 64), np.float16))
    assert "expected arrival count must be in [1, 2^20), got 0" in str(info.value)
    assert info.value.loc.line == marker_line(Checks, "# RCOUNT")
