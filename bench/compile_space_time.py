"""Wall time of ``tilus.compile`` over the tutorial's 96-config V5 space from a cold cache (no GPU).

Each run uses a fresh, empty artifact cache; reports the seconds per run, how many configs
compiled and the worker count. Run: ``python bench/compile_space_time.py [--runs N]
[--workers N] [--size M N K]`` (needs NVRTC).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
for _p in (REPO, REPO / "bench"):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

from tune_and_overhead import full_v5_space, load_examples  # noqa: E402

import tilus  # noqa: E402
from tilus.tune.parallel import default_workers  # noqa: E402


def main() -> int:
    """Compile the space ``--runs`` times, each from an empty cache; print the times."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--size", type=int, nargs=3, default=(8192, 8192, 8192))
    a = ap.parse_args()
    space = full_v5_space(load_examples()["ex_v5"])
    f16 = tilus.float16
    workers = a.workers if a.workers is not None else default_workers()
    for run in range(a.runs):
        with tempfile.TemporaryDirectory() as d, tilus.option.scoped(cache_dir=d):
            with tilus.option.scoped(parallel_workers=workers), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                t0 = time.perf_counter()
                out = tilus.compile(space(), *a.size, f16, f16, f16)
                secs = time.perf_counter() - t0
        print(
            f"run {run}: {secs:.1f} s, {len(out)}/{len(space().configs)} configs compiled, "
            f"{workers} worker(s)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
