"""The user's seed kernels, unmodified, on the interpreter: every config, ragged sizes."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import tilus


def _run(kernel, m, n, k):
    rng = np.random.default_rng()
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((n, k)).astype(np.float16)
    c = np.full((m, n), np.nan, dtype=np.float16)
    kernel(m, n, k, a, b, c)
    ref = a.astype(np.float64) @ b.astype(np.float64).T
    assert not np.isnan(c).any()
    return float(np.abs(c - ref).max() / np.abs(ref).max())


V2_SIZES = [(200, 256, 192), (64, 128, 64), (300, 384, 320)]


@pytest.mark.parametrize("m, n, k", V2_SIZES)
def test_seed_v2_every_config(seeds, m, n, k):
    MatmulWGMMAV2 = seeds("matmul_v2").MatmulWGMMAV2

    space = MatmulWGMMAV2().configs
    assert len(space) == 45
    ran = 0
    for cfg in space:
        kernel = MatmulWGMMAV2(**cfg)
        smem = cfg["num_stages"] * (cfg["block_m"] + cfg["block_n"]) * cfg["block_k"] * 2
        if smem > 232448:
            with pytest.raises(tilus.TilusCompileError, match="232448"):
                _run(kernel, m, n, k)
            continue
        assert _run(kernel, m, n, k) < 1e-3, cfg
        ran += 1
    assert ran == 44


def test_seed_v2_all_configs_option_cross_checks(seeds):
    MatmulWGMMAV2 = seeds("matmul_v2").MatmulWGMMAV2

    kernel = MatmulWGMMAV2()
    with tilus.option.scoped(interpret_all_configs=True), warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        assert _run(kernel, 130, 256, 128) < 1e-3
    skipped = [str(x.message) for x in w if "skipped" in str(x.message)]
    assert len(skipped) == 1 and "232448" in skipped[0] and "'num_stages': 4" in skipped[0]
    bad = [k for k, v in kernel.failed_configs.items() if "232448" in v]
    assert len(bad) == 1


@pytest.mark.parametrize(
    "m, n, k", [(200, 256, 192), (256, 512, 256), (130, 1280, 128), (64, 256, 64)]
)
def test_seed_v4(seeds, m, n, k):
    MatmulWGMMAV4 = seeds("matmul_v4").MatmulWGMMAV4

    assert _run(MatmulWGMMAV4(), m, n, k) < 1e-3


@pytest.mark.parametrize("seed", [3, 4])
def test_seed_v4_shuffled_schedule(seeds, seed):
    MatmulWGMMAV4 = seeds("matmul_v4").MatmulWGMMAV4

    with tilus.option.scoped(schedule_seed=seed):
        assert _run(MatmulWGMMAV4(), 200, 512, 256) < 1e-3


def test_seed_v4_space_and_ir_are_stable(seeds):
    MatmulWGMMAV4 = seeds("matmul_v4").MatmulWGMMAV4

    kernel = MatmulWGMMAV4()
    assert kernel.configs == [
        dict(num_stages=3, block_m=128, block_n=256, block_k=64, swizzle_size=4)
    ]
    t1 = kernel.program(kernel.configs[0], {"n_size": 512, "k_size": 256}).text
    from tilus.lang.frontend.kernel import transpile
    from tilus.passes.pipeline import lower

    t2 = lower(
        transpile(
            kernel.instance(kernel.configs[0]), {"n_size": 512, "k_size": 256}, kernel.configs[0]
        )
    ).text
    assert t1 == t2
    assert "tma_pipe_full_barriers" in t1 and "with threads[256:288]" in t1
