"""Experiment: the tuner's ranking of RMS norm configs against the benchmark's, at 8192x8192.

``python3 bench/rms_tune_probe.py [--rounds 9]`` (H200): interleaved rounds of copy_,
torch.compile and pinned configs under the benchmark's timing (bench/rowwise.py ``time_ms``) and
the tuner's (``tilus.tune.timing.benchmark``), each with the dirty (``zero_``) and a clean
(write, then read of another buffer) L2 flush; then the tuner run four times from an empty cache (with and without
the extra final rounds).
"""

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

CONFIGS = [(8192, 16), (8192, 8), (16384, 8), (16384, 16), (16384, 32), (8192, 32)]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--shape", default="8192x8192")
    args = ap.parse_args()
    import torch
    from rms_norm import RMSNorm
    from rowwise import time_ms, winner

    import tilus
    from tilus.tune.timing import benchmark

    m, n = (int(v) for v in args.shape.split("x"))
    x = torch.randn(m, n, device="cuda").half()
    w = torch.randn(n, device="cuda").half()
    y = torch.empty_like(x)
    src = torch.randn(m * n, device="cuda").half()
    dst = torch.empty_like(src)
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    other = torch.ones(256 << 18, dtype=torch.float32, device="cuda")
    f = lambda x, w: torch.nn.functional.rms_norm(x, (n,), w, eps=1e-6)  # noqa: E731
    comp = torch.compile(f)
    ref = f(x.float(), w.float())
    runs = {"copy": lambda: dst.copy_(src), "torch.compile": lambda: comp(x, w)}
    for block, pt in CONFIGS:
        k = RMSNorm(block=block, per_thread=pt, stages=0, warps=0)
        runs[f"W{block}/{pt}"] = lambda k=k: k(m, n, x, w, y)
        y.fill_(float("nan"))
        runs[f"W{block}/{pt}"]()
        err = ((y.float() - ref).abs().max() / ref.abs().max()).item()
        assert err < 2e-2, (block, pt, err)
    for fn in runs.values():
        fn()
    torch.cuda.synchronize()

    class Clean:  # the same write, then a read of another buffer: the L2 holds clean lines
        def zero_(self):
            flush.zero_()
            other.sum()

    protocols = {
        "bench dirty": lambda fn: time_ms(fn, torch, flush, 10),
        "bench clean": lambda fn: time_ms(fn, torch, Clean(), 10),
        "tuner dirty": lambda fn: benchmark(fn, warmup=2, repeat=50, cuda=True).median,
    }
    table = {p: {name: [] for name in runs} for p in protocols}
    names = list(runs)
    for r in range(args.rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        for p, timer in protocols.items():
            for name in order:
                table[p][name].append(timer(runs[name]))
    print(f"RMS norm {m}x{n}, {args.rounds} interleaved rounds, median of round medians (ms)")
    print(f"{'impl':16s}" + "".join(f"{p:>14s}" for p in protocols) + "   x compile (each)")
    for name in names:
        meds = [statistics.median(table[p][name]) for p in protocols]
        comp_meds = [statistics.median(table[p]["torch.compile"]) for p in protocols]
        ratios = " ".join(f"{c / v:5.3f}" for c, v in zip(comp_meds, meds))
        print(f"{name:16s}" + "".join(f"{v:14.4f}" for v in meds) + f"   {ratios}")
    from tilus.tune import tuner

    extra = tuner.FINAL_MAX_ROUNDS
    for i in range(4):
        tuner.FINAL_MAX_ROUNDS = extra if i % 2 == 0 else tuner.FINAL_ROUNDS
        with tempfile.TemporaryDirectory() as d:
            tilus.option.cache_dir(d)
            k = RMSNorm()
            t0 = time.perf_counter()
            y.fill_(float("nan"))
            k(m, n, x, w, y)
            torch.cuda.synchronize()
            print(
                f"tuner run {i} (max rounds {tuner.FINAL_MAX_ROUNDS}): winner {winner(k)} ({time.perf_counter() - t0:.1f} s)"
            )
            for rep in Path(d).rglob("dispatch/*.txt"):
                print("   " + "\n   ".join(rep.read_text().splitlines()[:30]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
