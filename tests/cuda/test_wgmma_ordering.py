"""Regression: accumulator reads never precede the wgmma.wait_group that retires them (SASS)."""

from __future__ import annotations

import importlib.util
import sys
import warnings
from pathlib import Path

import pytest

pytest.importorskip("cuda.bindings")

import tilus  # noqa: E402

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "hopper_matmul"


def _load(name):
    # the examples import each other by plain module names that the seed kernels share:
    # load with the examples folder first and restore whatever those names meant before
    saved = {k: sys.modules.pop(k) for k in ("matmul_v4", "harness") if k in sys.modules}
    sys.path.insert(0, str(EXAMPLES))
    try:
        spec = importlib.util.spec_from_file_location(f"ordering_{name}", EXAMPLES / f"{name}.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod
    finally:
        sys.path.remove(str(EXAMPLES))
        for k in ("matmul_v4", "harness"):
            sys.modules.pop(k, None)
        sys.modules.update(saved)


def _v5_classes():
    v5 = _load("matmul_v5").MatmulWGMMAV5

    class V5RegisterEpilogue(v5):
        """V5 storing C straight from registers (bounds-checked stores while wgmma groups are
        kept in flight: the kernels whose stores go to the global sink word when out of
        bounds)."""

        def consume(self, half, pipe, sa, sb, gc, k_size, offset_m, offset_n):
            block_m_half = self.block_m // 2
            acc = self.register_tensor(
                dtype=tilus.float32, shape=[block_m_half, self.block_n], init=0.0
            )
            prev_stage: tilus.int32 = 0
            for offset_k in self.range(0, k_size, self.block_k, unroll=self.num_stages):
                pipe.consumer_acquire()
                self.wgmma.fence()
                self.wgmma.mma(
                    sa[pipe.consumer_stage, half], sb[pipe.consumer_stage].transpose(), acc
                )
                self.wgmma.commit_group()
                self.wgmma.wait_group(1)
                if offset_k > 0:
                    pipe.consumer_release(prev_stage)
                prev_stage = pipe.consumer_stage
                pipe.consumer_advance()
            self.wgmma.wait_group(0)
            pipe.consumer_release(prev_stage)
            self.store_global(
                gc,
                self.cast(acc, dtype=tilus.float16),
                offsets=[offset_m + half * block_m_half, offset_n],
            )

    return {"tma": v5, "registers": V5RegisterEpilogue}


def _v5(epilogue="tma", **config):
    cls = _v5_classes()[epilogue]
    # ragged m and n: the epilogue's bounds checks (or TMA's clipping) are all there
    ck = tilus.compile(cls(**config), 300, 264, 328, tilus.float16, tilus.float16, tilus.float16)
    return ck[0] if isinstance(ck, list) else ck


CONFIGS = [
    dict(swizzle=2, block_k=64, block_m=128, block_n=128, num_stages=3),
    dict(swizzle=4, block_k=64, block_m=128, block_n=256, num_stages=3),
]
EPILOGUES = ["tma", "registers"]


def _ids(c):
    return f"{c['block_m']}x{c['block_n']}"


@pytest.mark.parametrize("epilogue", EPILOGUES)
@pytest.mark.parametrize("config", CONFIGS, ids=_ids)
def test_v5_keeps_wgmma_groups_in_flight(config, epilogue):
    # ptxas serializes every wgmma (each waits for the previous, info C7514) when it can sink
    # epilogue code that reads an accumulator under a store predicate. The loop must keep one
    # group in flight (DEPBAR.LE gsb0, 0x1).
    with warnings.catch_warnings():
        warnings.simplefilter("error", tilus.TilusPerformanceWarning)
        ck = _v5(epilogue, **config)
    assert not ck.wgmma_serialized, ck.log
    sass = ck.sass()
    assert "WARPGROUP.DEPBAR.LE gsb0, 0x1" in sass
    hgmma = [ln for ln in sass.splitlines() if "HGMMA" in ln]
    assert any("gsb0" not in ln for ln in hgmma), "every HGMMA closes its own group"


@pytest.mark.parametrize("epilogue", EPILOGUES)
@pytest.mark.parametrize("config", CONFIGS, ids=_ids)
def test_v5_epilogue_waits_for_the_last_wgmma_group(config, epilogue):
    # no fp32->fp16 pack of the epilogue may be scheduled above the final wait; ptxas did so
    # when the K loop (a group in flight across iterations) was unrolled and the epilogue's
    # stores were predicated: wgmma kernels' global stores are not predicated
    ck = _v5(epilogue, **config)
    assert "#pragma unroll 1" not in ck.source
    if epilogue == "registers":
        assert "tl_st_global_or_pair(" in ck.source
    pending = False
    for line in ck.sass().splitlines():
        if "HGMMA" in line:
            pending = True
        elif "WARPGROUP.DEPBAR.LE gsb0, 0x0" in line:
            pending = False
        elif "F2FP" in line:
            assert not pending, f"accumulator read before wgmma.wait_group(0): {line.strip()}"


@pytest.mark.parametrize("config", CONFIGS, ids=_ids)
def test_v5_tma_epilogue_is_conflict_free_and_does_not_spill(config):
    # the shared C tile is stored in 128-byte swizzled column blocks: 32-bit pair stores, one
    # TMA box per block, no global stores from registers, no spills
    ck = _v5("tma", **config)
    sass = ck.sass()
    boxes = config["block_n"] // 64
    assert ck.source.count("tl_tma_store_2d(&tl_map") == 2 * boxes  # two warp groups
    assert "tl_tma_store_wait_read<0>" in ck.source
    assert "tl_swz<128>" in ck.source
    assert "STG" not in sass.replace("UTMASTG", "")
    assert ck.resources["spill_store_bytes"] == 0, ck.log


def test_serialized_wgmma_is_reported():
    # the ptxas info line (12.x/13.x wording); a fresh build with it in the log warns
    from tilus.backends.cuda.codegen.build import CompiledKernel, _warn_serialized

    line = (
        "ptxas info    : (C7514) Potential Performance Loss: wgmma.mma_async instructions are "
        "serialized due to non wgmma instructions reading accumulator registers of  a wgmma "
        "between start and end of the pipeline stage in the function 'tl_K' in line 0"
    )

    class KS:
        name = "tl_K"

    with pytest.warns(tilus.TilusPerformanceWarning, match="tl_K: ptxas serialized every wgmma"):
        _warn_serialized(KS, "ptxas info    : 0 bytes gmem\n" + line)
    ck = CompiledKernel(config={}, kernel=KS, cubin=b"", log=line, compile_seconds=0, cached=True)
    assert ck.wgmma_serialized
