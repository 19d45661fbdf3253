"""Interpreter speed on one CPU core: the tiled-matmul example and the seed V4 at 256^3.

Targets (issue acceptance): tiled matmul 256x256x256 < 5 s; seed V4 256x256x256 < 10 s.
Run: python bench/interp_speed.py [--out FILE.json] [--size N] [--no-seeds]
(prints the table and the JSON result; ``--out`` also writes the JSON to FILE.json, e.g.
``bench/results/<date>-cpu-interpreter.json``). The seed kernels are looked up in
``$TILUS_SEED_KERNELS``, else ``../shared/seed_kernels`` beside the repository.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")  # one core: BLAS must not fan out
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import argparse  # noqa: E402
import datetime  # noqa: E402
import importlib.util  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
# the examples import their shared helpers (example_support) from their own folder
if str(REPO / "examples") not in sys.path:
    sys.path.insert(0, str(REPO / "examples"))


def load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def timed(kernel, m, n, k, trans_b, c_dtype, repeat=3):
    rng = np.random.default_rng()
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((n, k) if trans_b else (k, n)).astype(np.float16)
    best, err = None, None
    for i in range(repeat + 1):  # the first call also transpiles; report it separately
        c = np.full((m, n), np.nan, dtype=c_dtype)
        t0 = time.perf_counter()
        kernel(m, n, k, a, b, c)
        dt = time.perf_counter() - t0
        if i == 0:
            first = dt
        else:
            best = dt if best is None else min(best, dt)
        bb = b.astype(np.float64)
        ref = a.astype(np.float64) @ (bb.T if trans_b else bb)
        err = float(np.abs(c - ref).max() / np.abs(ref).max())
    return first, best, err


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="also write the JSON result to this file")
    ap.add_argument("--size", type=int, default=256, help="m = n = k (default 256)")
    ap.add_argument(
        "--seeds",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="time the seed kernels too, when found (default: yes)",
    )
    args = ap.parse_args(argv)
    size = args.size
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    tiled = load(REPO / "examples" / "tiled_matmul.py", "bench_tiled_matmul").TiledMatmul
    seeds = Path(os.environ.get("TILUS_SEED_KERNELS", REPO.parent / "shared" / "seed_kernels"))
    rows = []
    for cfg in tiled().configs:
        f, b, e = timed(tiled(**cfg), size, size, size, False, np.float32)
        rows.append(("tiled_matmul", str(cfg), f, b, e, 5.0))
    if args.seeds and seeds.is_dir():
        v4 = load(seeds / "matmul_v4.py", "bench_seed_v4").MatmulWGMMAV4
        f, b, e = timed(v4(), size, size, size, True, np.float16)
        rows.append(("seed matmul_v4", str(v4().configs[0]), f, b, e, 10.0))
        v2 = load(seeds / "matmul_v2.py", "bench_seed_v2").MatmulWGMMAV2
        f, b, e = timed(v2(), size, size, size, True, np.float16)
        rows.append(("seed matmul_v2", str(v2().configs[0]), f, b, e, 10.0))
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
    ).stdout.strip()
    result = {
        "date": datetime.date.today().isoformat(),
        "machine": f"{platform.processor() or platform.machine()}, 1 core (affinity pinned)",
        "python": platform.python_version(),
        "numpy": np.__version__,
        "commit": commit,
        "command": " ".join(["python", "bench/interp_speed.py", *(argv or sys.argv[1:])]),
        "size": f"{size}x{size}x{size}",
        "rows": [
            dict(
                kernel=r[0],
                config=r[1],
                first_call_s=round(r[2], 4),
                best_of_3_s=round(r[3], 4),
                rel_err=r[4],
                target_s=r[5],
            )
            for r in rows
        ],
    }
    print(f"{'kernel':16} {'config':72} {'first s':>8} {'best s':>8} {'rel err':>9} target")
    for r in rows:
        ok = "ok" if r[2] < r[5] and r[4] < 1e-3 else "MISSED"
        print(f"{r[0]:16} {r[1]:72} {r[2]:8.3f} {r[3]:8.3f} {r[4]:9.2e} <{r[5]:.0f}s {ok}")
    text = json.dumps(result, indent=1) + "\n"
    print(text, end="")
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
