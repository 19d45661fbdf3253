"""The W4A16 example on the CPU: interpreter results at ragged sizes, located refusals, and
NVRTC builds of every autotune config without spills."""

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

F16 = tilus.float16


@pytest.mark.parametrize(
    "wdtype, group, m, n, k, cfg",
    [(tilus.uint4b, 128, 19, 100, 256, dict(block_m=16)),
     (tilus.int4b, 64, 5, 72, 192, dict(block_m=16, reg_a=False)),
     (tilus.uint4b, 64, 70, 65, 128, dict(block_m=64)),
     (tilus.uint4b, 128, 5, 100, 512, dict(block_m=16, split_k=4)),  # split-K (decode)
     (tilus.int4b, 64, 3, 130, 192, dict(block_m=16, split_k=4, reg_a=False)),  # an empty part
     (tilus.int4b, 64, 37, 72, 448, dict(block_m=16, split_k=4))],  # M > block_m: unsplit
)  # fmt: skip
def test_interpreter_matches_dequantize_then_matmul(wdtype, group, m, n, k, cfg):
    cfg = dict(dict(block_k=64, reg_a=True, split_k=1), **cfg)
    assert ex.run_interp(wdtype, group, m, n, k, **cfg) < 1e-2


def test_k_not_a_multiple_of_the_group_is_reported_at_its_check():
    rng = np.random.default_rng()
    m, n, k = 4, 64, 192
    x, _codes, _s, packed = ex.random_problem(rng, m, n, k, 64)
    scales = np.ones((n, 2), np.float16)
    y = np.full((m, n), np.nan, np.float16)
    kernel = ex.MatmulWxA16(tilus.uint4b, 128, block_m=16, block_k=64, reg_a=True, split_k=1)
    with pytest.raises(tilus.TilusProgramError, match="K = 192 is not a multiple") as info:
        kernel(m, n, k, x, packed, scales, y)
    err = info.value
    assert err.loc is not None and err.loc.line == marker_line(ex.MatmulWxA16, "CHECK:group")
    assert err.loc.file.endswith("matmul_wx_a16.py")
    assert np.isnan(y).all()  # refused before anything ran


def test_bad_shapes_are_refused_naming_the_argument():
    with pytest.raises(tilus.TilusArgumentError, match="scales: shape \\[64, 3\\]"):
        ex.check_args((4, 256), (64, 256), (64, 3), 128)
    with pytest.raises(tilus.TilusArgumentError, match="not a multiple of the scale group 128"):
        ex.check_args((4, 192), (64, 192), (64, 1), 128)
    with pytest.raises(tilus.TilusArgumentError, match="w: shape"):
        ex.check_args((4, 256), (64, 128), (64, 1), 128)


@needs_nvrtc
@pytest.mark.parametrize("wdtype, group", [(tilus.uint4b, 128), (tilus.int4b, 64)])
def test_every_config_builds_without_spills(wdtype, group):
    configs = ex.MatmulWxA16().configs
    assert len(configs) == 12 and {c["reg_a"] for c in configs} == {True, False}
    if wdtype == tilus.int4b:  # the type changes only the cast: the register-A ones
        configs = [c for c in configs if c["reg_a"] and c["block_m"] != 64]
    for cfg in configs:
        ck = tilus.compile(ex.MatmulWxA16(wdtype, group, **cfg), 19, 100, 256, F16, tilus.uint8,
                           F16, F16)  # fmt: skip
        ck = ck[0] if isinstance(ck, list) else ck
        assert ck.resources["spill_store_bytes"] == 0, (cfg, ck.log)
        assert ck.resources["spill_load_bytes"] == 0, (cfg, ck.log)
        assert not ck.wgmma_serialized, cfg
