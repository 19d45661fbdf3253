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


def _v5(**config):
    v5 = _load("matmul_v5").MatmulWGMMAV5
    # ragged m and n: the epilogue's bounds-checked stores are all there
    ck = tilus.compile(v5(**config), 300, 264, 328, tilus.float16, tilus.float16, tilus.float16)
    return ck[0] if isinstance(ck, list) else ck


CONFIGS = [
    dict(swizzle=2, block_k=64, block_m=128, block_n=128, num_stages=3),
    dict(swizzle=4, block_k=64, block_m=128, block_n=256, num_stages=4),
]


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: f"{c['block_m']}x{c['block_n']}")
def test_v5_keeps_wgmma_groups_in_flight(config):
    # ptxas serializes every wgmma (each waits for the previous, info C7514) when it can sink
    # epilogue code that reads an accumulator under a store predicate. The loop must keep one
    # group in flight (DEPBAR.LE gsb0, 0x1).
    with warnings.catch_warnings():
        warnings.simplefilter("error", tilus.TilusPerformanceWarning)
        ck = _v5(**config)
    assert not ck.wgmma_serialized, ck.log
    sass = ck.sass()
    assert "WARPGROUP.DEPBAR.LE gsb0, 0x1" in sass
    hgmma = [ln for ln in sass.splitlines() if "HGMMA" in ln]
    assert any("gsb0" not in ln for ln in hgmma), "every HGMMA closes its own group"


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: f"{c['block_m']}x{c['block_n']}")
def test_v5_epilogue_waits_for_the_last_wgmma_group(config):
    # no fp32->fp16 pack of the epilogue may be scheduled above the final wait; ptxas did so
    # when the K loop (a group in flight across iterations) was unrolled and the epilogue's
    # stores were predicated: such loops are not unrolled and wgmma kernels' stores are not
    # predicated
    ck = _v5(**config)
    assert "#pragma unroll 1" not in ck.source
    assert "tl_st_global_or_pair(" in ck.source
    pending = False
    for line in ck.sass().splitlines():
        if "HGMMA" in line:
            pending = True
        elif "WARPGROUP.DEPBAR.LE gsb0, 0x0" in line:
            pending = False
        elif "F2FP" in line:
            assert not pending, f"accumulator read before wgmma.wait_group(0): {line.strip()}"


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
