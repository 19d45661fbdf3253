"""The LLM matmul suite: tuned Hopper matmul examples (V5, V6, V7) beside cuBLAS, fp16 and bf16.

``C = A @ B^T`` with ``A [M, K]``, ``B [N, K]``: 8192^3, 4096^3, the Llama-3-8B projections at
M = 4096, the Llama-3-70B projections at M = 8192, a ragged M (3000) and small M (64, 256) at
N = K = 4096 and 8192. Each kernel is built by its default constructor and tuned by its first
call (the way a user gets it), checked against ``torch.matmul`` in fp32 (fresh random inputs,
NaN-poisoned output), then timed with cuBLAS (``torch.matmul(a, b.T, out=c)``) in interleaved
rounds: each round times every kernel once (the median of ``--reps`` runs after a warm-up, the
L2 flushed before each run, no idle pause anywhere: the GPU runs back to back, as in a training
or serving loop); the result is the median of the round medians. Prints TFLOPS and the ratio to
cuBLAS per shape and the geometric mean of the ratios; writes JSON to ``$OUT/llm_shapes.json``
when ``$OUT`` is set and to ``bench/results/<YYYY-MM-DD>-h200-llm-shapes.json``.

Run on a Hopper GPU: ``python3 bench/llm_shapes.py [--dtype fp16,bf16] [--shapes NAME,...]
[--quick]``. ``--dry-run`` needs no GPU: it builds one config of each kernel for each shape
with NVRTC (a smoke test of the script and the kernels).

``--pinned v6,v7`` times, per shape, every config of those kernels pinned (``cls(**config)``,
no tuning) beside the tuned default constructor and cuBLAS, in the same interleaved rounds,
and prints per config TFLOPS, the ratio to cuBLAS, registers and spills, and the tuned kernel
against its best pinned config (the tuner's loss). The JSON goes to ``$OUT/llm_pinned.json``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
for p in (REPO, REPO / "bench", REPO / "examples" / "hopper_matmul"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

import hopper_matmul as hm  # noqa: E402 - bench helpers: time_ms, git_commit

#: name -> (M, N, K)
SHAPES = {
    "square-8192": (8192, 8192, 8192),
    "square-4096": (4096, 4096, 4096),
    "l3-8b-qkv": (4096, 6144, 4096),
    "l3-8b-o": (4096, 4096, 4096),
    "l3-8b-gate-up": (4096, 28672, 4096),
    "l3-8b-down": (4096, 4096, 14336),
    "l3-70b-qkv": (8192, 10240, 8192),
    "l3-70b-gate-up": (8192, 57344, 8192),
    "l3-70b-down": (8192, 8192, 28672),
    "ragged-m3000": (3000, 4096, 4096),
    "m64-4096": (64, 4096, 4096),
    "m64-8192": (64, 8192, 8192),
    "m256-4096": (256, 4096, 4096),
    "m256-8192": (256, 8192, 8192),
}
QUICK = ["square-8192", "l3-8b-down", "ragged-m3000", "m64-4096", "m256-8192"]


def kernels(dtype: str, only=None) -> dict:
    """name -> (kernel class, element type) for the examples that take ``dtype`` (``only``: a filter)."""
    import matmul_v5
    import matmul_v6
    import matmul_v7

    import tilus

    if dtype == "bf16":  # V5 and V6 are written for fp16 pointers
        ks = {"v7": (matmul_v7.MatmulV7BF16, tilus.bfloat16)}
    else:
        ks = {
            "v5": (matmul_v5.MatmulWGMMAV5, tilus.float16),
            "v6": (matmul_v6.MatmulWGMMAV6, tilus.float16),
            "v7": (matmul_v7.MatmulV7, tilus.float16),
        }
    return {k: v for k, v in ks.items() if only is None or k in only}


def dry_run(dtypes, names) -> int:
    """Build the first config of each kernel at each shape (NVRTC, no GPU); 0 when all built."""
    import tilus

    bad = 0
    for dtype in dtypes:
        for kname, (cls, dt) in kernels(dtype).items():
            cfg = cls().configs[0]
            for name in names:
                m, n, k = SHAPES[name]
                t0 = time.perf_counter()
                try:
                    ck = tilus.compile(cls(**cfg), m, n, k, dt, dt, dt)
                except tilus.TilusError as e:
                    bad += 1
                    print(f"{dtype} {kname} {name}: FAILED {str(e).splitlines()[0]}")
                    continue
                ck = ck[0] if isinstance(ck, list) else ck
                spills = ck.resources.get("spill_store_bytes")
                secs = time.perf_counter() - t0
                print(f"{dtype} {kname} {name}: built ({spills} spill bytes, {secs:.1f} s)")
    return 1 if bad else 0


def measure(torch, dtype: str, names, rounds: int, reps: int, only=None) -> list[dict]:
    """Check and time every kernel (``only``: a filter) and cuBLAS at each shape; one row a shape."""
    tdt = torch.float16 if dtype == "fp16" else torch.bfloat16
    flush = torch.empty(256 * 1024 * 1024, dtype=torch.uint8, device="cuda")
    ks = {name: cls() for name, (cls, _) in kernels(dtype, only).items()}  # default constructors
    rows = []
    for name in names:
        m, n, k = SHAPES[name]
        row = {"shape": name, "M": m, "N": n, "K": k, "dtype": dtype}
        row.update(ms={}, tflops={}, vs_cublas={}, rel_err={}, first_call_s={}, tuning={})
        a = torch.randn(m, k, device="cuda", dtype=tdt)
        b = torch.randn(n, k, device="cuda", dtype=tdt)
        ref = torch.matmul(a.float(), b.float().T)
        runs = {"cublas": lambda c, a=a, b=b: torch.matmul(a, b.T, out=c)}
        for kname, kern in ks.items():
            runs[kname] = lambda c, kern=kern, s=(m, n, k, a, b): kern(*s, c)
        timed = {}
        for kname, run in runs.items():
            c = torch.full((m, n), float("nan"), device="cuda", dtype=tdt)
            t0 = time.perf_counter()
            try:
                run(c)  # the first call tunes
                torch.cuda.synchronize()
            except Exception as e:  # noqa: BLE001 - report the failure, time the others
                print(f"{name} {kname}: FAILED {type(e).__name__}: {str(e).splitlines()[0]}")
                row["rel_err"][kname] = None
                continue
            row["first_call_s"][kname] = round(time.perf_counter() - t0, 2)
            bad = bool(torch.isnan(c).any())
            err = float("inf") if bad else float((c.float() - ref).abs().max() / ref.abs().max())
            row["rel_err"][kname] = None if bad else err
            if kname != "cublas":
                row["tuning"][kname] = _picked(ks[kname])
            if not err < 1e-2:
                print(f"{name} {kname}: WRONG (rel err {err})")
                continue
            timed[kname] = lambda run=run, c=c: run(c)
        del ref
        per_round = {kname: [] for kname in timed}
        for _ in range(rounds):  # interleaved: drift hits every kernel alike
            for kname, fn in timed.items():
                per_round[kname].append(hm.time_ms(fn, torch, flush, reps=reps, warmup=3))
        for kname, ts in per_round.items():
            ms = sorted(ts)[len(ts) // 2]
            row["ms"][kname] = round(ms, 4)
            row["tflops"][kname] = round(2 * m * n * k / ms / 1e9, 1)
        base = row["ms"].get("cublas")
        for kname, ms in row["ms"].items():
            if base and kname != "cublas":
                row["vs_cublas"][kname] = round(base / ms, 3)
        rows.append(row)
        print(_row_text(row), flush=True)
    return rows


def _config_text(cfg: dict) -> str:
    short = {"block_m": "m", "block_n": "n", "block_k": "k", "num_stages": "st", "swizzle": "sw",
             "split_k": "sk", "cluster_n": "cl", "partials": "p", "epilogue": "ep",
             "prefetch": "pf"}  # fmt: skip
    return " ".join(f"{short.get(k, k)}{v}" for k, v in cfg.items() if (k, v) != ("block_k", 64))


def _prebuild(cls, cfgs, shape, dt) -> list:
    """Build every pinned config at ``shape`` in threads (NVRTC runs outside the GIL), so
    the timed calls find them in the cache; each one's CompiledKernel or the error text."""
    from concurrent.futures import ThreadPoolExecutor

    import tilus

    def one(cfg):
        try:
            ck = tilus.compile(cls(**cfg), *shape, dt, dt, dt)
            return ck[0] if isinstance(ck, list) else ck
        except tilus.TilusError as e:
            return str(e).splitlines()[0]

    with ThreadPoolExecutor(max(1, min(len(cfgs), os.cpu_count() or 1))) as ex:
        return list(ex.map(one, cfgs))


