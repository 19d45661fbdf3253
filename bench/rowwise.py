"""Benchmark the row-wise kernels (softmax, layer norm, RMS norm; fp16 in/out) at HBM speed.

On a Hopper GPU with torch: ``python bench/rowwise.py [--out results.json]``. For each op and
shape (8192x8192, 4096x32000, 32768x1024 by default) it times, in the same process and in
interleaved rounds (``--rounds``, each the median of ``--reps`` CUDA-event timings, the L2
flushed by a 256 MB write before each run; the median of the rounds is reported):

* torch eager and ``torch.compile`` of the same function,
* ``dst.copy_(src)`` of the same number of bytes read and written (the HBM ceiling),
* the tilus kernel with its default constructor (tuned over its autotune space on first use)
  and, for softmax, the online variant; ``--kernels`` picks tilus labels, ``--no-compile``
  skips ``torch.compile``.

Every kernel is checked against torch in float32 first (NaN-poisoned output). It prints GB/s
(bytes read + written / time), the ratio to the copy, the config the tuner chose and the wall
time of the first call (compile + tune), then (unless ``--no-space``) every config of each
autotune space pinned and timed once more (GB/s, ratio to copy, registers a thread; refused
configs with their reason), and writes JSON to ``--out``.
``--dry-run`` needs no GPU: it runs every tilus kernel on the interpreter at a tiny ragged size
and checks it against NumPy.
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
for p in (REPO, REPO / "examples"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

SHAPES = [(8192, 8192), (4096, 32000), (32768, 1024)]
OPS = ("softmax", "layer_norm", "rms_norm")


def tilus_kernels():
    """op -> list of (label, kernel factory, argument builder from (x, w, b, y), numpy ref)."""
    import layer_norm
    import rms_norm
    import softmax

    return {
        "softmax": [
            ("tilus", softmax.Softmax, lambda x, w, b, y: (x, y), softmax.reference, ()),
            ("tilus online", softmax.OnlineSoftmax, lambda x, w, b, y: (x, y),
             softmax.reference, ()),
        ],
        "layer_norm": [
            ("tilus", layer_norm.LayerNorm, lambda x, w, b, y: (x, w, b, y),
             layer_norm.reference, ("w", "b")),
        ],
        "rms_norm": [
            ("tilus", rms_norm.RMSNorm, lambda x, w, b, y: (x, w, y), rms_norm.reference, ("w",)),
        ],
    }  # fmt: skip


def torch_fn(op, torch):
    """The torch function of ``op`` on (x, w, b) -> y."""
    F = torch.nn.functional
    if op == "softmax":
        return lambda x, w, b: torch.softmax(x, dim=-1)
    if op == "layer_norm":
        return lambda x, w, b: F.layer_norm(x, (x.shape[-1],), w, b, eps=1e-5)
    return lambda x, w, b: F.rms_norm(x, (x.shape[-1],), w, eps=1e-6)


def dry_run() -> int:
    """Every tilus kernel on the interpreter at a tiny ragged size, against NumPy."""
    import numpy as np

    import tilus

    rng = np.random.default_rng()
    m, n = 3, 300
    x = rng.standard_normal((m, n)).astype(np.float16)
    w = rng.standard_normal(n).astype(np.float16)
    b = rng.standard_normal(n).astype(np.float16)
    status = 0
    for op, entries in tilus_kernels().items():
        for label, cls, args, ref, vecs in entries:
            y = np.full((m, n), np.nan, np.float16)
            kernel = cls(**cls().configs[0])
            with tilus.option.scoped(interpret=True):
                kernel(m, n, *args(x, w, b, y))
            extra = [v.astype(np.float64) for k, v in (("w", w), ("b", b)) if k in vecs]
            want = ref(x.astype(np.float64), *extra)
            err = float(np.abs(y.astype(np.float64) - want).max() / max(1, np.abs(want).max()))
            ok = err < 1e-2 and not np.isnan(y).any()
            status |= not ok
            print(f"{op:10s} {label:13s} {m}x{n} interpreter max err {err:.1e} "
                  f"{'ok' if ok else 'FAIL'}")  # fmt: skip
    return status


def time_ms(fn, torch, flush, reps):
    """Median milliseconds of ``fn`` over ``reps`` runs, the L2 flushed before each."""
    times = []
    for _ in range(reps):
        flush.zero_()
        torch.cuda._sleep(100_000)  # the launch is queued before the start event fires
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def interleaved_rounds(runs: dict, torch, flush, rounds: int, reps: int) -> dict:
    """name -> per-round median ms of each callable of ``runs``, called once first (compiles,
    tunes), then ``rounds`` rounds in which every implementation is timed in turn."""
    for fn in runs.values():
        fn()
    torch.cuda.synchronize()
    out = {name: [] for name in runs}
    for _ in range(rounds):
        for name, fn in runs.items():
            out[name].append(time_ms(fn, torch, flush, reps))
    return out


def rotation_sets(nbytes: int, total: int = 256 << 20) -> int:
    """How many input sets of ``nbytes`` each the ``rotate`` protocol cycles through: enough
    that their bytes (at least ``total``, the flushes' size) are several L2s, and at least 2."""
    return max(2, -(-total // max(1, nbytes)))


def time_rotated_ms(fns: list, torch, reps: int) -> float:
    """Median milliseconds a call of ``fns``, callables each on its own inputs, run back to
    back with no flush (the ``rotate`` protocol: a call finds the L2 holding the other sets'
    lines, clean, as a layer of a decode loop finds the last layers'): each timed span is all
    of ``fns`` queued behind a sleep, divided by their number."""
    times = []
    for _ in range(reps):
        torch.cuda._sleep(200_000 * len(fns))  # ~100 us a call: every launch is queued first
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for fn in fns:
            fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / len(fns))
    return statistics.median(times)


def rotated_rounds(runs: dict, torch, rounds: int, reps: int) -> dict:
    """:func:`interleaved_rounds` under the ``rotate`` protocol: ``runs`` maps a name to a
    list of callables (one an input set), timed by :func:`time_rotated_ms`."""
    for fns in runs.values():
        for fn in fns:
            fn()
    torch.cuda.synchronize()
    out = {name: [] for name in runs}
    for _ in range(rounds):
        for name, fns in runs.items():
            out[name].append(time_rotated_ms(fns, torch, reps))
    return out


def winner(kernel) -> str:
    """The config the tuner chose for the last call of ``kernel`` (an InstantiatedScript)."""
    for state in getattr(kernel, "_backend_states", {}).values():  # the CUDA dispatchers
        for disp in getattr(state, "by_arch", {}).values():
            fast = getattr(getattr(disp, "tuner", None), "_fast", None)
            if fast:
                return config_text(list(fast.values())[-1].config)
    configs = getattr(kernel, "configs", None) or [{}]
    return config_text(configs[0]) if len(configs) == 1 else "?"


def config_text(cfg: dict) -> str:
    """``k=v,k=v`` of a config."""
    return ",".join(f"{k}={v}" for k, v in cfg.items())


def time_space(cls, argf, m, n, tensors, torch, flush, reps, copy_ms, ref=None):
    """Every config of ``cls``'s space pinned: rows for the per-config table (each checked
    against ``ref`` with a NaN-poisoned output first)."""
    import tilus  # noqa: F401 - tilus.compile below

    x, w, b = tensors
    out = []
    for cfg in cls().configs:
        row = dict(kernel=cls.__name__, shape=f"{m}x{n}", config=config_text(cfg))
        try:
            k = cls(**cfg)
            y = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float16)
            a = argf(x, w, b, y)
            ck = tilus.compile(k, m, n, *a)
            res = ck.resources
            row["registers"] = res.get("registers")
            row["spills"] = res.get("spill_store_bytes")
            row["nvrtc_s"] = res.get("nvrtc_seconds")
            k(m, n, *a)
            torch.cuda.synchronize()
            if ref is not None:
                err = ((y.float() - ref).abs().max() / ref.abs().max().clamp(min=1)).item()
                row["max_err"] = err
                if not err < 2e-2:
                    row["refused"] = f"WRONG: max error {err:.2e}"
                    out.append(row)
                    continue
            ms = time_ms(lambda k=k, a=a: k(m, n, *a), torch, flush, reps)
            row.update(ms=ms, gbps=4 * m * n / ms / 1e6, ratio_to_copy=copy_ms / ms)
        except Exception as e:  # noqa: BLE001 - a config that fails is listed, not fatal
            row["refused"] = f"{type(e).__name__}: {str(e).strip().splitlines()[0][-100:]}"
        out.append(row)
    return out


SPACE_HEADER = (f"{'kernel':14s} {'shape':11s} {'config':42s} {'ms':>8s} {'GB/s':>7s} "
                f"{'x copy':>6s} {'regs':>4s} {'spill':>5s} {'nvrtc s':>7s}")  # fmt: skip


def space_line(r) -> str:
    """One row of the per-config table."""
    head = f"{r['kernel']:14s} {r['shape']:11s} {r['config']:42s}"
    if "refused" in r:
        return f"{head} refused: {r['refused']}"
    return (f"{head} {r['ms']:8.4f} {r['gbps']:7.0f} {r['ratio_to_copy']:6.2f} "
            f"{r['registers'] or 0:4d} {r.get('spills') or 0:5d} {r.get('nvrtc_s') or 0:7.3f}")  # fmt: skip


def git_commit() -> str:
    """The repository's HEAD commit (or "unknown")."""
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True)
        return out.stdout.strip() or "unknown"
    except OSError:
        return "unknown"


