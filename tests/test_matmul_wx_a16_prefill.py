"""The persistent W4A16 prefill kernel on the CPU: interpreter results at tiny ragged sizes
(several tiles a block, both epilogues, 64- and 128-K slots), the refused configs, the located
K check, the entry's pick at prefill M, and NVRTC builds of its space."""

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
import matmul_wx_a16_prefill as pf  # noqa: E402

F16 = tilus.float16


@pytest.mark.parametrize(
    "wdtype, group, m, n, k, cfg",
    [(tilus.uint4b, 128, 37, 300, 384, dict(block_m=16, num_stages=3, swizzle=2)),
     (tilus.int4b, 256, 21, 136, 512, dict(block_m=8, block_k=128, num_stages=2, swizzle=3,
                                           epilogue="tma")),
     (tilus.uint4b, 128, 5, 200, 256, dict(block_m=24, num_stages=5, swizzle=1,
                                           thread_arrive=False)),
     # clusters of 2: an odd number of weight tiles (the last pair's second tile is past N)
     (tilus.uint4b, 128, 37, 300, 384, dict(block_m=16, num_stages=3, swizzle=2,
                                            thread_arrive=False, cluster=2)),
     (tilus.int4b, 256, 21, 400, 512, dict(block_m=32, block_k=128, num_stages=2, swizzle=3,
                                           thread_arrive=False, cluster=2, epilogue="tma")),
     # consumer group 1 trailing by 2 scale groups; by 2 with a single group in K
     (tilus.uint4b, 128, 37, 304, 384, dict(block_m=16, num_stages=5, swizzle=2, lag=2)),
     (tilus.uint4b, 128, 70, 304, 128, dict(block_m=16, num_stages=5, thread_arrive=False,
                                            cluster=2, lag=2))],
)  # fmt: skip
def test_interpreter_matches_dequantize_then_matmul(wdtype, group, m, n, k, cfg):
    # 4 persistent blocks: each runs several tiles, the ring running on across them
    err = ex.run_interp(wdtype, group, m, n, k, kernel=pf.MatmulWxA16Prefill, num_sms=4,
                        **pf.pinned(**cfg))  # fmt: skip
    assert err < 1e-2


@pytest.mark.parametrize(
    "kwargs, match",
    [(dict(group=64), "group must be a multiple of 128"),
     (dict(block_k=96), "block_k 96 must be a multiple of 64"),
     (dict(block_m=300), "block_m must be a multiple of 8"),
     (dict(epilogue="smem"), "epilogue must be"),
     (dict(block_m=256, num_stages=7), "shared memory"),
     (dict(wdtype=tilus.int8), "wdtype must be"),
     (dict(cluster=2, thread_arrive=True, epilogue="tma"), "cluster must be 1 or 2"),
     (dict(thread_arrive=True), "thread_arrive needs epilogue='tma'"),
     (dict(cluster=4, thread_arrive=False), "cluster must be 1 or 2"),
     (dict(lag=1), "fewer K steps than the 2 slots")],
)  # fmt: skip
def test_configs_that_cannot_run_are_refused_by_name(kwargs, match):
    args = dict(wdtype=tilus.uint4b, group=128, **pf.pinned(block_m=16, num_stages=2))
    args.update(kwargs)
    m, n, k = 3, 64, 256
    x, _codes, s, packed = ex.random_problem(np.random.default_rng(), m, n, k, 128)
    y = np.full((m, n), np.nan, np.float16)
    with pytest.raises(tilus.TilusArgumentError, match=match):
        pf.MatmulWxA16Prefill(**args)(m, n, k, x, packed, s, y)


