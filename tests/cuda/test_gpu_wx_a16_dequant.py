"""The dequantize-then-V7 WxA16 path on the GPU (H200): every ``DequantWx`` config and every
weight type bit-exact against NumPy at ragged sizes (NaN-poisoned workspaces), and the tuned
path and the entry at prefill M against a torch float32 dequantize-then-matmul."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import tilus
from tests.cuda.conftest import needs_gpu

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "quantized"))
import matmul_wx_a16 as ex  # noqa: E402
import matmul_wx_a16_decode as dec  # noqa: E402
import matmul_wx_a16_dequant as dq  # noqa: E402

pytestmark = [pytest.mark.gpu, needs_gpu]


def _dequant_on_gpu(wdtype, group, n, k, kernel):
    """Differing elements of ``kernel``'s fp16 weights from the NumPy reference."""
    import torch

    _x, codes, scales, packed = ex.random_problem(np.random.default_rng(), 1, n, k, group, wdtype)
    w = torch.from_numpy(packed.reshape(n, -1).copy()).cuda()
    s = torch.from_numpy(scales).cuda()
    out = torch.full((n, k), float("nan"), dtype=torch.float16, device="cuda")
    kernel(n, k, w, s, out)
    ref = dq.dequant_reference(codes, scales, wdtype, group)
    return int((out.cpu().numpy().view(np.uint16) != ref.view(np.uint16)).sum())


@pytest.mark.parametrize("wdtype", [tilus.uint4b, tilus.uint3b, tilus.int8], ids=str)
def test_every_config_is_bit_exact(wdtype):
    for cfg in dq.DequantWx().configs:  # 203 rows and 11 groups: ragged against every tile
        assert _dequant_on_gpu(wdtype, 64, 203, 11 * 64, dq.DequantWx(wdtype, 64, **cfg)) == 0, cfg


@pytest.mark.parametrize("wdtype", dec.WEIGHT_TYPES, ids=str)
def test_every_weight_type_is_bit_exact_tuned(wdtype):
    assert _dequant_on_gpu(wdtype, 128, 203, 9 * 128, dq.DequantWx(wdtype, 128)) == 0


@pytest.mark.parametrize("wdtype, m", [(tilus.uint4b, 1030), (tilus.uint3b, 300),
                                       (tilus.float4_e2m1, 77)], ids=str)  # fmt: skip
def test_the_entry_at_prefill_m_matches_torch(wdtype, m):
    import torch

    n, k, g = 520, 1152, 128  # a ragged N tile
    x, w, s, w16 = ex.torch_problem(torch, m, n, k, g, wdtype)
    weights = ex.prepare_weights(w, s, wdtype=wdtype, group=g)
    assert ex.pick_kernel(m, weights)[0].script_cls.__name__ == "MatmulWxA16Dequant"
    y = torch.full((m, n), float("nan"), dtype=torch.float16, device="cuda")
    ex.matmul_wx_a16(x, weights, out=y)
    ref = torch.matmul(x.float(), w16.float().T)
    assert not torch.isnan(y).any()
    assert ((y.float() - ref).abs().max() / ref.abs().max()).item() < 1e-2
