"""GPU tier: each mma.sync form of ``dot`` and wgmma with a register A against torch references
(fresh random inputs, NaN- or pattern-poisoned outputs, sizes that are not multiples of the tile)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.cuda.conftest import needs_gpu
from tests.dot_forms_kernels import DotForm, SharedDot
from tests.wgmma_rega_kernels import Chain, RegA
from tilus import bfloat16, float16, float32, int8, int32, tfloat32, uint8
from tilus.ir.cscalar import round_float_format

pytestmark = [pytest.mark.gpu, needs_gpu]

M, N = 100, 72


def _torch_dtype(dt):
    import torch

    return {
        "float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32,
        "int8": torch.int8, "uint8": torch.uint8, "int32": torch.int32,
    }[dt.name]  # fmt: skip


def _run(operand, acc, a, b, c0=None, k=64):
    import torch

    fill = float("nan") if acc.is_float() else -7
    c = torch.full((M, N), fill, device="cuda", dtype=_torch_dtype(acc))
    c0_t = c0 if c0 is not None else torch.zeros(1, device="cuda", dtype=_torch_dtype(acc))
    DotForm(operand, acc, k=k, with_c=c0 is not None)(M, N, a, b, c0_t, c)
    torch.cuda.synchronize()
    return c.cpu()


@pytest.mark.parametrize("dt", [int8, uint8])
def test_int8_dot_is_exact(dt):
    import torch

    lo, hi = (-128, 128) if dt == int8 else (0, 256)
    a = torch.randint(lo, hi, (M, 64), device="cuda", dtype=_torch_dtype(dt))
    b = torch.randint(lo, hi, (64, N), device="cuda", dtype=_torch_dtype(dt))
    c0 = torch.randint(-(2**20), 2**20, (M, N), device="cuda", dtype=torch.int32)
    c = _run(dt, int32, a, b, c0)
    ref = a.cpu().long() @ b.cpu().long() + c0.cpu().long()
    assert torch.equal(c.long(), ref)


def test_int32_accumulation_wraps():
    import torch

    a = torch.full((M, 64), 127, device="cuda", dtype=torch.int8)
    b = torch.randint(0, 128, (64, N), device="cuda", dtype=torch.int8)
    c0 = torch.full((M, N), 2**31 - 1000, device="cuda", dtype=torch.int32)
    c = _run(int8, int32, a, b, c0)
    ref = (a.cpu().long() @ b.cpu().long() + c0.cpu().long()) % 2**32
    ref = torch.where(ref >= 2**31, ref - 2**32, ref)
    assert (ref < 0).any() and torch.equal(c.long(), ref)


@pytest.mark.parametrize("dt", [float16, bfloat16])
def test_16_bit_dot_into_float32(dt):
    import torch

    a = torch.randn(M, 64, device="cuda", dtype=_torch_dtype(dt))
    b = torch.randn(64, N, device="cuda", dtype=_torch_dtype(dt))
    c = _run(dt, float32, a, b)
    ref = a.cpu().double() @ b.cpu().double()
    assert not torch.isnan(c).any()
    assert (c.double() - ref).abs().max() < 1e-4 * ref.abs().max()


def test_float16_accumulator_matches_the_interpreters_model():
    import torch

    from tests.test_dot_forms import f16_accumulate

    a = torch.randn(M, 64, device="cuda", dtype=torch.float16)
    b = torch.randn(64, N, device="cuda", dtype=torch.float16)
    c0 = torch.randn(M, N, device="cuda", dtype=torch.float16)
    c = _run(float16, float16, a, b, c0).numpy()
    model = f16_accumulate(a.cpu().numpy(), b.cpu().numpy(), c0.cpu().numpy())
    ref = a.cpu().double().numpy() @ b.cpu().double().numpy() + c0.cpu().double().numpy()
    assert not np.isnan(c).any()
    scale = np.abs(ref).max()
    assert np.abs(c - model).max() < 4e-3 * scale  # a float16 ulp or two of the largest values
    assert np.abs(c - ref).max() < 0.05 * scale


def test_tf32_dot_rounds_its_inputs():
    import torch

    a = torch.randn(M, 32, device="cuda")
    b = torch.randn(32, N, device="cuda")
    c = _run(tfloat32, float32, a, b, k=32).double().numpy()
    ta, tb = (round_float_format(x.cpu().numpy(), tfloat32).astype(np.float64) for x in (a, b))
    np.testing.assert_allclose(c, ta @ tb, rtol=1e-5, atol=1e-5)


def test_wgmma_register_a_matches_torch():
    import torch

    a = torch.randn(M, 32, device="cuda", dtype=torch.float16)
    b = torch.randn(N, 32, device="cuda", dtype=torch.float16)
    c = torch.full((M, N), float("nan"), device="cuda")
    RegA(bm=64, bn=64, k=32)(M, N, a, b, c)
    torch.cuda.synchronize()
    ref = a.double() @ b.double().T
    assert not torch.isnan(c).any()
    assert (c.double() - ref).abs().max() < 1e-4 * ref.abs().max()


@pytest.mark.parametrize("dt", [float16, bfloat16])
@pytest.mark.parametrize("bm", [64, 128])
def test_wgmma_p_from_registers_matches_torch(dt, bm):
    # the P @ V step: P = cast(A @ B1^T) stays in registers as the second wgmma's A operand
    import torch

    m, n1, k1, d = 300, 64, 32, 64
    tdt = _torch_dtype(dt)
    a = torch.randn(m, k1, device="cuda", dtype=tdt)
    b1 = torch.randn(n1, k1, device="cuda", dtype=tdt)
    b2 = torch.randn(d, n1, device="cuda", dtype=tdt)
    o = torch.full((m, d), float("nan"), device="cuda")
    Chain(bm=bm, n1=n1, k1=k1, d=d, iters=2, dtype=dt)(m, a, b1, b2, o)
    torch.cuda.synchronize()
    p = (a.float() @ b1.float().T).to(tdt).double()
    ref = 2 * (p @ b2.double().T)
    assert not torch.isnan(o).any()
    assert (o.double() - ref).abs().max() < 2e-2 * ref.abs().max()


@pytest.mark.parametrize(
    "operand, acc",
    [(float16, float32), (bfloat16, float32), (float16, float16), (int8, int32)],
    ids=str,
)
def test_shared_operands_through_ldmatrix_match_torch(operand, acc):
    import torch

    if operand == int8:
        a = torch.randint(-128, 128, (M, 64), device="cuda", dtype=torch.int8)
        b = torch.randint(-128, 128, (64, N), device="cuda", dtype=torch.int8)
    else:
        a = torch.randn(M, 64, device="cuda", dtype=_torch_dtype(operand))
        b = torch.randn(64, N, device="cuda", dtype=_torch_dtype(operand))
    fill = float("nan") if acc.is_float() else -7
    c = torch.full((M, N), fill, device="cuda", dtype=_torch_dtype(acc))
    SharedDot(operand, acc)(M, N, a, b, c)
    torch.cuda.synchronize()
    if operand == int8:
        assert torch.equal(c.cpu().long(), a.cpu().long() @ b.cpu().long())
        return
    ref = a.cpu().double() @ b.cpu().double()
    assert not torch.isnan(c).any()
    tol = 0.05 if acc == float16 else 1e-4
    assert (c.cpu().double() - ref).abs().max() < tol * ref.abs().max()
