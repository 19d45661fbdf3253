"""The decode-shape W4A16 kernel on the CPU: interpreter results at ragged sizes, the located
refusal of a K the scale group does not divide, and NVRTC builds of its configs without spills."""

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

F16 = tilus.float16


@pytest.mark.parametrize(
    "wdtype, group, m, n, k, cfg",
    [(tilus.uint4b, 128, 1, 37, 1280, dict(rows=1, reps=1, block_m=1, stages=0)),  # a ragged K tile
     (tilus.int4b, 64, 3, 70, 384, dict(rows=2, reps=2, block_m=4, stages=0)),  # M < block_m
     (tilus.uint4b, 32, 6, 9, 160, dict(rows=1, reps=1, block_m=4, warps=8, stages=0)),  # two M tiles
     (tilus.uint4b, 128, 1, 37, 1280, dict(rows=2, reps=1, block_m=1, stages=4)),  # the ring
     (tilus.int4b, 64, 3, 70, 448, dict(rows=1, reps=1, block_m=4, stages=2)),
     # persistent blocks: several row tiles a block through one ring, a ragged last block
     (tilus.uint4b, 128, 1, 37, 1280, dict(rows=1, reps=1, block_m=1, stages=3, persist=1,
                                           num_sms=2)),
     (tilus.int4b, 64, 3, 70, 448, dict(rows=2, reps=1, block_m=2, stages=2, persist=2,
                                        num_sms=2))],
)  # fmt: skip
def test_interpreter_matches_dequantize_then_matmul(wdtype, group, m, n, k, cfg):
    assert ex.run_interp(wdtype, group, m, n, k, kernel=dec.MatmulWxA16Decode, **cfg) < 1e-2


@pytest.mark.parametrize(
    "wdtype", [tilus.int1b, tilus.uint3b, tilus.uint6b, tilus.int8, tilus.float4_e2m1,
               tilus.float6_e3m2, tilus.float7_e5m1], ids=str,
)  # fmt: skip
def test_other_weight_types_match_dequantize_then_matmul(wdtype):
    cfg = dict(rows=1, reps=1, block_m=2, stages=3)
    assert ex.run_interp(wdtype, 64, 3, 9, 192, kernel=dec.MatmulWxA16Decode, **cfg) < 1e-2


def test_k_not_a_multiple_of_the_group_is_reported_at_its_check():
    m, n, k = 2, 16, 192
    x, _codes, _s, packed = ex.random_problem(np.random.default_rng(), m, n, k, 64)
    y = np.full((m, n), np.nan, np.float16)
    kernel = dec.MatmulWxA16Decode(tilus.uint4b, 128, rows=1, reps=1, block_m=1, stages=0)
    with pytest.raises(tilus.TilusProgramError, match="K = 192 is not a multiple") as info:
        kernel(m, n, k, x, packed, np.ones((n, 2), np.float16), y)
    err = info.value
    assert err.loc is not None and err.loc.line == marker_line(dec.MatmulWxA16Decode, "CHECK:group")
    assert err.loc.file.endswith("matmul_wx_a16_decode.py")
    assert np.isnan(y).all()


@pytest.mark.parametrize(
    "args, what",
    [((tilus.float16,), "wdtype"), ((tilus.uint4b, 96), "group"),
     ((tilus.uint4b, 128), "persist")],
)  # fmt: skip
def test_unsupported_arguments_are_refused(args, what):
    m, n, k = 1, 16, 192
    x, _codes, s, packed = ex.random_problem(np.random.default_rng(), m, n, k, 64)
    y = np.full((m, n), np.nan, np.float16)
    with pytest.raises(tilus.TilusArgumentError, match=what):
        extra = dict(persist=2) if what == "persist" else {}  # persistent blocks need a ring
        dec.MatmulWxA16Decode(*args, rows=1, reps=1, block_m=1, stages=0, **extra)(
            m, n, k, x, packed, s, y
        )


@needs_nvrtc
@needs_nvrtc
@pytest.mark.parametrize("wdtype", [tilus.uint1b, tilus.uint3b, tilus.int8, tilus.uint7b],
                         ids=str)  # fmt: skip
def test_every_config_of_each_run_dtype_builds_without_spills(wdtype):
    """fp16 runs (up to 8 rows a thread) and fp32 runs (up to 4): the default space of
    ``decode_kernel`` (M is a runtime argument: one build a config)."""
    kernel = dec.decode_kernel(wdtype, 128)
    assert kernel.script_cls.__name__ == ("MatmulWxA16DecodeF32" if wdtype.nbits > 6 else
                                     "MatmulWxA16Decode")  # fmt: skip
    for cfg in kernel.configs:
        ck = tilus.compile(kernel, 16, 100, 1024, F16, tilus.uint8, F16, F16, config=cfg)
        assert ck.resources["spill_store_bytes"] == 0, (wdtype, cfg, ck.log)


def test_fp32_runs_refuse_more_rows_than_their_registers_hold():
    def build(**kw):
        kernel = dec.MatmulWxA16Decode(tilus.int8, 128, block_m=1, reps=1, stages=0, **kw)
        return tilus.compile(kernel, 1, 100, 1024, F16, tilus.uint8, F16, F16)

    with pytest.raises(tilus.TilusArgumentError, match="rows = 8 with fp32 runs"):
        build(rows=8)
    with pytest.raises(tilus.TilusArgumentError, match="run_dtype must be float16 or float32"):
        build(rows=2, run_dtype="int32")
    build(rows=4, run_dtype="float16")  # the caller's choice: fp16 runs of int8 codes


def test_every_config_builds_without_spills():
    for cfg in dec.MatmulWxA16Decode().configs:
        ck = tilus.compile(dec.MatmulWxA16Decode(tilus.uint4b, 128, **cfg), 1, 100, 1024, F16,
                           tilus.uint8, F16, F16)  # fmt: skip
        ck = ck[0] if isinstance(ck, list) else ck
        assert ck.resources["spill_store_bytes"] == 0, (cfg, ck.log)
