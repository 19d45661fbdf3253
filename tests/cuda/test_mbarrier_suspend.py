"""mbarrier.wait(suspend_ns=...): the IR text, the try_wait with its hint, NVRTC, the interpreter."""

from __future__ import annotations

import numpy as np
import pytest

import tilus
from tests.cuda.conftest import compile_sm90a, needs_nvrtc
from tilus import float32, int32
from tilus.backends.cuda.codegen import generate
from tilus.testing import marker_line


class Handoff(tilus.Script):
    """Warp 1 writes a tile into shared memory and arrives; warp 0 waits (with ``suspend_ns``,
    ``sem``) and stores it; ``bug`` picks a misuse of the hint."""

    def __init__(self, suspend_ns=None, sem="acquire", bug="none"):
        super().__init__()
        self.suspend_ns = suspend_ns
        self.sem = sem
        self.bug = bug

    def __call__(self, n: int32, out: ~float32):
        self.attrs.blocks = 1
        self.attrs.warps = 2
        g = self.global_view(out, dtype=float32, shape=[n])
        s = self.shared_tensor(dtype=float32, shape=[32])
        bar = self.mbarrier.alloc([32])
        self.sync()
        with self.single_warp(1):
            self.store_shared(s, self.register_tensor(dtype=float32, shape=[32], init=lambda i: i))
            self.mbarrier.arrive(bar[0])
        with self.single_warp(0):
            if self.bug == "value":
                self.mbarrier.wait(bar[0], phase=0, suspend_ns=0)  # BUG:value
            elif self.bug == "scope":
                self.mbarrier.wait(bar[0], phase=0, scope="cluster", suspend_ns=9)  # BUG:scope
            else:
                self.mbarrier.wait(bar[0], phase=0, sem=self.sem, suspend_ns=self.suspend_ns)
            self.store_global(g, self.load_shared(s), offsets=[0])


def _program(**kw):
    k = Handoff(**kw)
    return k.program(k.configs[0], {})


def test_ir_text_is_unchanged_without_a_hint():
    plain = _program().text
    assert "suspend_ns" not in plain
    hinted = _program(suspend_ns=500).text
    assert "suspend_ns=500" in hinted
    assert hinted.replace(", suspend_ns=500", "") == plain


@pytest.mark.parametrize("sem", ["acquire", "relaxed"])
def test_codegen_passes_the_hint_to_try_wait(sem):
    src = generate(_program(suspend_ns=750, sem=sem)).source
    assert f"mbarrier.try_wait.parity.{sem}.cta.shared::cta.b64 p, [%1], %2, %3;" in src
    assert f"tl_mbar_wait_parity_suspend_{sem}(" in src and ", 750u);" in src
    plain = generate(_program(sem=sem)).source
    assert "tl_mbar_wait_parity_suspend" not in plain  # no hint: the prelude is as before


@needs_nvrtc
@pytest.mark.parametrize("sem", ["acquire", "relaxed"])
def test_the_hinted_wait_builds_with_nvrtc(sem):
    # ptxas turns the hint into a NANOSLEEP (.SYNCS, that many ns) between two phase checks
    _, ops = compile_sm90a(generate(_program(suspend_ns=300, sem=sem)).source)
    assert any(op.startswith("SYNCS") for op in ops), sorted(ops)
    assert any(op.startswith("NANOSLEEP") for op in ops), sorted(ops)
    _, plain = compile_sm90a(generate(_program(sem=sem)).source)
    assert not any(op.startswith("NANOSLEEP") for op in plain), sorted(plain)


def test_the_interpreter_runs_a_hinted_wait():
    out = np.full(32, np.nan, dtype=np.float32)
    with tilus.option.scoped(interpret=True):
        Handoff(suspend_ns=100)(32, out)
    assert np.array_equal(out, np.arange(32, dtype=np.float32))


@pytest.mark.parametrize("bug, fragment", [("value", "suspend_ns must be an int"),
                                           ("scope", "suspend_ns needs scope='cta'")])  # fmt: skip
def test_bad_hints_are_refused_at_their_line(bug, fragment):
    with pytest.raises(tilus.TilusError) as info:
        _program(bug=bug)
    assert fragment in str(info.value), str(info.value)
    assert info.value.loc.line == marker_line(Handoff, f"BUG:{bug}"), str(info.value)