def bench(args) -> int:
    """Check and time everything on the GPU; print the table, write the JSON."""
    import torch

    if not torch.cuda.is_available():
        print("no CUDA GPU: use --dry-run for the CPU checks")
        return 1
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    ops = args.ops.split(",")
    kernels = tilus_kernels()
    if args.kernels:
        keep = set(args.kernels.split(","))
        kernels = {op: [e for e in es if e[0] in keep] for op, es in kernels.items()}
    results, space, status = [], [], 0
    for m, n in shapes:
        x = torch.randn(m, n, device="cuda").half()
        w = torch.randn(n, device="cuda").half()
        b = torch.randn(n, device="cuda").half()
        src = torch.randn(m * n, device="cuda").half()
        dst = torch.empty_like(src)
        for op in ops:
            f = torch_fn(op, torch)
            ref = f(x.float(), w.float(), b.float())
            runs = {
                "copy": lambda d=dst, s=src: d.copy_(s),
                "torch eager": lambda f=f, t=(x, w, b): f(*t),
            }
            if args.torch_compile:
                compiled = torch.compile(f)
                runs["torch.compile"] = lambda c=compiled, t=(x, w, b): c(*t)
            chosen = {}
            for label, cls, argf, _, _ in kernels[op]:
                y = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float16)
                k = cls()
                a = argf(x, w, b, y)
                t0 = time.perf_counter()
                k(m, n, *a)  # compile + tune on first use
                torch.cuda.synchronize()
                chosen[label] = (winner(k), time.perf_counter() - t0)
                err = ((y.float() - ref).abs().max() / ref.abs().max().clamp(min=1)).item()
                if not err < 2e-2:
                    print(f"{op} {m}x{n} {label}: max error {err:.2e} FAILS")
                    status = 1
                runs[label] = lambda k=k, a=a, mn=(m, n): k(*mn, *a)
            # the warm-up call of each: torch.compile compiles there
            rounds = interleaved_rounds(runs, torch, flush, args.rounds, args.reps)
            moved = 2 * m * n * 2  # fp16 read once and written once
            copy_ms = statistics.median(rounds["copy"])
            for name, ts in rounds.items():
                ms = statistics.median(ts)
                cfg, first_s = chosen.get(name, ("", None))
                results.append(
                    dict(op=op, shape=f"{m}x{n}", impl=name, ms=ms, gbps=moved / ms / 1e6,
                         ratio_to_copy=copy_ms / ms, rounds_ms=ts, config=cfg,
                         first_call_s=first_s)
                )  # fmt: skip
            if args.live:  # print as it goes (a run cut short keeps what it measured)
                for r in results[-len(rounds) :]:
                    print(f"> {op} {r['shape']} {r['impl']}: {r['ms']:.4f} ms {r['gbps']:.0f} "
                          f"GB/s x{r['ratio_to_copy']:.2f} {r['config']} "
                          f"first {r['first_call_s'] or 0:.1f} s", flush=True)  # fmt: skip
            if args.space:
                for _label, cls, argf, _, _ in kernels[op]:
                    rows = time_space(
                        cls, argf, m, n, (x, w, b), torch, flush, args.reps, copy_ms, ref
                    )
                    space.extend(rows)
                    if args.live:
                        print("\n".join(space_line(r) for r in rows), flush=True)
    header = (f"{'op':10s} {'shape':11s} {'impl':14s} {'ms':>8s} {'GB/s':>7s} {'x copy':>6s} "
              f"{'first s':>7s}  config")  # fmt: skip
    print(header)
    print("-" * len(header))
    for r in results:
        first = f"{r['first_call_s']:7.1f}" if r["first_call_s"] is not None else " " * 7
        print(f"{r['op']:10s} {r['shape']:11s} {r['impl']:14s} {r['ms']:8.4f} "
              f"{r['gbps']:7.0f} {r['ratio_to_copy']:6.2f} {first}  {r['config']}")  # fmt: skip
    if space and not args.live:
        print(f"\nevery config pinned ({args.reps} runs each; first s: compile + tune):")
        print(SPACE_HEADER)
        for r in space:
            print(space_line(r))
    meta = dict(
        date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        gpu=torch.cuda.get_device_name(),
        commit=git_commit(),
        command=" ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        torch=torch.__version__,
    )
    if args.out:
        doc = dict(meta=meta, results=results, configs=space)
        Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
        print(f"wrote {args.out}")
    return status


def main(argv=None) -> int:
    """Parse the arguments and run the benchmark (or the CPU dry run)."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--shapes", default=",".join(f"{m}x{n}" for m, n in SHAPES))
    ap.add_argument("--ops", default=",".join(OPS))
    ap.add_argument("--rounds", type=int, default=5, help="interleaved timing rounds")
    ap.add_argument("--reps", type=int, default=20, help="timed runs per kernel per round")
    ap.add_argument("--out", default=None, help="write the results as JSON here")
    ap.add_argument("--no-space", dest="space", action="store_false",
                    help="skip timing every config of each autotune space")  # fmt: skip
    ap.add_argument("--kernels", default=None,
                    help="comma-separated tilus labels to run (default: all)")  # fmt: skip
    ap.add_argument("--no-compile", dest="torch_compile", action="store_false",
                    help="skip torch.compile")  # fmt: skip
    ap.add_argument("--live", action="store_true",
                    help="print each measurement as it is made")  # fmt: skip
    ap.add_argument("--dry-run", action="store_true", help="CPU only: check on the interpreter")
    args = ap.parse_args(argv)
    return dry_run() if args.dry_run else bench(args)


if __name__ == "__main__":
    sys.exit(main())
