"""Experiment: the tuner's ranking of RMS norm configs against the benchmark's, at 8192x8192.

``python3 bench/rms_tune_probe.py [--rounds 15]`` (H200): first the tuner three times, each in a
fresh process with an empty cache (its winner and its best timings); then interleaved rounds of
copy_, torch.compile and pinned configs under four timings: the benchmark's (bench/rowwise.py
``time_ms``: 10 runs, a sync after each), the tuner's (``tilus.tune.timing.benchmark``: 50 runs
back to back), the tuner's on fresh argument copies each timing (as ``tune`` does), and the
benchmark's without the syncs. The table comes last.
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "examples"))
sys.path.insert(0, str(HERE))

CONFIGS = [(8192, 16), (8192, 8), (16384, 8), (16384, 16), (16384, 32), (8192, 32)]


def tensors(m, n, torch):
    x = torch.randn(m, n, device="cuda").half()
    w = torch.randn(n, device="cuda").half()
    return x, w, torch.empty_like(x)


def tuner_run(m, n) -> int:
    """One tuning from an empty cache (this process): the winner and the table's best rows."""
    import torch
    from rms_norm import RMSNorm
    from rowwise import winner

    x, w, y = tensors(m, n, torch)
    k = RMSNorm()
    k(m, n, x, w, y)
    torch.cuda.synchronize()
    print(f"winner {winner(k)}")
    for rep in Path(os.environ["TILUS_CACHE_DIR"]).rglob("dispatch/*.txt"):
        print("   " + "\n   ".join(rep.read_text().splitlines()[:14]))
    return 0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--shape", default="8192x8192")
    ap.add_argument("--tuner-run", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--tuner-runs", type=int, default=3)
    args = ap.parse_args()
    m, n = (int(v) for v in args.shape.split("x"))
    if args.tuner_run:
        return tuner_run(m, n)
    for i in range(args.tuner_runs):
        with tempfile.TemporaryDirectory() as d:
            env = dict(os.environ, TILUS_CACHE_DIR=d)
            cmd = [sys.executable, __file__, "--tuner-run", "--shape", args.shape]
            out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
            lines = [ln for ln in (out.stdout + out.stderr).splitlines() if "compiling" not in ln]
            print(f"== tuner run {i} (fresh process, empty cache), rc {out.returncode}")
            print("\n".join(lines[-20:]), flush=True)

    import torch
    from rms_norm import RMSNorm
    from rowwise import time_ms

    from tilus.tune.timing import benchmark

    x, w, y = tensors(m, n, torch)
    src = torch.randn(m * n, device="cuda").half()
    dst = torch.empty_like(src)
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    f = lambda x, w: torch.nn.functional.rms_norm(x, (n,), w, eps=1e-6)  # noqa: E731
    comp = torch.compile(f)
    ref = f(x.float(), w.float())
    runs = {"copy": lambda a=None: dst.copy_(src), "torch.compile": lambda a=None: comp(x, w)}
    for block, pt in CONFIGS:
        k = RMSNorm(block=block, per_thread=pt, stages=0, warps=0, hints=0)
        name = f"W{block}/{pt}"
        runs[name] = lambda a=None, k=k: k(m, n, *(a or (x, w, y)))
        y.fill_(float("nan"))
        runs[name]()
        err = ((y.float() - ref).abs().max() / ref.abs().max()).item()
        assert err < 2e-2, (block, pt, err)
    for fn in runs.values():
        fn()
    torch.cuda.synchronize()

    def nosync(fn):
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(10)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(10)]
        for s, e in zip(starts, ends):
            flush.zero_()
            torch.cuda._sleep(100_000)
            s.record()
            fn()
            e.record()
        torch.cuda.synchronize()
        return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends))

    def fresh(fn):
        a = (x.clone(), w.clone(), torch.empty_like(y))
        return benchmark(lambda: fn(a), warmup=2, repeat=50, cuda=True).median

    protocols = {
        "bench": lambda fn: time_ms(fn, torch, flush, 10),
        "bench nosync": nosync,
        "tuner": lambda fn: benchmark(fn, warmup=2, repeat=50, cuda=True).median,
        "tuner fresh": fresh,
    }
    table = {p: {name: [] for name in runs} for p in protocols}
    names = list(runs)
    for r in range(args.rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        for p, timer in protocols.items():
            for name in order:
                table[p][name].append(timer(runs[name]))
    print(f"\nRMS norm {m}x{n}, {args.rounds} interleaved rounds, median of round medians (ms);")
    print("then each protocol's ratio torch.compile / impl")
    print(f"{'impl':14s}" + "".join(f"{p:>13s}" for p in protocols) + "   x compile")
    comp_meds = [statistics.median(table[p]["torch.compile"]) for p in protocols]
    for name in names:
        meds = [statistics.median(table[p][name]) for p in protocols]
        ratios = " ".join(f"{c / v:5.3f}" for c, v in zip(comp_meds, meds))
        print(f"{name:14s}" + "".join(f"{v:13.4f}" for v in meds) + f"   {ratios}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
