"""Matmul V7 on the GPU: every config of the space, fp16 and bf16, at ragged sizes against torch
(NaN-poisoned outputs), with one tile per block and with several (both consumer groups)."""

from __future__ import annotations

import pytest

from tests.cuda.conftest import needs_gpu
from tests.test_matmul_v7 import load_v7

pytestmark = [pytest.mark.gpu, needs_gpu]

SIZES = [(1000, 1320, 776), (200, 328, 392)]  # ragged in M, N and K


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("num_sms", [None, 3], ids=["all-sms", "3-sms"])
def test_every_config_against_torch(dtype, num_sms):
    import torch

    v7 = load_v7()
    cls = v7.MatmulV7 if dtype == "float16" else v7.MatmulV7BF16
    tdt = getattr(torch, dtype)
    for m, n, k in SIZES:
        a = torch.randn(m, k, device="cuda", dtype=tdt)
        b = torch.randn(n, k, device="cuda", dtype=tdt)
        ref = a.float() @ b.float().T
        for cfg in cls().configs:
            c = torch.full((m, n), float("nan"), device="cuda", dtype=tdt)
            cls(num_sms=num_sms, **cfg)(m, n, k, a, b, c)
            torch.cuda.synchronize()
            assert not torch.isnan(c).any(), (cfg, m, n, k)
            err = float((c.float() - ref).abs().max() / ref.abs().max())
            assert err < 1e-2, (cfg, m, n, k, err)
