"""The proxy_fences pass: a fence.proxy.async before TMA loads into generically read tiles."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import tilus
from tests.golden.cases import REPO, SEED_KERNELS
from tilus.passes import pipeline

V0 = REPO / "examples" / "hopper_matmul" / "matmul_v0.py"


def _ir(target: str) -> list[str]:
    r = subprocess.run(
        [sys.executable, "-m", "tilus", "inspect", target, "--ir"],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert r.returncode == 0, r.stderr
    return r.stdout.splitlines()


def test_one_fence_before_a_run_of_tma_loads_into_tiles_read_by_load_shared():
    # V0 reads its TMA tiles with load_shared: one fence, before the first of its two loads
    lines = _ir(f"{V0}:MatmulTMA")
    fences = [i for i, t in enumerate(lines) if "fence_proxy_async" in t]
    loads = [i for i, t in enumerate(lines) if "tma_global_to_shared" in t]
    assert len(fences) == 1 and len(loads) == 2, "\n".join(lines)
    assert fences[0] + 1 == loads[0], "\n".join(lines)
    assert lines[fences[0]].endswith("# line 69"), lines[fences[0]]


def test_no_fence_where_only_wgmma_reads_the_tma_tiles():
    seed = SEED_KERNELS / "matmul_v2.py"
    if not seed.is_file():
        pytest.skip("seed kernels not present")
    lines = _ir(f"{seed}:MatmulWGMMAV2")
    assert any("tma_global_to_shared" in t for t in lines)
    assert not any("fence_proxy_async" in t for t in lines), "\n".join(lines)


def test_without_the_pass_the_interpreter_reports_the_missing_fence(monkeypatch):
    # the interpreter checks the rule on its own: with the pass off, V0's refill of `sa` after
    # the threads' load_shared is reported at the TMA load's line, naming the read's
    monkeypatch.setattr(pipeline, "insert_proxy_fences", lambda fn, smem: fn)
    monkeypatch.syspath_prepend(str(V0.parent))
    import matmul_v0

    rng = np.random.default_rng()
    m, n, k = 70, 128, 96  # a second K step refills the tiles; M not a multiple of the tile
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((n, k)).astype(np.float16)
    c = np.full((m, n), np.nan, np.float16)
    kern = matmul_v0.MatmulTMA(block_m=128, block_n=128, block_k=32)  # a config no other test uses
    with tilus.option.scoped(interpret=True), pytest.raises(tilus.TilusRuntimeError) as info:
        kern(m, n, k, a, b, c)
    err = info.value
    assert "missing fence.proxy_async: tma.global_to_shared" in str(err), str(err)
    assert err.loc.line == 69 and err.loc.file.endswith("matmul_v0.py"), str(err)
    assert "matmul_v0.py:78" in str(err), str(err)
