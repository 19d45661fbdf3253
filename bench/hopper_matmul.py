"""Benchmark the seed Hopper matmuls (V2 pinned configs, V4) on the CUDA backend beside cuBLAS.

Run on a Hopper GPU with torch: ``python3 bench/hopper_matmul.py [--sizes 8192,4096]``. The seed
kernels are imported from ``$TILUS_SEED_KERNELS``, else ``../shared/seed_kernels`` beside the
repository, else ``.seed/`` inside it. Each kernel is checked against ``torch.matmul`` in fp32
(NaN-poisoned output, fresh random inputs) before it is timed with CUDA events, in interleaved
rounds over all kernels (``--rounds``, each the median of ``--reps`` runs, the L2 flushed by a
256 MB write before each run; the median round is reported with the spread). Prints a table; writes
JSON to ``$OUT/hopper_matmul.json`` when ``$OUT`` is set and to
``bench/results/<YYYY-MM-DD>-h200.json``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

V2_CONFIGS = [
    dict(num_stages=s, block_m=bm, block_n=bn, block_k=64)
    for (bm, bn) in ((128, 128), (64, 128), (128, 256))
    for s in (2, 3, 4)
]


def seed_dir() -> Path:
    """Where the seed kernels are."""
    for p in (
        os.environ.get("TILUS_SEED_KERNELS"),
        REPO.parent / "shared" / "seed_kernels",
        REPO / ".seed",
    ):
        if p and Path(p).is_dir():
            return Path(p)
    raise SystemExit("seed kernels not found; set TILUS_SEED_KERNELS")


def time_ms(fn, torch, flush, reps=20, warmup=5) -> float:
    """Median milliseconds of ``fn`` with the L2 flushed before each run."""
    for _ in range(warmup):
        fn()
    events = []
    for _ in range(reps):
        flush.zero_()
        # Keep the GPU busy while the host enqueues the launch, so host-side launch overhead
        # is not timed (the start event fires when the sleep ends, the kernel already queued).
        torch.cuda._sleep(200_000)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        events.append((start, end))
    torch.cuda.synchronize()
    times = sorted(s.elapsed_time(e) for s, e in events)
    return times[len(times) // 2]


def rel_error(run, torch, m, n, k) -> float:
    """max |C - ref| / max |ref| on fresh inputs (inf when NaN stays in the output)."""
    a = torch.randn(m, k, device="cuda", dtype=torch.float16)
    b = torch.randn(n, k, device="cuda", dtype=torch.float16)
    c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float16)
    run(a, b, c)
    torch.cuda.synchronize()
    ref = torch.matmul(a.float(), b.float().T)
    if torch.isnan(c).any():
        return float("inf")
    return float((c.float() - ref).abs().max() / ref.abs().max())


def example_variants() -> dict:
    """Our V3-V6 examples with pinned configs (bench/tune_and_overhead.py times tuned ones)."""
    import importlib.util

    folder = REPO / "examples" / "hopper_matmul"
    names = ("matmul_v4", "matmul_v5", "matmul_v6", "harness")
    saved = {k: sys.modules.pop(k) for k in names if k in sys.modules}
    sys.path.insert(0, str(folder))
    mods = {}
    try:
        for v in [f"matmul_v{i}" for i in range(8)]:
            spec = importlib.util.spec_from_file_location(f"bench_ex_{v}", folder / f"{v}.py")
            mods[v] = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mods[v])
    finally:
        sys.path.remove(str(folder))
        for k in names:
            sys.modules.pop(k, None)
        sys.modules.update(saved)
    out = {}
    # the first steps of the tutorial: no pipeline (V0 TMA + mma, V1 WGMMA), then stages (V2)
    for bm, bn in ((128, 128),):
        for bk in (32, 64):
            out[f"ex_v0_{bm}x{bn}x{bk}"] = mods["matmul_v0"].MatmulTMA(
                block_m=bm, block_n=bn, block_k=bk
            )
    for bm, bn in ((128, 128), (128, 256)):
        out[f"ex_v1_{bm}x{bn}x64"] = mods["matmul_v1"].MatmulWGMMA(
            block_m=bm, block_n=bn, block_k=64
        )
    for s in (3, 4):
        out[f"ex_v2_128x128x64_s{s}"] = mods["matmul_v2"].MatmulWGMMAV2(
            num_stages=s, block_m=128, block_n=128, block_k=64
        )
    for s in (3, 4):
        out[f"ex_v3_128x128x64_s{s}"] = mods["matmul_v3"].MatmulWGMMAV3(
            num_stages=s, block_m=128, block_n=128, block_k=64
        )
    # V5's shared C tiles leave room for 3 stages of 128 x 256 x 64 (V4: 4)
    for v, cls, stages in (
        ("v4", mods["matmul_v4"].MatmulWGMMAV4, (3, 4)),
        ("v5", mods["matmul_v5"].MatmulWGMMAV5, (2, 3)),
    ):
        for s in stages:
            out[f"ex_{v}_128x256x64_s{s}"] = cls(
                num_stages=s, block_m=128, block_n=256, block_k=64, swizzle=4
            )
        s = stages[-1]
        out[f"ex_{v}_128x256x64_s{s}_sw8"] = cls(
            num_stages=s, block_m=128, block_n=256, block_k=64, swizzle=8
        )
    out["ex_v6_128x256x64_s3_sw8"] = mods["matmul_v6"].MatmulWGMMAV6(
        num_stages=3, block_m=128, block_n=256, block_k=64, swizzle=8
    )
    # V7: ping-pong consumer groups, each on whole 128 x 128 (or 64 x 256) tiles
    for bm, bn, s in ((128, 128, 4), (128, 128, 5), (64, 256, 4)):
        out[f"ex_v7_{bm}x{bn}x64_s{s}_sw8"] = mods["matmul_v7"].MatmulV7(
            num_stages=s,
            block_m=bm,
            block_n=bn,
            block_k=64,
            swizzle=8,
            split_k=1,
            cluster_n=1,
            coop=0,
            epilogue="tma",
        )
    return out


def git_commit() -> str:
    """The commit, from $TILUS_GIT_COMMIT or git."""
    env = os.environ.get("TILUS_GIT_COMMIT")
    if env:
        return env
    try:
        return subprocess.check_output(["git", "rev-parse", "HEAD"], cwd=REPO, text=True).strip()
    except Exception:  # noqa: BLE001 - no git on the GPU machine
        return "unknown"


def main(argv=None) -> int:
    """Compile, check and time; print the table and write the JSON."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sizes", default="8192,4096", help="comma-separated square sizes")
    ap.add_argument("--no-v4", action="store_true")
    ap.add_argument("--no-v2", action="store_true")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved timing rounds")
    ap.add_argument("--reps", type=int, default=10, help="timed runs per kernel per round")
    ap.add_argument(
        "--cooldown",
        type=float,
        default=0.0,
        help="seconds the GPU idles before each kernel's timing (each then starts from the same "
        "power state; a sustained load makes the H200 hit its power cap and lower its clocks)",
    )
    ap.add_argument(
        "--examples",
        action="store_true",
        help="also our examples/hopper_matmul V3, V4, V5 with pinned configs",
    )
    args = ap.parse_args(argv)
    import torch

    import tilus
    from tilus.runtime.nvrtc import nvrtc_version

    sys.path.insert(0, str(seed_dir()))
    from matmul_v2 import MatmulWGMMAV2
    from matmul_v4 import MatmulWGMMAV4

    sizes = [int(s) for s in args.sizes.split(",")]
    f16 = tilus.float16
    variants = {}  # name -> kernel
    compile_info = {}
    for cfg in [] if args.no_v2 else V2_CONFIGS:
        name = "v2_{block_m}x{block_n}x{block_k}_s{num_stages}".format(**cfg)
        kernel = MatmulWGMMAV2(**cfg)
        try:
            ck = tilus.compile(kernel, sizes[0], sizes[0], sizes[0], f16, f16, f16)
        except tilus.TilusCompileError as e:
            compile_info[name] = {"error": e.msg.split("\n")[0]}
            print(f"{name}: does not compile: {e.msg.splitlines()[0]}", flush=True)
            continue
        compile_info[name] = {
            "nvrtc_seconds": round(ck.compile_seconds, 3),
            "cached": ck.cached,
            "resources": ck.resources,
            "smem_bytes": ck.kernel.smem_bytes,
        }
        variants[name] = kernel
    if not args.no_v4:
        kernel = MatmulWGMMAV4()
        try:
            ck = tilus.compile(kernel, sizes[0], sizes[0], sizes[0], f16, f16, f16)
            compile_info["v4"] = {
                "nvrtc_seconds": round(ck.compile_seconds, 3),
                "cached": ck.cached,
                "resources": ck.resources,
                "smem_bytes": ck.kernel.smem_bytes,
                "config": ck.config,
            }
            variants["v4"] = kernel
        except tilus.TilusCompileError as e:
            compile_info["v4"] = {"error": e.msg.split("\n")[0]}
    if args.examples:
        for name, kernel in example_variants().items():
            try:
                ck = tilus.compile(kernel, sizes[0], sizes[0], sizes[0], f16, f16, f16)
                compile_info[name] = {
                    "nvrtc_seconds": round(ck.compile_seconds, 3),
                    "cached": ck.cached,
                    "resources": ck.resources,
                    "smem_bytes": ck.kernel.smem_bytes,
                    "config": ck.config,
                }
                variants[name] = kernel
            except tilus.TilusCompileError as e:
                compile_info[name] = {"error": e.msg.split("\n")[0]}
                print(f"{name}: does not compile: {e.msg.splitlines()[0]}", flush=True)
    flush = torch.empty(256 * 1024 * 1024, dtype=torch.uint8, device="cuda")
    results = []
    for size in sizes:
        m = n = k = size
        row = {"M": m, "N": n, "K": k, "ms": {}, "tflops": {}, "rel_err": {}, "vs_cublas": {}}
        a = torch.randn(m, k, device="cuda", dtype=torch.float16)
        b = torch.randn(n, k, device="cuda", dtype=torch.float16)
        c = torch.empty(m, n, device="cuda", dtype=torch.float16)
        runs = {"cublas": lambda a_, b_, c_: torch.matmul(a_, b_.T, out=c_)}
        for name, kernel in variants.items():
            runs[name] = lambda a_, b_, c_, kern=kernel, s=size: kern(s, s, s, a_, b_, c_)
        timed = {}
        for name, run in runs.items():
            t0 = time.perf_counter()
            err = rel_error(run, torch, m, n, k)  # also compiles for this size (first call)
            row["rel_err"][name] = err if err != float("inf") else None
            if not err < 5e-3:
                print(f"{name} at {size}: WRONG (rel err {err})", flush=True)
                continue
            timed[name] = lambda run=run, a=a, b=b, c=c: run(a, b, c)
            print(f"{size}: {name:24s} err {err:.1e}, first call {time.perf_counter() - t0:.1f} s")
        # interleaved rounds: each round times every kernel once (median of `reps`), so clock
        # and thermal drift hit all kernels alike; the result is the median over rounds and
        # the spread (max/min of the round medians) says how much to trust a difference
        rounds: dict = {name: [] for name in timed}
        for _ in range(args.rounds):
            for name, fn in timed.items():
                if args.cooldown:
                    torch.cuda.synchronize()
                    time.sleep(args.cooldown)
                rounds[name].append(time_ms(fn, torch, flush, reps=args.reps, warmup=2))
        row["spread"] = {}
        for name, ts in rounds.items():
            ts.sort()
            ms = ts[len(ts) // 2]
            row["ms"][name] = round(ms, 4)
            row["tflops"][name] = round(2 * m * n * k / ms / 1e9, 1)
            row["spread"][name] = round(ts[-1] / ts[0], 4)
        base = row["ms"].get("cublas")
        for name, ms in row["ms"].items():
            if base:
                row["vs_cublas"][name] = round(base / ms, 3)
        v2 = {k_: v for k_, v in row["ms"].items() if k_.startswith("v2")}
        if v2:
            best = min(v2, key=v2.get)
            row["best_v2"] = best
        results.append(row)
    props = torch.cuda.get_device_properties(0)
    out = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "gpu": props.name,
        "git_commit": git_commit(),
        "command": os.environ.get("TILUS_BENCH_COMMAND", "python3 bench/hopper_matmul.py"),
        "torch": torch.__version__,
        "nvrtc": ".".join(map(str, nvrtc_version())),
        "timing": (
            f"{args.rounds} interleaved rounds over all kernels, {args.cooldown} s idle before "
            f"each kernel's timing; per round CUDA events, median "
            f"of {args.reps} after 2 warm-ups, a 256 MB L2 flush and a ~0.1 ms GPU sleep (hides "
            "host launch overhead) before each; reported: median of the round medians, spread "
            "= slowest/fastest round"
        ),
        "config_choice": "pinned configs (so each row is one config); V4: its one-config space",
        "compile": compile_info,
        "results": results,
    }
    text = json.dumps(out, indent=1)
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "hopper_matmul.json").write_text(text)
    day = out["date"][:10]
    try:
        (REPO / "bench" / "results").mkdir(parents=True, exist_ok=True)
        (REPO / "bench" / "results" / f"{day}-h200.json").write_text(text)
    except OSError:
        pass
    print("\nsize   kernel                    ms      TFLOPS  vs cuBLAS  spread")
    for row in results:
        for name, ms in sorted(row["ms"].items(), key=lambda x: x[1]):
            print(
                f"{row['M']:<6d} {name:24s} {ms:7.3f} {row['tflops'][name]:8.1f}  "
                f"{row['vs_cublas'].get(name, 0):.3f}x   {row['spread'][name]:.3f}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
