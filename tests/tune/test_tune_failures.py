"""A space never lost silently: user code runs in the calling process only (the V6 case: a
constructor that breaks in any other process), a config that breaks is named with its reason
in a warning, ``failed_configs`` and the progress line, and an all-failed error keeps the
user's file:line. Real NVRTC builds; the GPU is faked (tests/helpers_fakegpu.py)."""

from __future__ import annotations

import os
import re
import warnings

import numpy as np
import pytest

import tilus
from tests.cuda.conftest import needs_gpu, needs_nvrtc
from tests.helpers_fakegpu import OPTIONS, FakeGPU, TunedAdd, make_args
from tilus import option
from tilus.backends.cuda import launch as L
from tilus.errors import TilusCompileError
from tilus.lang.script import InstantiatedScript
from tilus.tune import TuneWarning

pytestmark = needs_nvrtc

#: The 'resource' this process initialized (as torch initializes CUDA): the constructor below
#: works only in the process that set it, as V6's SM-count query works only where CUDA lives.
_INITIALIZED_IN = os.getpid()
_SCRATCH_LINE = 29  # tests/helpers_fakegpu.py: TunedAdd's shared_tensor (too big at 256)


class InitializedAdd(TunedAdd):
    """TunedAdd whose constructor needs this process's resource."""

    def __init__(self, block):
        if os.getpid() != _INITIALIZED_IN:
            raise RuntimeError("Cannot re-initialize CUDA in forked subprocess (stand-in)")
        super().__init__(block)


class BrokenAdd(TunedAdd):
    """TunedAdd whose constructor raises for block 32 (or for every block, with ``all``)."""

    def __init__(self, block, all=False):
        if block == 32 or all:
            raise ValueError(f"block {block} is broken")  # the line the reports must name
        super().__init__(block)


_BROKEN_LINE = 46


def _fresh(cls, **kwargs) -> InstantiatedScript:
    return InstantiatedScript(cls, (), kwargs)


@pytest.fixture
def gpu(monkeypatch, tmp_path):
    fake = FakeGPU()
    monkeypatch.setenv("TILUS_CACHE_DIR", str(tmp_path))
    fake.install(monkeypatch.setattr)
    with option.scoped(**OPTIONS):
        yield fake


def test_compile_runs_constructors_here_and_nvrtc_in_workers(tmp_path):
    kernel = _fresh(InitializedAdd)
    with option.scoped(cache_dir=str(tmp_path), parallel_workers=3):
        out = tilus.compile(kernel, *make_args())
    assert [ck.config for ck in out] == [{"block": b} for b in (32, 64, 128)]
    assert all(ck.compiled_in not in (None, os.getpid()) for ck in out)  # NVRTC elsewhere
    assert list(kernel.failed_configs) == [(("block", 256),)]  # only the refusal
    assert "shared memory" in kernel.failed_configs[(("block", 256),)]


def test_tuning_with_such_a_constructor_loses_no_config(gpu):
    kernel = _fresh(InitializedAdd)
    args = make_args()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kernel(*args)
    stats = L.dispatcher(kernel).last_tuning
    assert stats["failed"] == 1 and stats["timed"] == 2 and stats["winner"] == {"block": 64}
    assert stats["workers"] >= 2 and os.getpid() not in stats["build_pids"]
    texts = [str(w.message) for w in caught if issubclass(w.category, TuneWarning)]
    assert len(texts) == 1 and "never picked" in texts[0]  # block 128's wrong outputs only
    np.testing.assert_array_equal(args[3].array, args[1].array + args[2].array)


