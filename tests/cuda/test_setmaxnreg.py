"""setmaxnreg: placement and budget refusals at the user's line, codegen, and V6's SASS."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

import tilus
from tests.cuda.conftest import needs_nvrtc
from tilus import float32, int32
from tilus.backends.cuda.codegen import generate
from tilus.passes.register_budget import entry_registers
from tilus.testing import marker_line

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "hopper_matmul"


class Realloc(tilus.Script):
    """Three warp groups; ``bug`` picks a misuse."""

    def __init__(self, bug: str = "none", consumer: int = 232):
        super().__init__()
        self.bug = bug
        self.consumer = consumer

    def __call__(self, n: int32, out: ~float32):
        self.attrs.blocks = 1
        self.attrs.warps = 10 if self.bug == "block" else 12
        g = self.global_view(out, dtype=float32, shape=[n])
        with self.warp_group(4 if self.bug == "block" else 8, 4):
            self.setmaxnreg(40)  # BUG:block BUG:lower
            if self.bug == "warp":
                with self.single_warp(0):
                    self.setmaxnreg(40)  # BUG:warp
            if self.bug == "odd":
                self.setmaxnreg(44)  # BUG:odd
        with self.warp_group(0, 8):
            self.setmaxnreg(self.consumer)  # BUG:budget
            t = self.register_tensor(dtype=float32, shape=[256], init=1.0)
            self.store_global(g, t, offsets=[0])


def _program(bug="none", consumer=232):
    k = Realloc(bug, consumer)
    return k.program(k.configs[0], {})


def test_entry_registers():
    assert entry_registers(384) == 168 and entry_registers(288) == 168
    assert entry_registers(256) == 255 and entry_registers(128) == 255
    assert entry_registers(1024) == 64


def test_raise_and_lower_follow_the_entry_count():
    src = generate(_program()).source
    assert "tl_setmaxnreg_dec<40>();" in src and "tl_setmaxnreg_inc<232>();" in src
    src = generate(_program(consumer=168)).source
    assert "setmaxnreg 168: the count the block starts with" in src


@pytest.mark.parametrize(
    "bug, fragment",
    [
        ("warp", "whole warp groups"),
        ("odd", "multiple of 8"),
        ("block", "whole warp groups; this one has 320 threads"),
    ],
)
def test_misplaced_setmaxnreg_is_refused_at_its_line(bug, fragment):
    with pytest.raises(tilus.TilusError) as info:
        _program(bug)
    assert fragment in str(info.value), str(info.value)
    assert info.value.loc.line == marker_line(Realloc, f"BUG:{bug}"), str(info.value)


def test_over_subscribed_registers_are_refused():
    # 40 * 128 + 240 * 256 = 66560 > 65536: the raise would wait forever on the GPU
    with pytest.raises(tilus.TilusCompileError) as info:
        _program(consumer=240)
    assert "66560 registers" in str(info.value) and "wait forever" in str(info.value)
    assert info.value.loc.line == marker_line(Realloc, "BUG:budget")


@needs_nvrtc
def test_ptxas_gives_a_reallocating_kernel_the_entry_count():
    # so every lowering below the entry count starts from at least the count it asks for
    ck = tilus.compile(Realloc(), 384, tilus.float32)
    ck = ck[0] if isinstance(ck, list) else ck
    assert ck.resources["registers"] == entry_registers(384)


def test_lowering_above_what_ptxas_gave_is_refused():
    # should ptxas ever give fewer: setmaxnreg.dec to 40 from 32 is undefined on the GPU
    from tilus.backends.cuda.codegen.build import _check_setmaxnreg

    with pytest.raises(tilus.TilusCompileError) as info:
        _check_setmaxnreg(_program(), {"registers": 32})
    assert "ptxas gave the kernel 32 registers" in str(info.value)
    assert info.value.loc.line == marker_line(Realloc, "BUG:lower")
    _check_setmaxnreg(_program(), {"registers": 168})


def _v6():
    saved = {
        k: sys.modules.pop(k) for k in ("matmul_v4", "matmul_v5", "harness") if k in sys.modules
    }
    sys.path.insert(0, str(EXAMPLES))
    try:
        spec = importlib.util.spec_from_file_location("setmaxnreg_v6", EXAMPLES / "matmul_v6.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod.MatmulWGMMAV6
    finally:
        sys.path.remove(str(EXAMPLES))
        for k in ("matmul_v4", "matmul_v5", "harness"):
            sys.modules.pop(k, None)
        sys.modules.update(saved)


@needs_nvrtc
@pytest.mark.parametrize("size", [(8192, 8192, 8192), (300, 264, 328)])
def test_v6_reallocates_keeps_groups_in_flight_and_does_not_spill(size):
    v6 = _v6()
    cfg = dict(num_stages=3, block_m=128, block_n=256, block_k=64, swizzle=8)
    ck = tilus.compile(v6(num_sms=132, **cfg), *size[:3], *[tilus.float16] * 3)
    ck = ck[0] if isinstance(ck, list) else ck
    assert (
        "tl_setmaxnreg_dec<40>();" in ck.source and ck.source.count("tl_setmaxnreg_inc<232>") == 2
    )
    assert ck.resources["spill_store_bytes"] == 0, ck.log
    assert not ck.wgmma_serialized
    sass = ck.sass()
    assert "WARPGROUP.DEPBAR.LE gsb0, 0x1" in sass and "USETMAXREG" in sass
