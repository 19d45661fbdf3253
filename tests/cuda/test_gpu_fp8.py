"""fp8 on a Hopper GPU: casts bit-identical to the interpreter over every code and every f16 /
bf16 value, fp8 WGMMA against torch float32, and the two quantized examples at ragged sizes."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.cuda.conftest import needs_gpu

pytestmark = [pytest.mark.gpu, needs_gpu]

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "quantized"


def _torch():
    import torch

    return torch


def _tdt(dt):
    torch = _torch()
    return {
        "float32": torch.float32,
        "float16": torch.float16,
        "bfloat16": torch.bfloat16,
        "float8_e4m3": torch.float8_e4m3fn,
        "float8_e5m2": torch.float8_e5m2,
    }[dt.name]


def _both(src_dt, dst_dt, x):
    """The cast kernel's output bytes on the GPU and on the interpreter, for input ``x``."""
    import tilus
    from tests.test_fp8 import Cast

    torch = _torch()
    n = x.numel()
    outs = []
    for device in ("cuda", "cpu"):
        if dst_dt.nbits == 8:  # raw bytes viewed as fp8
            y = torch.full((n,), 0x5A, dtype=torch.uint8, device=device)
        else:
            y = torch.full((n,), float("nan"), dtype=_tdt(dst_dt), device=device)
        xs = x.to(device)
        with tilus.option.scoped(interpret=device == "cpu"):
            Cast(src_dt, dst_dt)(n, xs, y)
        torch.cuda.synchronize()
        outs.append(y.cpu())
    return outs


def _boundary_f32(dt):
    """Every midpoint between adjacent values of ``dt``, one float32 ulp either side, the
    specials and out-of-range values, and random values."""
    from tilus.ir import fp8

    vals = np.unique(fp8.decode(np.arange(256, dtype=np.uint8), dt).astype(np.float64))
    vals = vals[np.isfinite(vals)]
    mid = ((vals[1:] + vals[:-1]) / 2).astype(np.float32)
    xs = [
        mid,
        np.nextafter(mid, np.float32(np.inf)),
        np.nextafter(mid, np.float32(-np.inf)),
        vals.astype(np.float32),
        np.array([np.nan, np.inf, -np.inf, 1e30, -1e30, 0.0, -0.0, 1e-30, -1e-30], np.float32),
        (np.random.default_rng().standard_normal(4096) * float(vals.max()) / 8).astype(np.float32),
        (vals.max() * np.array([1.01, 1.5, 2.0, -1.01, -3.0])).astype(np.float32),
    ]
    return np.concatenate(xs)


FP8 = ["float8_e4m3", "float8_e5m2"]


@pytest.mark.parametrize("fp8_name", FP8)
@pytest.mark.parametrize("dst_name", ["float32", "float16", "bfloat16", "float8_e5m2"])
def test_fp8_to_other_all_codes_bit_identical(fp8_name, dst_name):
    import tilus

    torch = _torch()
    src, dst = getattr(tilus, fp8_name), getattr(tilus, dst_name)
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8).repeat(5)[:1111]  # ragged
    gpu, interp = _both(src, dst, codes)
    if dst.nbits == 8:
        assert torch.equal(gpu, interp)
        return
    # wider results: equal values, NaN where the interpreter has NaN (payloads may differ)
    vg, vi = gpu.float(), interp.float()
    assert torch.equal(torch.isnan(vg), torch.isnan(vi))
    fin = ~torch.isnan(vi)
    assert torch.equal(vg[fin], vi[fin])
    assert torch.equal(gpu[fin].float(), codes[fin].view(_tdt(src)).float())


@pytest.mark.parametrize("fp8_name", FP8)
def test_f32_to_fp8_bit_identical_at_every_boundary(fp8_name):
    import tilus

    torch = _torch()
    dt = getattr(tilus, fp8_name)
    x = torch.from_numpy(_boundary_f32(dt))
    gpu, interp = _both(tilus.float32, dt, x)
    n = x.numel()
    diff = (gpu[:n] != interp[:n]).nonzero().flatten()
    assert diff.numel() == 0, (x[diff[:8]], gpu[diff[:8]], interp[diff[:8]])


@pytest.mark.parametrize("fp8_name", FP8)
@pytest.mark.parametrize("src_name", ["float16", "bfloat16"])
def test_16bit_to_fp8_bit_identical_on_all_values(fp8_name, src_name):
    import tilus

    torch = _torch()
    dt = getattr(tilus, fp8_name)
    bits = torch.arange(65536, dtype=torch.int32).to(torch.int16)
    x = bits.view(_tdt(getattr(tilus, src_name)))
    gpu, interp = _both(getattr(tilus, src_name), dt, x)
    n = x.numel()
    diff = (gpu[:n] != interp[:n]).nonzero().flatten()
    assert diff.numel() == 0, (x[diff[:8]], gpu[diff[:8]], interp[diff[:8]])


