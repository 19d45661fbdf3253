"""The persistent W4A16 prefill kernel on the GPU (H200): every config of its space at ragged
M and N, NaN-poisoned outputs, fresh random inputs, against torch float32
dequantize-then-matmul; the user entry at prefill M; and the fp16 elementwise ops its dequant
multiplies with, bit for bit against torch."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import tilus
from tests.cuda.conftest import needs_gpu
from tilus import float16, int32
from tilus.errors import TilusArgumentError
from tilus.utils import cdiv

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "quantized"))
import matmul_wx_a16 as ex  # noqa: E402
import matmul_wx_a16_prefill as pf  # noqa: E402

pytestmark = [pytest.mark.gpu, needs_gpu]


def _check(y, x, w16):
    import torch

    ref = torch.matmul(x.float(), w16.float().T)
    assert not torch.isnan(y).any()
    err = ((y.float() - ref).abs().max() / ref.abs().max()).item()
    assert err < 1e-2, err


# the cluster configs last (the others' results stand if one of them hangs)
@pytest.mark.parametrize("cfg", sorted(pf.MatmulWxA16Prefill().configs, key=lambda c: c["cluster"]),
                         ids=lambda c: "-".join(str(v) for v in c.values()))  # fmt: skip
@pytest.mark.parametrize(
    "wdtype, group, num_sms",
    [(tilus.uint4b, 128, 5),  # 5 persistent blocks: several tiles each, the ring running on
     (tilus.int4b, 256, None)],  # a block per SM: at most one tile each
    ids=str,
)  # fmt: skip
def test_every_config_matches_torch(wdtype, group, num_sms, cfg):
    # a ragged weight tile (N % 128) and an odd number of them (a cluster's last pair has one);
    # an odd number of scale groups for group 128
    n, k = 328, 1280
    if cfg["lag"] * group // pf.KSTEP >= cfg["num_stages"]:  # refused by name: lag vs ring
        with pytest.raises(TilusArgumentError, match="lag"):
            _run(wdtype, group, num_sms, cfg, False, 5, n, k)
        return
    for m in (1, 77, 300, 513):  # one row, ragged X tiles, several of them
        _run(wdtype, group, num_sms, cfg, False, m, n, k)


# prepacked weights (passed on an H200 in the r52 and r54 tiers)
@pytest.mark.parametrize("cfg", pf.MatmulWxA16Prefill().configs[:2],
                         ids=lambda c: "-".join(str(v) for v in c.values()))  # fmt: skip
def test_prepacked_configs_match_torch(cfg):
    for m in (1, 300):
        _run(tilus.uint4b, 128, 5, cfg, True, m, 328, 1280)


def _run(wdtype, group, num_sms, cfg, prepacked, m, n, k):
    """One config at one size against torch float32 (fresh inputs, a NaN-poisoned output)."""
    import torch

    kernel = pf.MatmulWxA16Prefill(wdtype, group, num_sms=num_sms, prepacked=prepacked, **cfg)
    x, w, s, w16 = ex.torch_problem(torch, m, n, k, group, wdtype)
    if prepacked:  # N padded to 16 rows (a ragged last group)
        w = pf.prepack_torch(torch, w)
    y = torch.full((m, n), float("nan"), dtype=torch.float16, device="cuda")
    kernel(m, n, k, x, w, s, y)
    _check(y, x, w16)


def test_entry_at_prefill_m_runs_the_prefill_kernel(monkeypatch):
    import torch

    monkeypatch.setattr(ex, "PREFILL_MIN_M", 2048)  # off by default (slower than the pipe one)
    monkeypatch.setattr(ex, "DEQUANT_MIN_M", None)  # which would take this M
    m, n, k, g = ex.PREFILL_MIN_M + 37, 1160, 1024, 128  # ragged M and N (N % 16 = 8)
    x, w, s, w16 = ex.torch_problem(torch, m, n, k, g)
    weights = ex.prepare_weights(w, s, wdtype=tilus.uint4b, group=g)
    assert ex.pick_kernel(m, weights)[0].script_cls.__name__ == "MatmulWxA16Prefill"
    y = torch.full((m, n), float("nan"), dtype=torch.float16, device="cuda")
    assert ex.matmul_wx_a16(x, weights, out=y) is y
    _check(y, x, w16)


class F16Ops(tilus.Script):
    """``a * b``, ``a + b`` and ``a - b`` of fp16 vectors (the codegen's f16 instructions)."""

    def __call__(self, n: int32, a_ptr: ~float16, b_ptr: ~float16, p_ptr: ~float16,
                 s_ptr: ~float16, d_ptr: ~float16):  # fmt: skip
        self.attrs.blocks = cdiv(n, 256)
        self.attrs.warps = 4
        views = [self.global_view(p, dtype=float16, shape=[n])
                 for p in (a_ptr, b_ptr, p_ptr, s_ptr, d_ptr)]  # fmt: skip
        ga, gb, gp, gs, gd = views
        at: int32 = self.blockIdx.x * 256
        a = self.load_global(ga, offsets=[at], shape=[256])
        b = self.load_global(gb, offsets=[at], shape=[256])
        self.store_global(gp, a * b, offsets=[at])
        self.store_global(gs, a + b, offsets=[at])
        self.store_global(gd, a - b, offsets=[at])


def test_f16_elementwise_ops_are_the_correctly_rounded_ones():
    import torch

    n = 1 << 20  # random bit patterns: every exponent, subnormals, infinities
    bits = torch.randint(0, 1 << 16, (2, n), dtype=torch.int32, device="cuda")
    a, b = bits.to(torch.int16).view(torch.float16)
    outs = [torch.empty_like(a) for _ in range(3)]
    F16Ops()(n, a, b, *outs)
    for got, want in zip(outs, (a * b, a + b, a - b)):
        same = (got.view(torch.int16) == want.view(torch.int16)) | (got.isnan() & want.isnan())
        assert same.all(), int((~same).sum())
