"""Regression: accumulator reads never precede the wgmma.wait_group that retires them (SASS)."""

from __future__ import annotations

import importlib.util
import sys
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


def test_v5_epilogue_waits_for_the_last_wgmma_group():
    # V5 keeps one wgmma group in flight across iterations (wait_group(1)); ptxas hoisted the
    # fp32->fp16 packs of the epilogue above the final wait when that loop was unrolled
    v5 = _load("matmul_v5").MatmulWGMMAV5
    kernel = v5(swizzle=2, block_k=64, block_m=128, block_n=128, num_stages=3)
    ck = tilus.compile(kernel, 300, 264, 328, tilus.float16, tilus.float16, tilus.float16)
    ck = ck[0] if isinstance(ck, list) else ck
    pending = False
    for line in ck.sass().splitlines():
        if "HGMMA" in line:
            pending = True
        elif "WARPGROUP.DEPBAR.LE gsb0, 0x0" in line:
            pending = False
        elif "F2FP" in line:
            assert not pending, f"accumulator read before wgmma.wait_group(0): {line.strip()}"
    assert "#pragma unroll 1" in ck.source
