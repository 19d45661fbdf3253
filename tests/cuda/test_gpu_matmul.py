"""CUDA backend on a Hopper GPU: the seed V2 (every config) and V4 against torch.matmul."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import load_seed
from tests.cuda.conftest import needs_gpu

pytestmark = [pytest.mark.gpu, needs_gpu]

REPO = Path(__file__).resolve().parents[2]
SMEM_LIMIT = 232448
PINNED_V2 = [
    dict(num_stages=4, block_m=128, block_n=128, block_k=64),
    dict(num_stages=3, block_m=128, block_n=128, block_k=64),
    dict(num_stages=2, block_m=64, block_n=128, block_k=32),
]
BIG = [(4096, 4096, 4096), (8000, 8192, 8192)]
SMALL = [(200, 256, 192), (130, 257, 64), (64, 128, 1000), (1, 8, 16), (777, 520, 264)]


def seed(module: str):
    """A seed kernel module (../shared/seed_kernels or $TILUS_SEED_KERNELS), loaded by path under
    a name of its own: the examples folder has modules with the same names."""
    return load_seed(module)


def rel_error(kernel, m, n, k) -> float:
    """Run on fresh random inputs with a NaN-poisoned output; max |C - ref| / max |ref|."""
    import torch

    a = torch.randn(m, k, device="cuda", dtype=torch.float16)
    b = torch.randn(n, k, device="cuda", dtype=torch.float16)
    c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float16)
    kernel(m, n, k, a, b, c)
    torch.cuda.synchronize()
    ref = torch.matmul(a.float(), b.float().T)
    if torch.isnan(c).any():
        return float("inf")
    return float((c.float() - ref).abs().max() / ref.abs().max().clamp_min(1e-6))


def _fits(cfg) -> bool:
    smem = cfg["num_stages"] * (cfg["block_m"] + cfg["block_n"]) * cfg["block_k"] * 2
    return smem <= SMEM_LIMIT and cfg["block_m"] * cfg["block_n"] // 128 <= 192


def test_vector_add_and_elementwise():
    import torch

    from tests.cuda.test_codegen import VectorAdd

    n = 100_003
    x = torch.randn(n, device="cuda")
    y = torch.randn(n, device="cuda")
    z = torch.full((n,), float("nan"), device="cuda")
    VectorAdd()(n, x, y, z)
    torch.cuda.synchronize()
    torch.testing.assert_close(z, torch.exp(x) + y * 2.0, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("cfg", PINNED_V2, ids=lambda c: "-".join(map(str, c.values())))
@pytest.mark.parametrize("m, n, k", SMALL + BIG)
def test_v2_pinned(cfg, m, n, k):
    V2 = seed("matmul_v2").MatmulWGMMAV2
    assert rel_error(V2(**cfg), m, n, k) < 5e-3


def test_v2_every_config_small_ragged():
    V2 = seed("matmul_v2").MatmulWGMMAV2
    bad = {}
    for cfg in V2().configs:
        if not _fits(cfg):
            continue
        err = rel_error(V2(**cfg), 300, 264, 328)
        if not err < 5e-3:
            bad[str(cfg)] = err
    assert not bad, bad


def test_v2_default_space_autotuned():
    V2 = seed("matmul_v2").MatmulWGMMAV2
    assert rel_error(V2(), 256, 256, 256) < 5e-3


@pytest.mark.parametrize("m, n, k", [(200, 256, 192), (300, 520, 264), (64, 1024, 64)] + BIG)
def test_v4(m, n, k):
    V4 = seed("matmul_v4").MatmulWGMMAV4
    assert rel_error(V4(), m, n, k) < 5e-3


def test_argument_errors():
    import torch

    import tilus

    V2 = seed("matmul_v2").MatmulWGMMAV2
    kernel = V2(**PINNED_V2[0])
    a = torch.randn(128, 64, device="cuda", dtype=torch.float16)
    c = torch.empty(128, 128, device="cuda", dtype=torch.float16)
    with pytest.raises(tilus.TilusArgumentError, match="b_ptr"):
        kernel(128, 128, 64, a, a.float(), c)
    with pytest.raises(tilus.TilusArgumentError, match="b_ptr"):
        kernel(128, 128, 64, a, torch.randn(64, 128, device="cuda").half().T, c)
    with pytest.raises(tilus.TilusArgumentError, match="a_ptr"):  # view larger than the tensor
        kernel(256, 128, 64, a, torch.randn(128, 64, device="cuda").half(), c)
