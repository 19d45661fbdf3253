"""The dequantize-then-V7 WxA16 path on the CPU: ``DequantWx`` bit-exact against NumPy for every
weight type and config at ragged sizes, the whole path and the entry's choice of it, located
refusals, and NVRTC builds of every config without spills, with 16-byte accesses and no
per-run alignment test."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import tilus
from tests.cuda.conftest import needs_nvrtc
from tilus.testing import marker_line

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples" / "quantized"))
import matmul_wx_a16 as ex  # noqa: E402
import matmul_wx_a16_decode as dec  # noqa: E402
import matmul_wx_a16_dequant as dq  # noqa: E402

F16 = tilus.float16


@pytest.mark.parametrize("cfg", dq.DequantWx().configs, ids=str)
def test_every_config_is_bit_exact(cfg):
    # 37 rows (ragged against every row tile), 5 groups (ragged against every K tile)
    assert dq.run_dequant(tilus.uint4b, 64, 37, 5 * 64, **cfg) == 0


@pytest.mark.parametrize("wdtype", dec.WEIGHT_TYPES, ids=str)
def test_every_weight_type_is_bit_exact(wdtype):
    assert dq.run_dequant(wdtype, 32, 11, 7 * 32, rows=2, reps=1, warps=4) == 0


@pytest.mark.parametrize("group", [32, 256, 1024])
def test_every_group_is_bit_exact(group):
    assert dq.run_dequant(tilus.int3b, group, 9, 2 * group, rows=1, reps=2, warps=4) == 0


def test_the_path_matches_dequantize_then_matmul():
    v7 = dq.MatmulV7(num_sms=3, **dq.SMALL_V7)
    path = dq.MatmulWxA16Dequant(tilus.uint3b, 64, dq.DequantWx(tilus.uint3b, 64, rows=1,
                                                                reps=1, warps=4), v7)  # fmt: skip
    assert ex.run_interp(tilus.uint3b, 64, 70, 100, 384, kernel=lambda *a: path) < 1e-2


@pytest.mark.parametrize(
    "wdtype, m, picked",
    [(tilus.uint4b, ex.DEQUANT_MIN_M - 1, "MatmulWxA16Pipe"),
     (tilus.uint4b, ex.DEQUANT_MIN_M, "MatmulWxA16Dequant"),
     (tilus.uint3b, ex.MMA_MAX_M, "MatmulWxA16Mma"),  # prepared for the mma kernel up to 32
     (tilus.uint3b, ex.MMA_MAX_M + 1, "MatmulWxA16Dequant"),
     (tilus.int8, ex.MMA_MAX_M + 1, "MatmulWxA16Dequant"),
     (tilus.float7_e5m1, ex.DEQUANT_MIN_M_OTHER - 1, "MatmulWxA16DecodeF32"),  # not an mma type
     (tilus.float7_e5m1, ex.DEQUANT_MIN_M_OTHER, "MatmulWxA16Dequant")],
)  # fmt: skip
def test_the_entry_picks_the_path_from_its_threshold(wdtype, m, picked):
    import torch

    w = torch.zeros((16, 256 * wdtype.nbits // 8), dtype=torch.uint8)
    weights = ex.prepare_weights(w, torch.ones((16, 2), dtype=torch.float16), wdtype=wdtype)
    assert ex.pick_kernel(m, weights)[0].script_cls.__name__ == picked


def test_the_entry_at_large_m_matches_torch():
    err, name = ex.run_entry(tilus.float6_e3m2, 64, ex.DEQUANT_MIN_M_OTHER + 3, 37, 256)
    assert name == "MatmulWxA16Dequant" and err < 1e-2


def test_k_not_a_multiple_of_the_group_is_reported_at_its_check():
    n, k = 16, 192
    _x, _codes, _s, packed = ex.random_problem(np.random.default_rng(), 1, n, k, 64)
    out = np.full((n, k), np.nan, np.float16)
    kernel = dq.DequantWx(tilus.uint4b, 128, rows=1, reps=1, warps=4)
    with pytest.raises(tilus.TilusProgramError, match="K = 192 is not a multiple") as info:
        kernel(n, k, packed, np.ones((n, 2), np.float16), out)
    err = info.value
    assert err.loc is not None and err.loc.line == marker_line(dq.DequantWx, "CHECK:group")
    assert err.loc.file.endswith("matmul_wx_a16_dequant.py")
    assert np.isnan(out).all()


@pytest.mark.parametrize(
    "args, kw, what",
    [((tilus.float16,), {}, "wdtype"), ((tilus.uint4b, 96), {}, "group"),
     ((tilus.uint4b, 128), dict(warps=0), "warps")],
)  # fmt: skip
def test_unsupported_arguments_are_refused(args, kw, what):
    cfg = dict(rows=1, reps=1, warps=4) | kw
    with pytest.raises(tilus.TilusArgumentError, match=what):
        dq.DequantWx(*args, **cfg)(16, 256, np.zeros((16, 128), np.uint8),
                                   np.ones((16, 2), np.float16), np.zeros((16, 256), np.float16))  # fmt: skip


@needs_nvrtc
@pytest.mark.parametrize("wdtype", [tilus.uint4b, tilus.uint3b, tilus.int8, tilus.float6_e3m2],
                         ids=str)  # fmt: skip
def test_every_config_builds_without_spills_and_stores_16_bytes(wdtype):
    kernel = dq.DequantWx(wdtype, 128)
    for cfg in kernel.configs:
        ck = tilus.compile(kernel, 100, 1024, tilus.uint8, F16, F16, config=cfg)
        assert ck.resources["spill_store_bytes"] == 0, (wdtype, cfg, ck.log)
        assert "*((uint4*)" in ck.source, cfg  # the fp16 runs go out 16 bytes at a time
        # static strides fold to literals, so no run tests its own address's alignment
        assert "& 15) == 0" not in ck.source, cfg
        assert ck.kernel.smem_bytes <= 65 * 1024, cfg  # the staged tile: at most 64 KiB
        assert "tl_swz<64>" in ck.source, cfg  # its chunks swizzled: no bank conflicts
