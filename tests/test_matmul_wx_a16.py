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
import matmul_wx_a16_mma as mma  # noqa: E402

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


# --- the dispatching entry on prepared weights (CPU torch tensors: the interpreter) ----------


def _entry_problem(m, n, k, group, wdtype):
    torch = pytest.importorskip("torch")
    x, w, s, w16 = ex.torch_problem(torch, m, n, k, group, wdtype, device="cpu")
    return torch, x, w, s, torch.matmul(x.float(), w16.float().T)


@pytest.mark.parametrize(
    "wdtype, group, m, n, k, kernel",
    [(tilus.uint4b, 128, 1, 37, 384, "MatmulWxA16Mma"),  # decode M: the mma kernel
     (tilus.int4b, 256, 11, 70, 512, "MatmulWxA16Mma"),  # a ragged M tile, N padded to 16
     (tilus.uint4b, 128, ex.MMA_MAX_M - 3, 20, 256, "MatmulWxA16Mma"),  # several M tiles
     (tilus.uint4b, 128, ex.MMA_MAX_M + 5, 70, 384, "MatmulWxA16Pipe"),  # past the boundary
     (tilus.uint4b, 64, 2, 45, 192, "MatmulWxA16Decode"),  # group 64: no mma packing
     (tilus.uint3b, 128, 3, 19, 256, "MatmulWxA16Mma"),  # another bit width
     (tilus.uint3b, 64, 3, 19, 256, "MatmulWxA16Decode"),  # its group 64: no mma packing
     (tilus.float7_e5m1, 128, 3, 19, 256, "MatmulWxA16DecodeF32")],  # not an mma type
    ids=str,
)  # fmt: skip
def test_entry_picks_a_kernel_and_matches_torch(wdtype, group, m, n, k, kernel):
    torch, x, w, s, ref = _entry_problem(m, n, k, group, wdtype)
    weights = ex.prepare_weights(w, s, wdtype=wdtype, group=group)
    # the mma fragment-order copy: the mma kernel's types, groups of whole 128-K chunks
    assert (weights.w_prepacked is not None) == (wdtype in mma.MMA_TYPES and group % 128 == 0)
    assert ex.pick_kernel(m, weights)[0].script_cls.__name__ == kernel
    y = torch.full((m, n), float("nan"), dtype=torch.float16)
    assert ex.matmul_wx_a16(x, weights, out=y) is y
    assert not torch.isnan(y).any()
    assert ((y.float() - ref).abs().max() / ref.abs().max()).item() < 1e-2


def test_entry_on_plain_bytes_still_works():
    torch, x, w, s, ref = _entry_problem(3, 40, 256, 128, tilus.int4b)
    y = ex.matmul_wx_a16(x, w, s, wdtype=tilus.int4b, group=128)
    assert ((y.float() - ref).abs().max() / ref.abs().max()).item() < 1e-2


def test_entry_refuses_bad_input_naming_the_argument():
    torch, x, w, s, _ref = _entry_problem(2, 40, 256, 128, tilus.uint4b)
    weights = ex.prepare_weights(w, s)
    E = tilus.TilusArgumentError
    with pytest.raises(E, match=r"^wdtype: int4b given, the weights are uint4b$"):
        ex.matmul_wx_a16(x, weights, wdtype=tilus.int4b)
    with pytest.raises(E, match=r"^group: 64 given, the weights have group 128$"):
        ex.matmul_wx_a16(x, weights, group=64)
    with pytest.raises(E, match=r"^scales: the weights object holds its scales"):
        ex.matmul_wx_a16(x, weights, s)
    with pytest.raises(E, match=r"^x: shape \[2, 128\], expected \[M, K = 256\]$"):
        ex.matmul_wx_a16(x[:, :128], weights)
    with pytest.raises(E, match=r"^out: shape \[2, 39\], expected \[M, N\] = \[2, 40\]$"):
        ex.matmul_wx_a16(x, weights, out=torch.empty(2, 39, dtype=torch.float16))
    with pytest.raises(E, match=r"^scales: required with plain packed weights$"):
        ex.matmul_wx_a16(x, w)
    with pytest.raises(E, match=r"^w_packed: int32 \[40, 128\] is not uint8"):
        ex.prepare_weights(w.int(), s)
    with pytest.raises(E, match=r"^scales: float32 \[40, 2\], expected float16 \[N, K / group\]"):
        ex.prepare_weights(w, s.float())
    with pytest.raises(E, match=r"^scales: float16 \[40, 2\], expected .* = \[40, 4\]$"):
        ex.prepare_weights(w, s, group=64)
    with pytest.raises(E, match=r"^w_packed: K = 256 is not a multiple of the scale group 512$"):
        ex.prepare_weights(w, s, group=512)
    with pytest.raises(E, match=r"^wdtype must be"):
        ex.prepare_weights(w, s, wdtype=tilus.float16)
