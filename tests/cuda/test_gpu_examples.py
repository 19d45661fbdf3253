"""CUDA backend on a Hopper GPU: the example kernels (tiled matmul, Hopper V0..V6), every config."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

from tests.cuda.conftest import needs_gpu

pytestmark = [pytest.mark.gpu, needs_gpu]

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _example(folder: str, module: str):
    path = EXAMPLES / folder
    if not (path / f"{module}.py").is_file():
        pytest.skip(f"example {folder}/{module}.py is not present")
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))
    return importlib.import_module(module)


def _scripts(mod):
    import tilus

    out = []
    for name in dir(mod):
        obj = getattr(mod, name)
        if isinstance(obj, type) and issubclass(obj, tilus.Script) and obj is not tilus.Script:
            if obj.__module__ == mod.__name__:
                out.append(obj)
    return out


def _check_abt(kernel, m, n, k) -> float:
    import torch

    a = torch.randn(m, k, device="cuda", dtype=torch.float16)
    b = torch.randn(n, k, device="cuda", dtype=torch.float16)
    c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float16)
    kernel(m, n, k, a, b, c)
    torch.cuda.synchronize()
    ref = torch.matmul(a.float(), b.float().T)
    if torch.isnan(c).any():
        return float("inf")
    return float((c.float() - ref).abs().max() / ref.abs().max())


@pytest.mark.parametrize("version", range(7))
def test_hopper_example_every_config(version):
    import tilus

    mod = _example("hopper_matmul", f"matmul_v{version}")
    f16 = tilus.float16
    bad, ran = {}, 0
    for cls in _scripts(mod):
        for cfg in cls().configs:
            kernel = cls(**cfg)
            try:
                tilus.compile(kernel, 300, 264, 328, f16, f16, f16, config=cfg)
            except tilus.TilusCompileError:
                continue  # limits (shared memory, registers): reported by the compile tests
            err = _check_abt(kernel, 300, 264, 328)
            ran += 1
            if not err < 1e-2:
                bad[f"{cls.__name__} {cfg}"] = err
    assert ran > 0
    assert not bad, bad


BIG = [(4096, 4096, 4096), (8192, 8192, 8192), (8000, 8192, 8192)]


@pytest.mark.parametrize("m, n, k", BIG)
def test_hopper_example_v1_big(m, n, k):
    mod = _example("hopper_matmul", "matmul_v1")
    cfg = dict(block_m=128, block_n=128, block_k=64)
    assert _check_abt(mod.MatmulWGMMA(**cfg), m, n, k) < 1e-2


@pytest.mark.parametrize("m, n, k", BIG)
def test_hopper_example_v0_big(m, n, k):
    mod = _example("hopper_matmul", "matmul_v0")
    kernel = mod.MatmulTMA(**mod.MatmulTMA().configs[0])
    assert _check_abt(kernel, m, n, k) < 1e-2


@pytest.mark.parametrize("version", [3, 4, 5, 6])
def test_hopper_example_warp_specialized_big(version):
    mod = _example("hopper_matmul", f"matmul_v{version}")
    (cls,) = _scripts(mod)
    cfg = dict(num_stages=4, block_m=128, block_n=128, block_k=64)
    if version >= 4:
        cfg.update(block_n=256, swizzle=4)
    if version >= 5:
        cfg.update(num_stages=3)  # the shared C tiles leave room for 3 stages
    for m, n, k in BIG:
        assert _check_abt(cls(**cfg), m, n, k) < 1e-2, (m, n, k)


def test_tiled_matmul_dot():
    import torch

    from tests.cuda.test_codegen import TiledMatmul

    for m, n, k in ((200, 136, 64), (64, 64, 16), (4000, 4096, 512)):
        a = torch.randn(m, k, device="cuda", dtype=torch.float16)
        b = torch.randn(k, n, device="cuda", dtype=torch.float16)
        c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float32)
        TiledMatmul()(m, n, k, a, b, c)
        torch.cuda.synchronize()
        ref = torch.matmul(a.float(), b.float())
        assert float((c - ref).abs().max() / ref.abs().max()) < 1e-3


def test_examples_tiled_matmul_and_vector_add():
    import torch

    tm = _example(".", "tiled_matmul")
    for cfg in tm.TiledMatmul().configs:
        m, n, k = 257, 129, 100
        a = torch.randn(m, k, device="cuda", dtype=torch.float16)
        b = torch.randn(k, n, device="cuda", dtype=torch.float16)
        c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float32)
        tm.TiledMatmul(**cfg)(m, n, k, a, b, c)
        torch.cuda.synchronize()
        ref = torch.matmul(a.float(), b.float())
        assert float((c - ref).abs().max() / ref.abs().max()) < 1e-3, cfg
    va = _example(".", "vector_add")
    for cfg in va.VectorAdd().configs:
        n = 10_000_019
        x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
        z = torch.full((n,), float("nan"), device="cuda")
        va.VectorAdd(**cfg)(n, x, y, z)
        torch.cuda.synchronize()
        torch.testing.assert_close(z, x + y)


@pytest.mark.parametrize("m, n, k", [(300, 264, 328), (4000, 4096, 4096), (8000, 8192, 8192)])
def test_hopper_example_v6_several_tiles_per_block(m, n, k):
    # few persistent blocks: each loops over many tiles (ragged ones included)
    mod = _example("hopper_matmul", "matmul_v6")
    cfg = dict(num_stages=3, block_m=128, block_n=256, block_k=64, swizzle=8)
    for num_sms in (1, 7):
        assert _check_abt(mod.MatmulWGMMAV6(num_sms=num_sms, **cfg), m, n, k) < 1e-2
