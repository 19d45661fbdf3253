"""The row-wise examples on the GPU against torch, NaN-poisoned outputs, ragged sizes.

Run with ``python -m pytest -q -m gpu tests/cuda/test_gpu_rowwise.py`` on a Hopper GPU."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from tests.cuda.conftest import ROOT, needs_gpu

pytestmark = [pytest.mark.gpu, needs_gpu]


@pytest.fixture(scope="module")
def ex():
    names = ["example_support", "rowwise_support", "softmax", "layer_norm", "rms_norm", "bias_act"]
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(ROOT / "examples"))
        for n in names:
            mp.delitem(sys.modules, n, raising=False)
        import importlib

        yield {n: importlib.import_module(n) for n in names}
        for n in names:
            sys.modules.pop(n, None)


SHAPES = [(777, 1333), (64, 8192), (3, 32000), (1000, 1024), (5, 200)]


def _inputs(m, n, k):
    import torch

    g = torch.Generator(device="cuda").manual_seed(m * 7919 + n)
    x = torch.randn(m, n, device="cuda", generator=g).half()
    vecs = [torch.randn(n, device="cuda", generator=g).half() for _ in range(k)]
    y = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float16)
    return x, vecs, y


def _close(y, ref, tol=1e-2):
    import torch

    assert not torch.isnan(y).any()
    err = ((y.float() - ref.float()).abs().max() / ref.float().abs().max().clamp(min=1)).item()
    assert err < tol, err


@pytest.mark.parametrize("m, n", SHAPES)
def test_softmax_gpu(ex, m, n):
    import torch

    x, _, y = _inputs(m, n, 0)
    ex["softmax"].Softmax()(m, n, x, y)
    _close(y, torch.softmax(x.float(), dim=1), 2e-3)
    y.fill_(float("nan"))
    ex["softmax"].OnlineSoftmax()(m, n, x, y)
    _close(y, torch.softmax(x.float(), dim=1), 2e-3)


@pytest.mark.parametrize("m, n", SHAPES)
def test_layer_norm_gpu(ex, m, n):
    import torch

    x, (w, b), y = _inputs(m, n, 2)
    ex["layer_norm"].LayerNorm()(m, n, x, w, b, y)
    ref = torch.nn.functional.layer_norm(x.float(), (n,), w.float(), b.float(), eps=1e-5)
    _close(y, ref)


@pytest.mark.parametrize("m, n", SHAPES)
def test_rms_norm_gpu(ex, m, n):
    import torch

    x, (w,), y = _inputs(m, n, 1)
    ex["rms_norm"].RMSNorm()(m, n, x, w, y)
    xf = x.float()
    ref = xf * torch.rsqrt((xf * xf).mean(dim=1, keepdim=True) + 1e-6) * w.float()
    _close(y, ref)


@pytest.mark.parametrize("act", ["relu", "gelu"])
@pytest.mark.parametrize("m, n", [(777, 1333), (4096, 4096), (5, 7)])
def test_bias_act_gpu(ex, act, m, n):
    import torch

    x, (w, b), y = _inputs(m, n, 2)
    ex["bias_act"].BiasAct(act=act)(m, n, x, w, b, y)
    h = x.float() * w.float() + b.float()
    ref = torch.relu(h) if act == "relu" else torch.nn.functional.gelu(h, approximate="tanh")
    _close(y, ref)


def test_reductions_gpu():
    """The emulator's reduction kernels, on the GPU."""
    from tests.cuda.test_cuda_reduce import CASES, Reductions, _reference
    from tilus import float16

    rng = np.random.default_rng()
    import torch

    for bm, bn, warps, dtype in CASES:
        x = rng.standard_normal((bm, bn)).astype(np.float32)
        if dtype == float16:
            x = x.astype(np.float16).astype(np.float32)
        outs = [np.full((3, bm), np.nan, np.float32), np.full((3, bn), np.nan, np.float32),
                np.full((4, bm), -1, np.int32), np.full((bm, bn), np.nan, np.float32),
                np.full(1, np.nan, np.float32)]  # fmt: skip
        ts = [torch.from_numpy(a).cuda() for a in [x, *outs]]
        Reductions(bm, bn, warps, dtype)(*ts)
        got = [t.cpu().numpy() for t in ts[1:]]
        ref = _reference(x.astype(np.float64))
        tol = 2e-2 if dtype == float16 else 1e-4
        for g, r, i in zip(got, ref, range(5)):
            if i == 2:
                assert (g[:2] == r[:2]).all()
                continue
            assert np.abs(g - r).max() <= tol * max(1.0, float(np.abs(r).max()))


