"""Arguments are honoured or refused: proxy-fence spaces, TMA cache policies, ``assume``."""

from __future__ import annotations

import numpy as np
import pytest

import tilus
from tests.cuda.conftest import needs_nvrtc
from tilus import float16, float32, int32
from tilus.backends.cuda.codegen import generate
from tilus.testing import marker_line


class Fenced(tilus.Script):
    """Copies ``n`` floats; ``space`` picks the proxy fence, ``cond`` the assumption."""

    def __init__(self, space="global", cond="div8"):
        super().__init__()
        self.space = space
        self.cond = cond

    def __call__(self, n: int32, m: int32, x: ~float32, y: ~float32):
        self.attrs.blocks = 1
        self.attrs.warps = 4
        if self.cond == "div8":
            self.assume(n % 8 == 0)  # MARK:div8
        if self.cond == "both":
            self.assume(n % 8 == 0 and m % 4 == 0)  # MARK:both
        if self.cond == "range":
            self.assume(n > 0)  # MARK:range
        if self.cond == "false":
            self.assume(False)  # MARK:false
        gx = self.global_view(x, dtype=float32, shape=[n])
        gy = self.global_view(y, dtype=float32, shape=[n])
        t = self.load_global(gx, offsets=[0], shape=[128])
        self.fence.proxy_async(self.space)  # MARK:fence
        self.store_global(gy, t + 1.0, offsets=[0])


def _program(**kw):
    k = Fenced(**kw)
    return k.program(k.configs[0], {})


def test_proxy_fence_lowers_the_space_it_was_given():
    src = generate(_program(space="global")).source
    assert "tl_fence_proxy_async_global();" in src
    assert "fence.proxy.async.global;" in src
    src = generate(_program(space="shared")).source
    assert "tl_fence_proxy_async();" in src and "tl_fence_proxy_async_global();" not in src
    assert "space='global'" in _program(space="global").text


def test_proxy_fence_refuses_an_unknown_space_at_its_line():
    with pytest.raises(tilus.TilusProgramError) as info:
        _program(space="cluster")
    assert "'shared' or 'global'" in str(info.value)
    assert info.value.loc.line == marker_line(Fenced, "MARK:fence")


@needs_nvrtc
def test_global_proxy_fence_compiles_for_sm90a():
    ck = tilus.compile(Fenced(space="global"), 16, 16, None, None, target="sm_90a")
    assert "fence.proxy.async.global" in ck.source


def test_assume_reaches_the_generated_code_and_the_program_text():
    prog = _program(cond="both")
    src = generate(prog).source
    assert "__builtin_assume(((n % 8) == 0));" in src
    assert "__builtin_assume(((m % 4) == 0));" in src
    line = marker_line(Fenced, "MARK:both")
    assert f"assume ((n % 8) == 0)  # line {line}" in prog.text
    assert "assume" not in _program(cond="none").text


@pytest.mark.parametrize("n, m, bad", [(16, 8, None), (12, 8, "n = 12"), (16, 6, "m = 6")])
def test_interpreter_checks_assumptions_at_their_line(n, m, bad):
    x = np.random.default_rng(n + m).standard_normal(n).astype(np.float32)
    y = np.zeros(n, np.float32)
    k = Fenced(space="global", cond="both")
    if bad is None:
        k(n, m, x, y)
        np.testing.assert_allclose(y, x + 1.0, rtol=1e-6)
        return
    with pytest.raises(tilus.TilusRuntimeError) as info:
        k(n, m, x, y)
    assert bad in str(info.value) and "does not hold" in str(info.value)
    assert info.value.loc.line == marker_line(Fenced, "MARK:both")
    assert not y.any()  # nothing ran


@pytest.mark.parametrize("cond, fragment", [("range", "param % c == 0"), ("false", "false")])
def test_assume_refuses_what_it_cannot_record(cond, fragment):
    with pytest.raises(tilus.TilusProgramError) as info:
        _program(cond=cond)
    assert fragment in str(info.value)
    assert info.value.loc.line == marker_line(Fenced, f"MARK:{cond}")


class CachePolicy(tilus.Script):
    """One TMA load or store with a cache policy."""

    def __init__(self, which):
        super().__init__()
        self.which = which

    def __call__(self, a: ~float16):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        ga = self.global_view(a, dtype=float16, shape=[64, 64])
        s = self.shared_tensor(dtype=float16, shape=[64, 64])
        bar = self.mbarrier.alloc(counts=[1])
        with self.single_thread():
            if self.which == "load":
                self.tma.global_to_shared(  # MARK:load
                    src=ga, dst=s, offsets=[0, 0], mbarrier=bar[0], cache_policy=1
                )
            else:
                self.tma.shared_to_global(s, ga, offsets=[0, 0], cache_policy=1)  # MARK:store


@pytest.mark.parametrize("which", ["load", "store"])
def test_tma_cache_policy_is_refused_at_its_line(which):
    k = CachePolicy(which)
    with pytest.raises(tilus.TilusProgramError) as info:
        k.program(k.configs[0], {})
    assert "cache_policy" in str(info.value)
    assert info.value.loc.line == marker_line(CachePolicy, f"MARK:{which}")


def test_cuda_launch_checks_the_assumptions_before_launching():
    # the facts reach the compiler (__builtin_assume), so a launch that breaks one is refused
    from tilus.backends.cuda.launcher import LaunchPlan

    ks = generate(_program(cond="both"))
    plan = LaunchPlan(ks.name, ks)
    positions = {"n": 0, "m": 1, "x": 2, "y": 3}
    plan.bind({"n": 16, "m": 8}, positions)  # both hold
    with pytest.raises(tilus.TilusRuntimeError) as info:
        plan.bind({"n": 16, "m": 6}, positions)
    assert "m = 6 is not a multiple of 4" in str(info.value)
    assert info.value.loc.line == marker_line(Fenced, "MARK:both")
