"""CPU seconds to compile each config of the row-wise examples' autotune spaces (no GPU).

For every config of Softmax, OnlineSoftmax, LayerNorm and RMSNorm (both forms) at the benchmark's row
lengths (8192, 32000, 1024) it prints the tilus time (transpile, passes, code generation), the
NVRTC time (CUDA C++ to cubin for sm_90a), the lines of generated CUDA and the registers a
thread, and a summary (median and max seconds a config). Times are CPU seconds of this process
(``time.process_time``), so a loaded machine inflates them less than wall time. Run:
``python bench/rowwise_compile_time.py [--n 8192 32000 1024] [--kernels LayerNorm]``
(needs NVRTC).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
for _p in (REPO, REPO / "examples"):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

import layer_norm  # noqa: E402
import rms_norm  # noqa: E402
import softmax  # noqa: E402

import tilus  # noqa: E402
from tilus.backends.cuda.codegen.build import NVRTC_OPTIONS, generate  # noqa: E402
from tilus.runtime.nvrtc import compile_cuda  # noqa: E402
from tilus.target import buildable, building_for  # noqa: E402

#: Pointer arguments after (m, n) of each kernel.
KERNELS = [
    (softmax.Softmax, 2),
    (softmax.OnlineSoftmax, 2),
    (layer_norm.LayerNorm, 4),
    (rms_norm.RMSNorm, 3),
]


def one(cls, nptr: int, n: int, cfg: dict) -> dict:
    """Compile one config; its times (CPU seconds), source lines and registers."""
    kernel = cls(**cfg)
    target = buildable("sm_90a")
    with building_for(target):
        t0 = time.process_time()
        const_args, _ = kernel.bind((4096, n) + (None,) * nptr, {})
        ks = generate(kernel.program(cfg, const_args), smem_limit=227 * 1024)
        t1 = time.process_time()
    binary = compile_cuda(ks.source, arch="sm_90a", options=NVRTC_OPTIONS, name="k.cu")
    t2 = time.process_time()
    regs = None
    for line in binary.log.splitlines():
        if "registers" in line and "Used" in line:
            regs = int(line.split("Used")[1].split("registers")[0])
    return dict(tilus=t1 - t0, nvrtc=t2 - t1, lines=ks.source.count("\n"), regs=regs)


def main() -> int:
    """Compile every config at every row length; print a line each and a summary."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--n", type=int, nargs="+", default=[8192, 32000, 1024])
    ap.add_argument("--kernels", nargs="+", default=None, help="class names (default: all)")
    a = ap.parse_args()
    totals, refused = [], 0
    for cls, nptr in KERNELS:
        if a.kernels and cls.__name__ not in a.kernels:
            continue
        for n in a.n:
            for cfg in cls().configs:
                label = ",".join(f"{k}={v}" for k, v in cfg.items())
                try:
                    r = one(cls, nptr, n, cfg)
                except tilus.TilusError as e:
                    refused += 1
                    print(f"{cls.__name__:14s} n={n:<6d} {label:30s} refused: "
                          f"{str(e).splitlines()[0][-90:]}")  # fmt: skip
                    continue
                totals.append(r["tilus"] + r["nvrtc"])
                print(f"{cls.__name__:14s} n={n:<6d} {label:30s} tilus {r['tilus']:5.2f} s  "
                      f"nvrtc {r['nvrtc']:5.2f} s  {r['lines']:5d} lines  {r['regs']} regs",
                      flush=True)  # fmt: skip
    if totals:
        print(
            f"{len(totals)} configs compiled, {refused} refused; seconds a config: median "
            f"{statistics.median(totals):.2f}, max {max(totals):.2f}, total {sum(totals):.1f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