@pytest.mark.parametrize(
    "wdtype, group, m, n, k, cfg",
    [(tilus.uint4b, 128, 37, 300, 384, dict(block_m=16, num_stages=3, swizzle=2)),
     (tilus.int4b, 256, 21, 408, 512, dict(block_m=32, block_k=128, num_stages=2,
                                           thread_arrive=False, cluster=2))],
)  # fmt: skip
def test_prepacked_weights_match_dequantize_then_matmul(wdtype, group, m, n, k, cfg):
    import torch

    x, w, s, w16 = ex.torch_problem(torch, m, n, k, group, wdtype, device="cpu")
    wp = pf.prepack_torch(torch, w)  # N padded to 16 rows (300: a ragged last group)
    assert list(wp.shape) == [-(-n // 16) * 16, k // 2]
    y = torch.full((m, n), float("nan"), dtype=torch.float16)
    kernel = pf.MatmulWxA16Prefill(wdtype, group, num_sms=4, prepacked=True, **pf.pinned(**cfg))
    with tilus.option.scoped(interpret=True):
        kernel(m, n, k, x, wp, s, y)
    ref = x.float() @ w16.float().T
    assert ((y.float() - ref).abs().max() / ref.abs().max()).item() < 1e-2


def test_prepack_moves_each_byte_to_its_thread():
    import torch

    n, kb = 32, 64
    w = torch.arange(n * kb).reshape(n, kb)  # a byte's value names its place
    p = pf.prepack_torch(torch, w)
    for r, c in [(0, 0), (5, 7), (13, 30), (16 + 9, 32 + 21)]:  # logical row, byte
        big, rh, g = r // 16, (r % 16) // 8, r % 8
        chunk, q, j = c // 32, c % 4, (c % 32) // 4
        assert p[16 * big + 2 * g + q // 2, 32 * chunk + 16 * (q % 2) + 2 * j + rh] == w[r, c]


def test_k_not_a_multiple_of_the_group_is_reported_at_its_check():
    m, n, k = 2, 64, 192
    x, _codes, _s, packed = ex.random_problem(np.random.default_rng(), m, n, k, 64)
    y = np.full((m, n), np.nan, np.float16)
    kernel = pf.MatmulWxA16Prefill(tilus.uint4b, 128, **pf.pinned(block_m=16))
    with pytest.raises(tilus.TilusProgramError, match="K = 192 is not a multiple") as info:
        kernel(m, n, k, x, packed, np.ones((n, 2), np.float16), y)
    err = info.value
    assert err.loc is not None
    assert err.loc.line == marker_line(pf.MatmulWxA16Prefill, "CHECK:group")
    assert np.isnan(y).all()


def test_entry_picks_the_prefill_kernel_at_prefill_m(monkeypatch):
    import torch

    assert ex.PREFILL_MIN_M is None  # off by default: it measured slower than the pipe kernel
    _x, w, s, _w16 = ex.torch_problem(torch, 1, 70, 384, 128, device="cpu")
    weights = ex.prepare_weights(w, s, wdtype=tilus.uint4b, group=128)
    assert ex.pick_kernel(1 << 20, weights)[0].script_cls.__name__ == "MatmulWxA16Dequant"
    monkeypatch.setattr(ex, "DEQUANT_MIN_M", None)  # the dequantize path off
    assert ex.pick_kernel(1 << 20, weights)[0].script_cls.__name__ == "MatmulWxA16Pipe"
    monkeypatch.setattr(ex, "PREFILL_MIN_M", 2048)

    _x, w, s, _w16 = ex.torch_problem(torch, 1, 70, 384, 128, device="cpu")
    weights = ex.prepare_weights(w, s, wdtype=tilus.uint4b, group=128)
    pick = lambda m: ex.pick_kernel(m, weights)[0].script_cls.__name__  # noqa: E731
    assert pick(ex.PREFILL_MIN_M) == "MatmulWxA16Prefill"
    assert ex.pick_kernel(ex.PREFILL_MIN_M, weights)[1] is weights.w_packed
    assert pick(ex.PREFILL_MIN_M - 1) == "MatmulWxA16Pipe"
    _x, w, s, _w16 = ex.torch_problem(torch, 1, 70, 384, 64, device="cpu")
    weights = ex.prepare_weights(w, s, wdtype=tilus.uint4b, group=64)
    assert pick(ex.PREFILL_MIN_M) == "MatmulWxA16Pipe"  # a group the prefill kernel refuses


@needs_nvrtc
@pytest.mark.parametrize("prepacked", [False, True])
def test_every_config_builds_without_serialized_wgmma(prepacked):
    for cfg in pf.MatmulWxA16Prefill().configs:
        kernel = pf.MatmulWxA16Prefill(tilus.uint4b, 128, prepacked=prepacked, **cfg)
        ck = tilus.compile(kernel, 4096, 8192, 8192, F16, tilus.uint8, F16, F16)
        ck = ck[0] if isinstance(ck, list) else ck
        assert not ck.wgmma_serialized, cfg
        # ptxas spills a few registers in the epilogue (after the mainloop), none in the loop
        assert ck.resources["spill_store_bytes"] <= 512, (cfg, ck.resources)


def test_tma_epilogue_refuses_rows_tma_cannot_store():
    m, n, k = 3, 70, 256
    x, _codes, s, packed = ex.random_problem(np.random.default_rng(), m, n, k, 128)
    y = np.full((m, n), np.nan, np.float16)
    kernel = pf.MatmulWxA16Prefill(tilus.uint4b, 128, **pf.pinned(block_m=16, epilogue="tma"))
    with pytest.raises(tilus.TilusProgramError, match="multiple of 8") as info:
        kernel(m, n, k, x, packed, s, y)
    assert info.value.loc.line == marker_line(pf.MatmulWxA16Prefill, "CHECK:tma_rows")