def load_configs(path: str) -> dict:
    """``--configs``: a JSON file mapping shape names (or ``"*"``, every shape) to lists of
    constructor keyword dicts (configs of the space, or others: any keyword the kernel takes)."""
    data = json.loads(Path(path).read_text())
    if not isinstance(data, dict) or not all(isinstance(v, list) for v in data.values()):
        raise SystemExit(f"--configs {path}: expected {{shape: [config, ...]}}")
    return data


def measure_pinned(torch, dtype: str, names, knames, rounds: int, reps: int, configs=None,
                   tuned_too: bool = True) -> list[dict]:  # fmt: skip
    """Per shape: cuBLAS, each kernel of ``knames`` tuned (default constructor; not when
    ``tuned_too`` is false) and each of its configs pinned (or those ``configs`` lists for the
    shape), checked, then timed in interleaved rounds; one row per shape."""
    tdt = torch.float16 if dtype == "fp16" else torch.bfloat16
    flush = torch.empty(256 * 1024 * 1024, dtype=torch.uint8, device="cuda")
    avail = kernels(dtype)
    rows = []
    for name in names:
        m, n, k = SHAPES[name]
        a = torch.randn(m, k, device="cuda", dtype=tdt)
        b = torch.randn(n, k, device="cuda", dtype=tdt)
        ref = torch.matmul(a.float(), b.float().T)
        runs = {"cublas": (lambda c, a=a, b=b: torch.matmul(a, b.T, out=c), None, None)}
        tuned = {}
        for kname in knames:
            if kname not in avail:
                continue
            cls, dt = avail[kname]
            if tuned_too:
                tuned[kname] = cls()
                runs[f"{kname} tuned"] = (
                    lambda c, kern=tuned[kname], s=(m, n, k, a, b): kern(*s, c),
                    None,
                    None,
                )
            cfgs = cls().configs
            if configs is not None:
                cfgs = configs.get(name, configs.get("*", []))
            t0 = time.perf_counter()
            built = _prebuild(cls, cfgs, (m, n, k), dt)
            print(f"{dtype} {name} {kname}: {len(cfgs)} pinned configs built in "
                  f"{time.perf_counter() - t0:.1f} s", flush=True)  # fmt: skip
            for i, (cfg, ck) in enumerate(zip(cfgs, built)):
                kern = cls(**cfg)
                runs[f"{kname} #{i}"] = (lambda c, kern=kern, s=(m, n, k, a, b): kern(*s, c),
                                         cfg, ck)  # fmt: skip
        timed, info = {}, {}
        for label, (run, cfg, ck) in runs.items():
            res = getattr(ck, "resources", {}) or {}
            info[label] = {"config": cfg, "registers": res.get("registers"),
                           "spill_bytes": res.get("spill_store_bytes")}  # fmt: skip
            if isinstance(ck, str):
                info[label]["error"] = ck
                continue
            c = torch.full((m, n), float("nan"), device="cuda", dtype=tdt)
            try:
                run(c)  # the tuned kernels tune here
                torch.cuda.synchronize()
            except Exception as e:  # noqa: BLE001 - report it, time the others
                info[label]["error"] = f"{type(e).__name__}: {str(e).splitlines()[0]}"
                continue
            bad = bool(torch.isnan(c).any())
            err = float("inf") if bad else float((c.float() - ref).abs().max() / ref.abs().max())
            if not err < 1e-2:
                info[label]["error"] = f"wrong (rel err {err})"
                continue
            timed[label] = lambda run=run, c=c: run(c)
        for kname, kern in tuned.items():
            picked = _picked(kern)
            info[f"{kname} tuned"]["picked"] = picked
            if picked:
                print(f"{dtype} {name} {kname} tuning: {picked}", flush=True)
        del ref
        per_round = {label: [] for label in timed}
        for _ in range(rounds):
            for label, fn in timed.items():
                per_round[label].append(hm.time_ms(fn, torch, flush, reps=reps, warmup=3))
        for label, ts in per_round.items():
            info[label]["ms"] = sorted(ts)[len(ts) // 2]
        base = info["cublas"].get("ms")
        print(f"\n{dtype} {name} {m}x{n}x{k}")
        for label, d in info.items():
            if "ms" not in d:
                print(f"  {label:10s} {d.get('error')}", flush=True)
                continue
            d["tflops"] = round(2 * m * n * k / d["ms"] / 1e9, 1)
            d["vs_cublas"] = round(base / d["ms"], 3) if base else None
            cfg = _config_text(d["config"]) if d["config"] else ""
            regs = f"{d['registers']} regs {d['spill_bytes']} spill" if d["registers"] else ""
            print(f"  {label:10s} {d['ms']:8.4f} ms {d['tflops']:6.1f} TFLOPS "
                  f"{d['vs_cublas'] or 0:6.3f}x  {cfg:28s} {regs}", flush=True)  # fmt: skip
        row = {"shape": name, "M": m, "N": n, "K": k, "dtype": dtype, "runs": info}
        for kname in tuned:
            pinned = {lb: d for lb, d in info.items() if lb.startswith(f"{kname} #") and "ms" in d}
            t = info[f"{kname} tuned"].get("ms")
            if pinned and t:
                best = min(pinned, key=lambda lb: pinned[lb]["ms"])
                ratio = pinned[best]["ms"] / t
                row[f"{kname} tuned vs best pinned"] = round(ratio, 3)
                print(f"  {kname}: tuned {t:.4f} ms vs best pinned {best} "
                      f"({_config_text(pinned[best]['config'])}) {pinned[best]['ms']:.4f} ms: "
                      f"{ratio:.3f}x", flush=True)  # fmt: skip
        rows.append(row)
    return rows


def _picked(kernel):
    """What the last tuning of ``kernel`` reported (winner, failures, seconds); None when the
    winner came from the dispatch cache."""
    from tilus.backends.cuda import launch

    try:
        disp = launch.dispatcher(kernel)
        tuning, disp.last_tuning = disp.last_tuning, None
    except Exception:  # noqa: BLE001 - informative only
        return None
    return {x: v for x, v in tuning.items() if x != "build_pids"} if tuning else None


def _row_text(row) -> str:
    parts = [f"{row['dtype']} {row['shape']:15s} {row['M']}x{row['N']}x{row['K']}"]
    for kname, tf in row["tflops"].items():
        ratio = row["vs_cublas"].get(kname)
        parts.append(f"{kname} {tf:6.1f}" + (f" ({ratio:.3f}x)" if ratio else ""))
    return "  ".join(parts)


def geomeans(rows) -> dict:
    """(dtype, kernel) -> geometric mean of the ratios to cuBLAS, and the lowest ratio."""
    out: dict = {}
    for row in rows:
        for kname, r in row["vs_cublas"].items():
            out.setdefault(f"{row['dtype']} {kname}", []).append(r)
    return {
        key: {
            "geomean": round(math.exp(sum(map(math.log, rs)) / len(rs)), 3),
            "min": min(rs),
            "shapes": len(rs),
        }
        for key, rs in out.items()
    }


def main(argv=None) -> int:
    """Parse the arguments, measure (or only build), print the table, write the JSON."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dtype", default="fp16,bf16", help="comma-separated: fp16, bf16")
    ap.add_argument("--shapes", default=None, help=f"comma-separated of: {', '.join(SHAPES)}")
    ap.add_argument("--quick", action="store_true", help=f"shapes {QUICK}, 3 rounds")
    ap.add_argument("--rounds", type=int, default=7, help="interleaved timing rounds")
    ap.add_argument("--reps", type=int, default=10, help="timed runs per kernel per round")
    ap.add_argument("--dry-run", action="store_true", help="only build (no GPU needed)")
    ap.add_argument(
        "--pinned", default=None, help="comma-separated kernels (v5, v6, v7): every config pinned"
    )
    ap.add_argument(
        "--configs", default=None,
        help="with --pinned: JSON file {shape or '*': [constructor kwargs, ...]} to pin instead",
    )  # fmt: skip
    ap.add_argument("--kernels", default=None, help="comma-separated (v5, v6, v7): only these")
    ap.add_argument("--no-tuned", action="store_true", help="with --pinned: skip the tuned kernel")
    args = ap.parse_args(argv)
    dtypes = [d.strip() for d in args.dtype.split(",") if d.strip()]
    if any(d not in ("fp16", "bf16") for d in dtypes):
        ap.error(f"--dtype takes fp16 and bf16, got {args.dtype!r}")
    names = QUICK if args.quick else list(SHAPES)
    if args.shapes:
        names = [s.strip() for s in args.shapes.split(",") if s.strip()]
        unknown = [s for s in names if s not in SHAPES]
        if unknown:
            ap.error(f"unknown shapes {unknown}; known: {', '.join(SHAPES)}")
    if args.dry_run:
        return dry_run(dtypes, names)
    rounds = 3 if args.quick else args.rounds
    import torch

    from tilus.runtime.nvrtc import nvrtc_version

    if args.pinned:
        knames = [x.strip() for x in args.pinned.split(",") if x.strip()]
        cfgs = load_configs(args.configs) if args.configs else None
        rows = [r for d in dtypes for r in measure_pinned(torch, d, names, knames, rounds,
                                                          args.reps, cfgs, not args.no_tuned)]  # fmt: skip
        text = json.dumps({"git_commit": hm.git_commit(), "results": rows}, indent=1)
        if os.environ.get("OUT"):
            Path(os.environ["OUT"], "llm_pinned.json").write_text(text)
        return 0

    only = {x.strip() for x in args.kernels.split(",")} if args.kernels else None
    rows = []
    for dtype in dtypes:
        rows += measure(torch, dtype, names, rounds, args.reps, only)
    summary = geomeans(rows)
    out = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "gpu": torch.cuda.get_device_properties(0).name,
        "git_commit": hm.git_commit(),
        "command": "python3 bench/llm_shapes.py " + " ".join(argv or sys.argv[1:]),
        "torch": torch.__version__,
        "nvrtc": ".".join(map(str, nvrtc_version())),
        "timing": (
            f"{rounds} interleaved rounds over cuBLAS and the kernels, no idle pauses; per round "
            f"CUDA events, median of {args.reps} runs after 3 warm-ups, a 256 MB L2 flush and a "
            "short GPU sleep (hides host launch time) before each; reported: median of the "
            "round medians. Kernels: default constructors, tuned by their first call"
        ),
        "results": rows,
        "summary": summary,
    }
    text = json.dumps(out, indent=1)
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "llm_shapes.json").write_text(text)
    try:
        (REPO / "bench" / "results").mkdir(parents=True, exist_ok=True)
        day = out["date"][:10]
        (REPO / "bench" / "results" / f"{day}-h200-llm-shapes.json").write_text(text)
    except OSError:
        pass
    print("\nshape            dtype  kernel  TFLOPS   vs cuBLAS")
    for row in rows:
        for kname, tf in row["tflops"].items():
            ratio = row["vs_cublas"].get(kname)
            print(
                f"{row['shape']:16s} {row['dtype']:5s}  {kname:6s} {tf:7.1f}   "
                + (f"{ratio:.3f}x" if ratio else "-")
            )
    for key, s in summary.items():
        print(f"geo-mean {key}: {s['geomean']:.3f}x over {s['shapes']} shapes (min {s['min']})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
