"""``tilus.compile`` of a multi-config kernel: constructors and code generation here, NVRTC in
build workers, results and errors exactly as when built one after another. Real NVRTC builds,
no GPU."""

from __future__ import annotations

import os
import warnings

import numpy as np
import pytest

import tilus
from tests.cuda.conftest import needs_nvrtc
from tests.helpers_fakegpu import TunedAdd, fresh
from tilus import option
from tilus.errors import TilusBackendError, TilusCompileError, TilusPerformanceWarning
from tilus.lang.script import InstantiatedScript

pytestmark = needs_nvrtc

N = 1000
ARGS = (N, np.zeros(N, np.float32), np.zeros(N, np.float32), np.zeros(N, np.float32))


@tilus.autotune("block", [256, 512])
class TooBig(TunedAdd):
    """Every config needs more shared memory than a block may have."""


@pytest.fixture
def builds(monkeypatch):
    """Log the pid and block of every build (in this process) and the pids of the build
    workers that ran NVRTC; ``hooks[block]`` runs at that config's build."""
    from tilus.backends.cuda.codegen import build as B
    from tilus.tune import parallel

    log, real, hooks, workers = [], B.build_steps, {}, set()

    def build_steps(program, config, **kw):
        log.append((os.getpid(), config.get("block")))
        hook = hooks.get(config.get("block"))
        if hook is not None:
            hook()
        return (yield from real(program, config, **kw))

    real_all = parallel.compile_all

    def compile_all(*args, **kwargs):
        results = real_all(*args, **kwargs)
        workers.update(r.worker for r in results if r.worker is not None)
        return results

    monkeypatch.setattr(B, "build_steps", build_steps)
    monkeypatch.setattr(parallel, "compile_all", compile_all)

    def read():
        return list(log)

    read.hooks, read.workers = hooks, workers
    return read


def _compile(kernel, cache, workers):
    with option.scoped(cache_dir=str(cache), parallel_workers=workers):
        return tilus.compile(kernel, *ARGS)


def test_parallel_compile_matches_serial(tmp_path, builds):
    par_kernel = fresh()
    par = _compile(par_kernel, tmp_path / "par", 3)
    # prepared here (user code never runs in a worker), NVRTC in several build workers
    assert {pid for pid, _ in builds()} == {os.getpid()}
    assert len(builds.workers) > 1 and os.getpid() not in builds.workers
    assert sorted(b for _, b in builds()) == [32, 64, 128]  # 256 fails before building

    ser_kernel = fresh()
    ser = _compile(ser_kernel, tmp_path / "ser", 1)
    assert (
        [ck.config for ck in par]
        == [ck.config for ck in ser]
        == [{"block": b} for b in (32, 64, 128)]
    )
    for p, s in zip(par, ser):
        assert p.source == s.source and p.cubin == s.cubin and "ptxas info" in p.log
        assert p.resources == s.resources and p.resources.get("registers")
        assert p.name == s.name and not p.cached and not s.cached and p.compile_seconds > 0
    # the failing config is recorded as when built serially
    assert par_kernel.failed_configs == ser_kernel.failed_configs
    assert "shared memory" in par_kernel.failed_configs[(("block", 256),)]
    # a warm cache: the same kernels again, now from the artifact cache
    again = _compile(fresh(), tmp_path / "par", 3)
    assert [ck.cubin for ck in again] == [ck.cubin for ck in par] and all(c.cached for c in again)


def test_parallel_compile_errors_as_when_serial(tmp_path, builds):
    for workers in (1, 3):
        with pytest.raises(TilusCompileError, match="no config of TooBig compiles") as info:
            _compile(InstantiatedScript(TooBig, (), {}), tmp_path / str(workers), workers)
        msg = str(info.value)
        assert "{'block': 256}:" in msg and "{'block': 512}:" in msg  # every reason, in order
        assert msg.index("'block': 256") < msg.index("'block': 512")

    def nvrtc_fails():
        raise TilusBackendError("NVRTC failed (faked)")

    builds.hooks[64] = nvrtc_fails  # not a TilusCompileError: raised, not skipped
    for workers in (1, 3):
        with pytest.raises(TilusBackendError, match="faked"):
            _compile(fresh(), tmp_path / f"nv{workers}", workers)


def test_worker_warnings_reach_the_caller(tmp_path, builds):
    def warn():
        warnings.warn("wgmma serialized (faked)", TilusPerformanceWarning, stacklevel=2)

    builds.hooks[32] = warn
    with pytest.warns(TilusPerformanceWarning, match="faked"):
        out = _compile(fresh(), tmp_path, 3)
    assert len(out) == 3 and builds.workers