def test_scans_moves_math_attention_gpu():
    """The emulator's kernels of scans, layout conversions and math, and dot(cast(dot)), on the
    GPU, against the interpreter."""
    import torch

    import tilus
    from tests.cuda.test_cuda_reduce import MATH, Attention, MathOps, Moves, Scans, Transposed

    rng = np.random.default_rng()

    def both(kernel, arrays, scalars=()):
        host = [a.copy() for a in arrays]
        with tilus.option.scoped(interpret=True):
            kernel(*scalars, *host)
        dev = [torch.from_numpy(a.copy()).cuda() for a in arrays]
        kernel(*scalars, *dev)
        return host, [d.cpu().numpy() for d in dev]

    x = rng.uniform(0.9, 1.1, (4, 64)).astype(np.float32)
    xi = rng.integers(-1000, 1000, (4, 64)).astype(np.int32)
    y = np.full((4, 4, 64), np.nan, np.float32)
    j = np.full((2, 4, 64), -7, np.int32)
    (_, _, hy, hj), (_, _, dy, dj) = both(Scans(), [x, xi, y, j])
    assert np.allclose(dy, hy, rtol=1e-5) and np.array_equal(dj, hj)
    x = rng.standard_normal((8, 64)).astype(np.float32)
    r = np.full((16, 32), np.nan, np.float32)
    s = np.full((2, 64), np.nan, np.float32)
    (_, hr, hs), (_, dr, ds) = both(Moves(), [x, r, s], (5, 41))
    assert np.array_equal(dr, hr) and np.array_equal(ds[:, :8], hs[:, :8])
    x = rng.uniform(0.05, 0.95, 64).astype(np.float32)
    y = np.full((len(MATH) + 1, 64), np.nan, np.float32)
    f = np.full((2, 64), -1, np.int32)
    (_, hy, hf), (_, dy, df) = both(MathOps(), [x, y, f])
    assert np.allclose(dy, hy, rtol=1e-5, atol=1e-6) and np.array_equal(df, hf)
    x = rng.standard_normal((32, 64)).astype(np.float32)
    yy = rng.standard_normal((64, 32)).astype(np.float32)
    z = np.full((64, 32), np.nan, np.float32)
    r = np.full(64, np.nan, np.float32)
    (_, _, hz, hr), (_, _, dz, dr) = both(Transposed(), [x, yy, z, r])
    assert np.allclose(dz, hz, atol=1e-5) and np.allclose(dr, hr, atol=1e-4)
    q, k, v = (rng.standard_normal(s).astype(np.float16) for s in ((64, 32), (32, 64), (64, 32)))
    o = np.full((64, 32), np.nan, np.float32)
    (*_, ho), (*_, do) = both(Attention(), [q, k, v, o])
    assert np.abs(do - ho).max() < 2e-2 * np.abs(ho).max()


@pytest.mark.parametrize("op", ["softmax", "layer_norm", "rms_norm"])
def test_ring_form_every_config_gpu(ex, op):
    """Every config of the ring forms (persistent blocks over shared stages; the norms' held
    rows and re-read forms too) against torch, NaN-poisoned outputs, at ragged sizes: long
    rows in column chunks (32000), several rows a stage (1333, 200), 5 blocks looping over
    3000 rows."""
    import torch

    for m, n, cap in [(777, 1333, None), (40, 32000, None), (3000, 200, 5)]:
        x, (w, b), y = _inputs(m, n, 2)
        xf = x.float()
        if op == "softmax":
            cls, args, ref, tol = ex[op].Softmax, (x,), torch.softmax(xf, dim=1), 2e-3
        elif op == "layer_norm":
            cls, args, tol = ex[op].LayerNorm, (x, w, b), 1e-2
            ref = torch.nn.functional.layer_norm(xf, (n,), w.float(), b.float(), eps=1e-5)
        else:
            cls, args, tol = ex[op].RMSNorm, (x, w), 1e-2
            ref = xf * torch.rsqrt((xf * xf).mean(dim=1, keepdim=True) + 1e-6) * w.float()
        sm = ex["softmax"]
        held = [c for c in ex["layer_norm"].LN_SPACE if c[2] < 0] if op == "layer_norm" else []
        reread = sm.REREAD_SPACE if op != "softmax" else sm.SOFTMAX_REREAD_SPACE
        # the re-read form with and without the cache hints
        for block, per_thread, stages, warps, hints in sm.hinted(
            sm.RING_SPACE + sm.SMALL_SPACE + held + reread
        ):
            if warps and sm.ring_plan(n, block, per_thread, stages, 0, warps)[0] > 4096 * warps:
                continue  # refused (test_small_form_refuses_long_rows)
            y.fill_(float("nan"))
            kw = dict(block=block, per_thread=per_thread, stages=stages, warps=warps)
            k = cls(**kw, hints=hints, max_blocks=cap)
            k(m, n, *args, y)
            torch.cuda.synchronize()
            _close(y, ref, tol)


def test_rowwise_misaligned_then_aligned_gpu(ex):
    """A call on tensors 2 bytes past 16-byte alignment gets the build for any alignment
    (tuned apart); the aligned calls before and after keep the usual build, all correct."""
    import torch

    m, n = 777, 1333
    x, (w,), y = _inputs(m, n, 1)
    buf = torch.empty(m * n + 8, device="cuda", dtype=torch.float16)
    xs = buf[1 : m * n + 1].view(m, n)
    ybuf = torch.empty(m * n + 8, device="cuda", dtype=torch.float16)
    ys = ybuf[1 : m * n + 1].view(m, n)
    assert xs.data_ptr() % 16 and ys.data_ptr() % 16
    xf = x.float()
    ref = xf * torch.rsqrt((xf * xf).mean(dim=1, keepdim=True) + 1e-6) * w.float()
    kernel = ex["rms_norm"].RMSNorm()
    for aligned in (True, False, True, False):
        src, out = (x, y) if aligned else (xs, ys)
        src.copy_(x)
        out.fill_(float("nan"))
        kernel(m, n, src, w, out)
        _close(out, ref)
    soft = ex["softmax"].Softmax()
    xs.copy_(x)
    ys.fill_(float("nan"))
    soft(m, n, xs, ys)
    _close(ys, torch.softmax(x.float(), dim=1), 2e-3)
