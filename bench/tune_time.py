"""Cold-cache time of a 100-config autotune space: the parallel build alone (CPU) or the tuning.

The space (``--space v7-100``) is Matmul V7's configs crossed with swizzle widths: 100 distinct
kernels that all build (same registers and shared memory as V7's own space); ``--space v5-96``
is the tutorial's 96-config V5 space (some configs are refused by tilus before NVRTC runs).

- Without ``--tune`` (no GPU needed): ``tilus.compile`` of the whole space from an empty artifact
  cache, in the build workers (``--workers``, default: every usable core). Prints the wall time,
  how many configs built or were refused, the NVRTC seconds summed over the configs and what
  that predicts for the wall time on ``--predict`` cores (the builds are independent: NVRTC
  time / cores, plus tilus's own passes in the parent).
- ``--tune`` (a Hopper GPU): the first call of the kernel on CUDA tensors from an empty cache,
  i.e. what a user waits for: build every config, check and time the survivors, pick the
  winner. Prints the tuner's own account (compile and timing seconds, failures, the winner).

Run: ``python3 bench/tune_time.py [--space v7-100] [--configs N] [--size M N K] [--tune]``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples" / "hopper_matmul"
for _p in (REPO, REPO / "bench", EXAMPLES):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

import tilus  # noqa: E402

#: swizzle widths crossed with V7's tiles (each is a different kernel: the width is a constant)
SWIZZLES = (8, 2, 4, 16, 1, 3, 6, 12)
NAMES = "block_m, block_n, num_stages, split_k, swizzle, cluster_n, coop, epilogue"


def v7_space(count: int = 100):
    """``MatmulV7`` over ``count`` configs: its tiles (without their swizzle) x ``SWIZZLES``."""
    import matmul_v7

    keys = []
    for c in matmul_v7.MatmulV7().configs:
        t = tuple(c[k] for k in NAMES.split(", ") if k != "swizzle")
        if t not in keys:
            keys.append(t)
    configs = [(*t[:4], sw, *t[4:]) for sw in SWIZZLES for t in keys][:count]
    if len(configs) < count:
        raise SystemExit(f"the v7 space has at most {len(configs)} configs")

    @tilus.autotune(NAMES, configs)
    @tilus.autotune("block_k", [64])
    class MatmulV7Space(matmul_v7.MatmulV7):
        """V7 over a wider space (swizzle widths)."""

    return MatmulV7Space


def v5_space(count: int = 96):
    """The tutorial's 96-config V5 space (``bench/tune_and_overhead.py``)."""
    from tune_and_overhead import full_v5_space, load_examples

    if count != 96:
        raise SystemExit("the v5 space has 96 configs (--configs 96)")
    return full_v5_space(load_examples()["ex_v5"])


SPACES = {"v7-100": (v7_space, 100), "v5-96": (v5_space, 96)}


def build_only(space, size, workers: int, predict: int) -> dict:
    """Compile the space from an empty cache; times and counts."""
    f16 = tilus.float16
    with tempfile.TemporaryDirectory() as d, tilus.option.scoped(cache_dir=d):
        with tilus.option.scoped(parallel_workers=workers), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            t0 = time.perf_counter()
            out = tilus.compile(space(), *size, f16, f16, f16)
            wall = time.perf_counter() - t0
    out = out if isinstance(out, list) else [out]
    nvrtc = sum(float(getattr(ck, "compile_seconds", 0.0) or 0.0) for ck in out)
    total = len(space().configs)
    # the parent's share (tilus passes, code generation, launching jobs) stays serial
    parent = max(wall - nvrtc / max(workers, 1), 0.0)
    return {
        "configs": total,
        "built": len(out),
        "refused": total - len(out),
        "workers": workers,
        "wall_s": round(wall, 1),
        "nvrtc_s_sum": round(nvrtc, 1),
        "nvrtc_s_per_config": round(nvrtc / max(len(out), 1), 2),
        f"predicted_wall_s_{predict}_cores": round(parent + nvrtc / predict, 1),
    }


def tune_cold(space, size) -> dict:
    """The first call (tuning) on CUDA tensors from an empty cache: the tuner's account."""
    import torch

    from tilus.backends.cuda import launch

    m, n, k = size
    a = torch.randn(m, k, device="cuda", dtype=torch.float16)
    b = torch.randn(n, k, device="cuda", dtype=torch.float16)
    c = torch.empty(m, n, device="cuda", dtype=torch.float16)
    with tempfile.TemporaryDirectory() as d, tilus.option.scoped(cache_dir=d):
        kernel = space()
        t0 = time.perf_counter()
        kernel(m, n, k, a, b, c)
        torch.cuda.synchronize()
        wall = time.perf_counter() - t0
    tuning = launch.dispatcher(kernel).last_tuning or {}
    out = {x: v for x, v in tuning.items() if x != "build_pids"}
    out["first_call_s"] = round(wall, 1)
    return out


def main(argv=None) -> int:
    """Parse the arguments, build or tune, print the result."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--space", default="v7-100", choices=sorted(SPACES))
    ap.add_argument("--configs", type=int, default=None, help="first N configs of the space")
    ap.add_argument("--size", type=int, nargs=3, default=(4096, 4096, 4096))
    ap.add_argument("--workers", type=int, default=None, help="build workers (default: cores)")
    ap.add_argument("--predict", type=int, default=16, help="cores to predict the wall time for")
    ap.add_argument("--tune", action="store_true", help="tune on the GPU (first call)")
    args = ap.parse_args(argv)
    make, default_count = SPACES[args.space]
    count = args.configs if args.configs is not None else default_count
    if count < 1:
        ap.error("--configs must be positive")
    space = make(count)
    from tilus.tune.parallel import default_workers

    workers = args.workers or default_workers()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(f"space {args.space}: {len(space().configs)} configs at {args.size}, {cores} cores")
    if args.tune:
        res = tune_cold(space, tuple(args.size))
    else:
        res = build_only(space, tuple(args.size), workers, args.predict)
    for key, v in res.items():
        print(f"  {key:28s} {v}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
