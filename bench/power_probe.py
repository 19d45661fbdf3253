"""Clocks, power and tensor-pipe use of a pinned V7 matmul beside cuBLAS under a sustained load.

``python bench/power_probe.py [--shape 8192x8192x8192] [--seconds 3] [--phases 4]
[--out probe.json] [config K=V ...]`` (on a Hopper GPU with torch). The V7 config (keywords not
given take the first config of ``MatmulV7``'s space) is checked once against torch in float32
on a NaN-poisoned C. Then cuBLAS (``torch.matmul``, ``C = A @ B^T``) and V7 take turns in
``--phases`` phases each, every phase ``--seconds`` of back-to-back launches (no pauses, as a
training loop runs them) while ``nvidia-smi`` samples the SM clock, the power draw and the
throttle reasons every 100 ms. For each phase it prints the TFLOPS (CUDA events over the whole
phase), the median SM clock and power of the samples in its second half (the steady state),
and the tensor pipe's use: the TFLOPS over the dense fp16 peak at that clock
(``132 SMs x 4096 FLOP a clock``). Under the 700 W cap the clock, not the schedule, is then
what separates two kernels that use the pipe equally well.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

FLOP_PER_CLOCK_SM = 4096  # dense fp16/bf16 WGMMA: 1024 FMA a clock an SM on Hopper
QUERY = "timestamp,clocks.sm,power.draw,clocks_event_reasons.active"


def parse_value(text: str):
    """A config value: an int where it reads as one, else the text."""
    try:
        return int(text)
    except ValueError:
        return text


def sampler(path: Path) -> subprocess.Popen:
    """``nvidia-smi`` writing a CSV line every 100 ms to ``path`` until terminated."""
    f = path.open("w")
    cmd = ["nvidia-smi", f"--query-gpu={QUERY}", "--format=csv,noheader,nounits", "-lms", "100"]
    return subprocess.Popen(cmd, stdout=f, stderr=subprocess.DEVNULL)


def read_samples(path: Path) -> list[tuple[float, float, float, str]]:
    """(unix time, SM MHz, W, reasons) of each CSV line."""
    out = []
    for line in path.read_text().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 4:
            continue
        try:
            stamp = time.mktime(time.strptime(parts[0].split(".")[0], "%Y/%m/%d %H:%M:%S"))
            frac = float("0." + parts[0].split(".")[1]) if "." in parts[0] else 0.0
            out.append((stamp + frac, float(parts[1]), float(parts[2]), parts[3]))
        except ValueError:
            continue
    return out


def phase(torch, fn, seconds: float) -> tuple[float, int, float, float]:
    """Launch ``fn`` back to back for about ``seconds``: (ms a launch, launches, start, end)
    with the wall times as unix seconds (for the samples)."""
    start_ev, end_ev = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    fn()
    torch.cuda.synchronize()
    t0 = time.time()
    t_probe = time.perf_counter()
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    per = max((time.perf_counter() - t_probe) / 5, 1e-5)
    n = max(int(seconds / per), 10)
    start_ev.record()
    for _ in range(n):
        fn()
    end_ev.record()
    torch.cuda.synchronize()
    return start_ev.elapsed_time(end_ev) / n, n, t0, time.time()


def main(argv=None) -> int:
    """Parse the arguments, check, run the phases, print the table (and write ``--out``)."""
    import torch

    from tests.test_matmul_v7 import load_v7

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("config", nargs="*", help="K=V MatmulV7 constructor keywords")
    ap.add_argument("--shape", default="8192x8192x8192", help="MxNxK")
    ap.add_argument("--seconds", type=float, default=3.0, help="length of a phase")
    ap.add_argument("--phases", type=int, default=4, help="phases of each implementation")
    ap.add_argument("--csv", default="/tmp/power_probe.csv", help="the samples' CSV")
    ap.add_argument("--out", default=None, help="write the phases as JSON here")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("no CUDA GPU")
        return 1
    m, n, k = (int(v) for v in args.shape.split("x"))
    v7 = load_v7()
    cfg = dict(v7.MatmulV7().configs[0])
    cfg.update({key: parse_value(v) for key, v in (c.split("=", 1) for c in args.config)})
    kernel = v7.MatmulV7(**cfg)
    a = torch.randn(m, k, device="cuda", dtype=torch.float16)
    b = torch.randn(n, k, device="cuda", dtype=torch.float16)
    c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float16)
    kernel(m, n, k, a, b, c)
    torch.cuda.synchronize()
    ref = a.float() @ b.float().T
    err = ((c.float() - ref).abs().max() / ref.abs().max()).item()
    del ref
    print(f"v7 {args.shape} {cfg}: max error {err:.2e}", flush=True)
    if not err < 1e-2:
        return 1
    c2 = torch.empty_like(c)
    impls = {"cublas": lambda: torch.matmul(a, b.T, out=c2), "v7": lambda: kernel(m, n, k, a, b, c)}
    csv = Path(args.csv)
    proc = sampler(csv)
    time.sleep(0.5)
    phases = []
    try:
        for i in range(args.phases):
            for name, fn in impls.items():
                ms, launches, t0, t1 = phase(torch, fn, args.seconds)
                phases.append(dict(impl=name, round=i, ms=ms, launches=launches, t0=t0, t1=t1))
    finally:
        time.sleep(0.3)
        proc.terminate()
        proc.wait()
    samples = read_samples(csv)
    flop = 2.0 * m * n * k
    print(f"{'impl':8s} {'round':>5s} {'ms':>8s} {'TFLOPS':>8s} {'MHz':>6s} {'W':>6s} "
          f"{'pipe use':>8s} {'samples':>7s} reasons")  # fmt: skip
    for p in phases:
        mid = (p["t0"] + p["t1"]) / 2  # the second half: past the clock's first drop
        steady = [s for s in samples if mid <= s[0] <= p["t1"]]
        mhz = statistics.median(s[1] for s in steady) if steady else float("nan")
        watts = statistics.median(s[2] for s in steady) if steady else float("nan")
        reasons = sorted({s[3] for s in steady})
        tflops = flop / p["ms"] / 1e9
        peak = 132 * FLOP_PER_CLOCK_SM * mhz * 1e6 / 1e12
        p.update(tflops=tflops, mhz=mhz, watts=watts, pipe_use=tflops / peak, samples=len(steady),
                 reasons=reasons)  # fmt: skip
        print(f"{p['impl']:8s} {p['round']:5d} {p['ms']:8.4f} {tflops:8.1f} {mhz:6.0f} "
              f"{watts:6.1f} {p['pipe_use']:8.3f} {len(steady):7d} {' '.join(reasons)}")  # fmt: skip
    for name in impls:
        rows = [p for p in phases if p["impl"] == name]
        print(f"{name}: median TFLOPS {statistics.median(p['tflops'] for p in rows):.1f}, "
              f"MHz {statistics.median(p['mhz'] for p in rows):.0f}, "
              f"W {statistics.median(p['watts'] for p in rows):.0f}, "
              f"pipe use {statistics.median(p['pipe_use'] for p in rows):.3f}")  # fmt: skip
    if args.out:
        meta = dict(gpu=torch.cuda.get_device_name(), shape=args.shape, config=cfg, error=err)
        Path(args.out).write_text(json.dumps(dict(meta=meta, phases=phases), indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
