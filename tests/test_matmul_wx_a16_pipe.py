"""The pipelined tensor-core W4A16 kernel on the CPU: interpreter results at ragged sizes (the
ring, split-K, two consumer warp groups), the located K check, and NVRTC builds of its configs."""

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
import matmul_wx_a16_pipe as pp  # noqa: E402

F16 = tilus.float16


@pytest.mark.parametrize(
    "wdtype, group, m, n, k, cfg",
    [(tilus.uint4b, 64, 1, 130, 320, dict(block_m=8, consumers=2, num_stages=3, split_k=2)),
     (tilus.int4b, 128, 20, 70, 512, dict(block_m=16, consumers=1, num_stages=2, split_k=4)),
     (tilus.uint4b, 128, 3, 65, 384, dict(block_m=16, consumers=1, num_stages=4, split_k=4)),
     (tilus.uint4b, 128, 70, 130, 512, dict(block_m=64, consumers=2, num_stages=3, scale_w=True,
                                             regs_to_consumers=True, overlap=True)),
     (tilus.int4b, 128, 3, 70, 640, dict(block_m=16, num_stages=2, split_k=2, scale_w=True,
                                          overlap=True))],
)  # fmt: skip
def test_interpreter_matches_dequantize_then_matmul(wdtype, group, m, n, k, cfg):
    err = ex.run_interp(wdtype, group, m, n, k, kernel=pp.MatmulWxA16Pipe, **pp.pinned(**cfg))
    assert err < 1e-2


def test_k_not_a_multiple_of_the_group_is_reported_at_its_check():
    m, n, k = 2, 64, 192
    x, _codes, _s, packed = ex.random_problem(np.random.default_rng(), m, n, k, 64)
    y = np.full((m, n), np.nan, np.float16)
    kernel = pp.MatmulWxA16Pipe(tilus.uint4b, 128, **pp.pinned(num_stages=2))
    with pytest.raises(tilus.TilusProgramError, match="K = 192 is not a multiple") as info:
        kernel(m, n, k, x, packed, np.ones((n, 2), np.float16), y)
    err = info.value
    assert err.loc is not None and err.loc.line == marker_line(pp.MatmulWxA16Pipe, "CHECK:group")
    assert np.isnan(y).all()


@needs_nvrtc
def test_every_config_builds_without_spills():
    for cfg in pp.MatmulWxA16Pipe().configs:
        ck = tilus.compile(pp.MatmulWxA16Pipe(tilus.uint4b, 128, **cfg), 19, 200, 1024, F16,
                           tilus.uint8, F16, F16)  # fmt: skip
        ck = ck[0] if isinstance(ck, list) else ck
        assert ck.resources["spill_store_bytes"] == 0, (cfg, ck.log)
        assert not ck.wgmma_serialized, cfg
