"""GPU: ``matmul_wx_a16`` on prepared weights at ragged sizes picks each kernel and matches
torch float32 (NaN-poisoned outputs, fresh random inputs)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import tilus
from tests.cuda.conftest import needs_gpu

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "quantized"))
import matmul_wx_a16 as ex  # noqa: E402

pytestmark = [pytest.mark.gpu, needs_gpu]


@pytest.mark.parametrize(
    "wdtype, group, m, kernel",
    [(tilus.uint4b, 128, 1, "MatmulWxA16Mma"),
     (tilus.int4b, 256, 13, "MatmulWxA16Mma"),  # a ragged M tile
     (tilus.uint4b, 128, ex.MMA_MAX_M - 3, "MatmulWxA16Mma"),  # several M tiles, ragged
     (tilus.uint4b, 128, ex.MMA_MAX_M + 3, "MatmulWxA16Pipe"),  # just past the boundary
     (tilus.uint4b, 128, 130, "MatmulWxA16Pipe"),  # several M tiles
     (tilus.uint4b, 64, 2, "MatmulWxA16Decode"),  # a group the mma packing cannot serve
     (tilus.int8, 128, 5, "MatmulWxA16Mma"),  # another bit width, prepared for the mma kernel
     (tilus.int8, 64, 5, "MatmulWxA16DecodeF32"),  # its group too small for it: fp32 runs
     (tilus.float7_e5m1, 128, 1, "MatmulWxA16DecodeF32"),  # inf/NaN codes: not an mma type
     (tilus.uint3b, 128, ex.DEQUANT_MIN_M_OTHER + 3, "MatmulWxA16Mma"),  # mma types up to 32
     (tilus.uint3b, 128, ex.MMA_MAX_M + 1, "MatmulWxA16Dequant")],
    ids=str,
)  # fmt: skip
def test_entry_on_prepared_weights_matches_torch(wdtype, group, m, kernel):
    import torch

    n, k = 203, 1536  # a ragged N (the mma packing pads it to 16)
    x, w, s, w16 = ex.torch_problem(torch, m, n, k, group, wdtype)
    weights = ex.prepare_weights(w, s, wdtype=wdtype, group=group)
    assert ex.pick_kernel(m, weights)[0].script_cls.__name__ == kernel
    y = torch.full((m, n), float("nan"), dtype=torch.float16, device="cuda")
    assert ex.matmul_wx_a16(x, weights, out=y) is y
    ref = torch.matmul(x.float(), w16.float().T)
    assert not torch.isnan(y).any()
    assert ((y.float() - ref).abs().max() / ref.abs().max()).item() < 1e-2