def test_a_broken_config_is_reported_before_the_winner_is_used(gpu, capfd):
    kernel = _fresh(BrokenAdd)
    args = make_args()
    seen = []  # (message, writes of the caller's output when it was raised)

    def record(message, category, *rest, **kw):
        seen.append((str(message), category, args[3].writes))

    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = record
        kernel(*args)
    where = f"test_tune_failures.py:{_BROKEN_LINE})"
    broken = [m for m, c, _ in seen if "other than the compiler's refusal" in m]
    assert len(broken) == 1 and all(c is TuneWarning for _, c, _ in seen)
    assert (
        "1 of 4 configs failed" in broken[0] and '{"block":32}: ValueError: block 32' in broken[0]
    )
    assert where in broken[0]
    # 256 refused, 32 broken, 128 wrong: the winner comes from 1 of 4 configs, and says so
    most = [(m, w) for m, _, w in seen if "more than half of the space failed" in m]
    assert len(most) == 1 and most[0][1] == 0  # before the caller's output was written
    assert (
        "3 of 4 configs" in most[0][0] and '{"block":64} was picked among the 1 left' in most[0][0]
    )
    assert args[3].writes == 1
    # failed_configs and the progress line name the reason
    reason = kernel.failed_configs[(("block", 32),)]
    assert reason.startswith("ValueError: block 32 is broken (at ") and reason.endswith(where)
    line = capfd.readouterr().err
    assert re.search(
        r"4/4, 2 failed: 1 x ValueError: block 32 is broken \(at .*"
        + re.escape(where)
        + r", 1 refused by the compiler",
        line,
    ), line


def test_every_config_refused_points_at_the_first_failure(tmp_path):
    @tilus.autotune("block", [256, 512])
    class TooBig(TunedAdd):
        """Every config needs more shared memory than a block may have."""

    with option.scoped(cache_dir=str(tmp_path), parallel_workers=2):
        with pytest.raises(TilusCompileError) as info:
            tilus.compile(_fresh(TooBig), *make_args())
    e = info.value
    assert e.loc is not None and e.loc.file.endswith("helpers_fakegpu.py")
    assert e.loc.line == _SCRATCH_LINE
    text = str(e)
    assert text.startswith(f"{e.loc}") and "no config of TooBig compiles" in text
    assert "{'block': 256}:" in text and "{'block': 512}:" in text  # every reason, in order
    assert text.index("'block': 256") < text.index("'block': 512")


def test_every_config_refused_on_the_interpreter_path_points_at_the_first_failure():
    @tilus.autotune("block", [256, 512])
    class TooBigHere(TunedAdd):
        """Every config needs more shared memory than a block may have (each its own amount)."""

    with pytest.raises(TilusCompileError, match="no config of TooBigHere compiles") as info:
        _fresh(TooBigHere).compile(*make_args())
    e = info.value
    assert e.loc.file.endswith("helpers_fakegpu.py") and e.loc.line == _SCRATCH_LINE
    assert str(e).startswith(f"{e.loc}") and "{'block': 512}:" in str(e)


def test_every_config_broken_in_tuning_points_at_the_users_line(gpu):
    kernel = _fresh(BrokenAdd, all=True)
    with pytest.warns(TuneWarning, match="4 of 4 configs failed"):
        with pytest.raises(TilusCompileError, match="no config of BrokenAdd compiles") as info:
            kernel(*make_args())
    e = info.value
    assert e.loc.file == __file__ and e.loc.line == _BROKEN_LINE
    text = str(e)
    assert text.startswith(f"{e.loc}")
    for b in (32, 64, 128, 256):
        assert f'{{"block":{b}}}: ValueError: block {b} is broken (at ' in text


# --- the GPU tier ------------------------------------------------------------------------------
@pytest.mark.gpu
@needs_gpu
def test_v6_default_constructor_tunes_its_whole_space(tmp_path):
    """V6's default num_sms asks torch for the SM count: tuning must keep every config."""
    import importlib
    import sys
    from pathlib import Path

    import torch

    examples = Path(__file__).resolve().parents[2] / "examples" / "hopper_matmul"
    if str(examples) not in sys.path:
        sys.path.insert(0, str(examples))
    v6 = importlib.import_module("matmul_v6")
    m, n, k = 1000, 1032, 520
    a = torch.randn(m, k, device="cuda", dtype=torch.float16)
    b = torch.randn(n, k, device="cuda", dtype=torch.float16)
    c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float16)
    kernel = v6.MatmulWGMMAV6()
    with option.scoped(cache_dir=str(tmp_path)), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kernel(m, n, k, a, b, c)
        torch.cuda.synchronize()
    broken = [str(w.message) for w in caught if "other than the compiler" in str(w.message)]
    assert not broken, broken
    stats = L.dispatcher(kernel).last_tuning
    assert stats["configs"] == 8 and stats["failed"] == 0, (stats, kernel.failed_configs)
    ref = a.float() @ b.float().T
    assert float((c.float() - ref).abs().max() / ref.abs().max()) < 1e-2
