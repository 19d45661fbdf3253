"""The row-wise examples on the CUDA backend without a GPU: NVRTC to sm_90a (SASS checked for
128-bit global accesses and no local memory), then the generated code run on the CPU emulator
at ragged sizes against NumPy."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from tests.cuda.conftest import ROOT, needs_nvrtc
from tests.helpers_cpu_cuda import available, emulate

needs_gxx = pytest.mark.skipif(not available(), reason="needs g++ for the CPU emulator")


@pytest.fixture(scope="module")
def ex(tmp_path_factory):
    """The examples' modules (imported by their plain names, as the scripts import each other)."""
    names = ["example_support", "rowwise_support", "softmax", "layer_norm", "rms_norm", "bias_act"]
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(ROOT / "examples"))
        mp.setenv("TILUS_CACHE_DIR", str(tmp_path_factory.mktemp("tilus-cache")))
        for n in names:
            mp.delitem(sys.modules, n, raising=False)
        import importlib

        yield {n: importlib.import_module(n) for n in names}
        for n in names:
            sys.modules.pop(n, None)


def _sass_ok(ck):
    from tilus.runtime.sass import sass_opcodes

    ops = sass_opcodes(ck.sass())
    assert not ops.get("LDL") and not ops.get("STL"), ck.config
    assert ck.resources.get("local_bytes", 0) == 0
    return ops


def _rand(rng, *shape):
    return rng.standard_normal(shape).astype(np.float16)


def _close(got, want, tol=1e-2):
    assert not np.isnan(got).any()
    err = np.abs(got.astype(np.float64) - want).max() / max(1.0, np.abs(want).max())
    assert err < tol, err


@needs_nvrtc
@needs_gxx
@pytest.mark.parametrize(
    "block, per_thread, m, n",
    [(512, 8, 5, 200), (1024, 16, 3, 1000), (1024, 32, 3, 1000)],  # 8, 16, 32 a thread
)
def test_softmax(ex, block, per_thread, m, n):
    sm = ex["softmax"]
    rng = np.random.default_rng()
    x, y = _rand(rng, m, n), np.full((m, n), np.nan, np.float16)
    rows, _ = sm.rows_and_warps(sm.pow2_at_least(n), block, per_thread)
    ck = emulate(
        sm.Softmax(block=block, per_thread=per_thread, stages=0, warps=0, hints=0),
        (m, n, x, y),
        [-(-m // rows)],
    )
    _close(y, sm.reference(x.astype(np.float64)), 2e-3)
    ops = _sass_ok(ck)
    assert ops.get("SHFL", 0) > 0


@needs_nvrtc
@needs_gxx
def test_online_softmax_over_several_tiles(ex):
    sm = ex["softmax"]
    rng = np.random.default_rng()
    m, n = 5, 2500  # three 1024-column tiles, the last ragged
    x, y = _rand(rng, m, n), np.full((m, n), np.nan, np.float16)
    emulate(sm.OnlineSoftmax(block_n=1024, rows=4, warps=8), (m, n, x, y), [2])
    _close(y, sm.reference(x.astype(np.float64)), 2e-3)


@needs_nvrtc
@needs_gxx
def test_layer_norm_and_rms_norm(ex):
    rng = np.random.default_rng()
    m, n = 5, 200
    x, w, b = _rand(rng, m, n), _rand(rng, n), _rand(rng, n)
    y = np.full((m, n), np.nan, np.float16)
    ck = emulate(
        ex["layer_norm"].LayerNorm(block=512, per_thread=4, stages=0, warps=0, hints=0),
        (m, n, x, w, b, y),
        [3],
    )
    _close(y, ex["layer_norm"].reference(*(a.astype(np.float64) for a in (x, w, b))))
    y = np.full((m, n), np.nan, np.float16)
    # 4 rows of 256 over one warp: 32 a thread, the loops of codegen.loops
    emulate(
        ex["rms_norm"].RMSNorm(block=1024, per_thread=32, stages=0, warps=0, hints=0),
        (m, n, x, w, y),
        [2],
    )
    _close(y, ex["rms_norm"].reference(x.astype(np.float64), w.astype(np.float64)))
    assert "uint4" in ck.source  # 16-byte vector accesses with a scalar fallback


@needs_nvrtc
@needs_gxx
@pytest.mark.parametrize("act", ["relu", "gelu"])
def test_bias_act_ragged_in_both_dims(ex, act):
    ba = ex["bias_act"]
    rng = np.random.default_rng()
    m, n = 37, 300
    x, w, b = _rand(rng, m, n), _rand(rng, n), _rand(rng, n)
    y = np.full((m, n), np.nan, np.float16)
    k = ba.BiasAct(block_m=16, block_n=256, warps=4, act=act)
    emulate(k, (m, n, x, w, b, y), [2, 3])
    _close(y, ba.reference(*(a.astype(np.float64) for a in (x, w, b)), act))


@needs_nvrtc
def test_bench_shapes_compile_with_128_bit_accesses(ex):
    import tilus

    sm = ex["softmax"]
    for n, cfg in [
        (8192, dict(block=8192, per_thread=32, stages=0, warps=0)),
        (1024, dict(block=4096, per_thread=32, stages=0, warps=0)),
    ]:
        ck = tilus.compile(sm.Softmax(**cfg, hints=0), 4096, n, None, None)
        ops = _sass_ok(ck)
        assert ops.get("LDG", 0) > 0 and ops.get("STG", 0) > 0
        assert ".128" in ck.sass()
