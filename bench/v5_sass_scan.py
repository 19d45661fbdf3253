"""Compile every config of the tutorial's 96-config V5 space (no GPU) and check its SASS.

For each config that compiles, at 8192^3 and at a ragged 300 x 264 x 328: ptxas did not
serialize the wgmma (no ``TilusPerformanceWarning``; the K loop keeps one group in flight,
``WARPGROUP.DEPBAR.LE gsb0, 0x1``), and no fp32->fp16 pack (``F2FP``) of the epilogue comes
after an HGMMA before the last ``WARPGROUP.DEPBAR.LE gsb0, 0x0`` in program order. Prints one
line per failing (config, size) and a summary; exits 1 on any failure.
Run: ``python bench/v5_sass_scan.py`` (needs NVRTC and a disassembler, see tilus.runtime.sass).
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
for _p in (REPO, REPO / "bench"):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

from tune_and_overhead import full_v5_space, load_examples  # noqa: E402

import tilus  # noqa: E402

SIZES = [(8192, 8192, 8192), (300, 264, 328)]


def problems(ck) -> list[str]:
    """What is wrong with one compiled config's SASS (empty when nothing is)."""
    out = []
    sass = ck.sass()
    if ck.wgmma_serialized:
        out.append("serialized")
    if "WARPGROUP.DEPBAR.LE gsb0, 0x1" not in sass:
        out.append("no group kept in flight")
    pending = False
    for line in sass.splitlines():
        if "HGMMA" in line:
            pending = True
        elif "WARPGROUP.DEPBAR.LE gsb0, 0x0" in line:
            pending = False
        elif "F2FP" in line and pending:
            out.append("a pack before the last wait")
            break
    return out


def main() -> int:
    """Scan the space; print failures and the summary."""
    space = full_v5_space(load_examples()["ex_v5"])
    f16 = tilus.float16
    ok = bad = dropped = 0
    for cfg in space().configs:
        for size in SIZES:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", tilus.TilusPerformanceWarning)
                try:
                    ck = tilus.compile(space(**cfg), *size, f16, f16, f16)
                except tilus.TilusCompileError:
                    dropped += 1
                    continue
            found = problems(ck)
            if found:
                bad += 1
                print(f"FAIL {cfg} at {size}: {', '.join(found)}", flush=True)
            else:
                ok += 1
    print(f"{ok} (config, size) pairs clean, {bad} failing, {dropped} refused by the compiler")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