@pytest.mark.parametrize(
    "da, db, block_n",
    [
        ("float8_e4m3", "float8_e4m3", 64),
        ("float8_e4m3", "float8_e5m2", 128),
        ("float8_e5m2", "float8_e4m3", 256),
        ("float8_e5m2", "float8_e5m2", 8),
    ],
)
def test_fp8_wgmma_matches_torch(da, db, block_n):
    import tilus
    from tests.fp8_kernels import Fp8Wgmma

    torch = _torch()
    m, n, k = 200, 300, 528  # ragged in M, N and K (K a multiple of 16 bytes for TMA)
    a = (torch.randn(m, k, device="cuda") * 8).to(_tdt(getattr(tilus, da)))
    b = (torch.randn(n, k, device="cuda") * 8).to(_tdt(getattr(tilus, db)))
    c = torch.full((m, n), float("nan"), device="cuda")
    Fp8Wgmma(getattr(tilus, da), getattr(tilus, db), block_n)(
        m, n, k, a.view(torch.uint8), b.view(torch.uint8), c
    )
    torch.cuda.synchronize()
    ref = a.float() @ b.float().T
    assert not torch.isnan(c).any()
    # fp8 WGMMA accumulates with fewer bits than float32 (measured here: 0.8-1.1e-3 of the
    # largest value at K = 528; DeepSeek-V3 reports about 14 bits on Hopper), so the bound is
    # that of the hardware, not of an exact float32 sum
    assert float((c - ref).abs().max() / ref.abs().max()) < 4e-3


def _example(name):
    if str(EXAMPLES) not in sys.path:
        sys.path.insert(0, str(EXAMPLES))
    return importlib.import_module(name)


@pytest.mark.parametrize("m, n, k", [(200, 328, 400), (1000, 520, 2064)])
@pytest.mark.parametrize("row_scales", [True, False])
def test_matmul_fp8_example_ragged(m, n, k, row_scales):
    mod = _example("matmul_fp8")
    kernel = mod.MatmulFP8(
        num_stages=3, block_m=128, block_n=128, block_k=128, swizzle=4, row_scales=row_scales
    )
    ok, err, note, _, _ = mod.run_once(kernel, _torch(), m, n, k, "cuda", row_scales)
    assert ok, (err, note)


def test_matmul_fp8_example_tuned():
    mod = _example("matmul_fp8")
    ok, err, note, _, _ = mod.run_once(mod.MatmulFP8(), _torch(), 1000, 3000, 1040, "cuda")
    assert ok, (err, note)


def test_promoted_sums_keep_a_long_k_precise():
    """K = 8192: the fp8 WGMMA's own sums lose bits over K; promoted every K tile, the error
    is a fraction of theirs (cuBLAS: 2.6e-3 against 7.6e-3 with use_fast_accum at 8192^3)."""
    mod = _example("matmul_fp8")
    torch = _torch()
    cfg = dict(num_stages=4, block_m=128, block_n=128, block_k=128, swizzle=4)
    a8, b8, sa, sb, scale = mod.quantized_inputs(torch, 520, 1000, 8192, "cuda")
    ref = mod.reference(torch, a8, b8, sa, sb, scale, True)
    errs = []
    for cls in (mod.MatmulFP8, mod.MatmulFP8Precise):
        c = torch.full((520, 1000), float("nan"), dtype=torch.bfloat16, device="cuda")
        cls(**cfg)(520, 1000, 8192, a8, b8, sa, sb, scale, c)
        ok, err, note = mod.check(torch, c, ref)
        assert ok, (cls.__name__, err, note)
        errs.append(err)
    assert errs[1] < 0.6 * errs[0], errs


@pytest.mark.parametrize("m, n", [(37, 200), (1000, 7168), (3, 5000)])
def test_per_token_cast_example_ragged(m, n):
    mod = _example("per_token_cast")
    ok, note, *_ = mod.run_once(mod.PerTokenCast(), _torch(), m, n, "cuda")
    assert ok, note


def _space(module, cls):
    """(class, config) pairs of an example's autotune space, for parametrize."""
    kernel_cls = getattr(_example(module), cls)
    return [pytest.param(cls, dict(c), id=f"{cls}-{i}") for i, c in enumerate(kernel_cls().configs)]


@pytest.mark.parametrize(
    "cls, cfg",
    [
        c
        for name in ("MatmulFP8", "MatmulFP8Precise", "MatmulFP8PingPong", "MatmulFP8Cluster")
        for c in _space("matmul_fp8", name)
    ],  # fmt: skip
)
def test_every_matmul_fp8_config_ragged(cls, cfg):
    """Each config of the fp8 spaces at a ragged size (several tiles a block), row scales (and
    a per-tensor scale with the 128 x 128 tiles)."""
    mod = _example("matmul_fp8")
    for rs in (True, False) if cfg["block_n"] == 128 else (True,):
        kernel = getattr(mod, cls)(**cfg, row_scales=rs, num_sms=8)
        ok, err, note, _, _ = mod.run_once(kernel, _torch(), 1000, 520, 2064, "cuda", rs)
        assert ok, (cfg, rs, err, note)


def _persistent():
    mod = _example("per_token_cast")
    return [pytest.param("PerTokenCast", dict(zip(mod.KEYS, c)), id=f"persistent-{i}")
            for i, c in enumerate(mod.PERSISTENT)]  # fmt: skip


@pytest.mark.parametrize("cls, cfg", _space("per_token_cast", "PerTokenCast") + _persistent())
def test_every_per_token_cast_config_ragged(cls, cfg):
    """Each config of the per-token cast's space, rows and row lengths ragged (the persistent
    and ring ones on a grid of 3 "SMs", so that every block loops over several row groups;
    328: rows that are not 16-byte aligned)."""
    mod = _example("per_token_cast")
    for m, n in [(37, 200), (301, 7168), (5, 5000), (77, 328), (2000, 4096)]:
        ok, note, *_ = mod.run_once(mod.PerTokenCast(**cfg, num_sms=3), _torch(), m, n, "cuda")
        assert ok, (cfg, m, n, note)
