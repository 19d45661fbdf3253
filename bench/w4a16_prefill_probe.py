"""Time pinned configs of the persistent W4A16 prefill kernel beside fp16 cuBLAS (H200).

``python bench/w4a16_prefill_probe.py [--rounds 3] [--reps 5] [--shapes 4096x8192x8192,...]
[--configs space|probe] [--flush dirty|clean] [--ms 1024,2048] [--clusters all|only|none]
[--no-entry]``: every config is compiled up front in worker processes, checked against torch
(NaN-poisoned output, max error relative to the largest reference value), then timed in
interleaved rounds with the L2 flushed before each run, beside ``torch.matmul(x, w_fp16.T)``,
the pipelined kernel's tuned winner (pinned) and the user entry ``matmul_wx_a16`` on prepared
weights (its default, tuned on first use); ``--ms`` times the same builds at smaller M too
(where the entry should switch kernels). Each shape's table gives the median of the rounds'
medians and the ratio to cuBLAS.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
for p in (REPO, REPO / "bench", REPO / "examples" / "quantized"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from l2_flush import make_flush  # noqa: E402 - the L2 flush protocols
from rowwise import time_ms  # noqa: E402 - the shared timing helper

SHAPES = "4096x8192x8192,4096x28672x4096"
#: configs beside the default space (round A on an H200, 2026-12-02: the TMA epilogue with
#: every thread freeing its slot ran 0.81x cuBLAS at both shapes; 128-K slots in clusters of 2
#: 0.77 / 0.74), each timed on plain and on prepacked weights
PROBE = [
    dict(block_m=256, num_stages=4, swizzle=4, epilogue="tma", thread_arrive=True),
    dict(block_m=256, num_stages=4, swizzle=8, epilogue="tma", thread_arrive=True),
    dict(block_m=256, block_k=128, num_stages=2, swizzle=4, epilogue="tma", thread_arrive=True),
    dict(block_m=256, block_k=128, num_stages=3, swizzle=4, thread_arrive=False, cluster=2),
    dict(block_m=256, num_stages=6, swizzle=4, thread_arrive=False, lag=1),
]
#: the pipelined kernel's winner at M = 4096 (bench/results, 2026-12-02), pinned
PIPE_BEST = dict(block_m=256, consumers=2, num_stages=3, split_k=1, block_k=128, scale_w=True,
                 regs_to_consumers=True, overlap=False)  # fmt: skip


def _compile(job) -> str | None:
    """Build one pinned prefill config into the cache (in a worker); None, or why it failed."""
    import matmul_wx_a16_prefill as pf

    import tilus

    cfg, (m, n, k) = job
    f16, u8 = tilus.float16, tilus.uint8
    try:
        tilus.compile(pf.MatmulWxA16Prefill(tilus.uint4b, 128, **cfg), m, n, k, f16, u8, f16, f16)
    except Exception as e:  # noqa: BLE001 - the table reports the failure
        return f"{type(e).__name__}: {str(e)[:300]}"
    return None


#: short names of the constructor arguments in the table
SHORT = {"block_m": "bm", "block_k": "bk", "num_stages": "st", "swizzle": "sw", "epilogue": "",
         "thread_arrive": "ta", "cluster": "cl", "lag": "lag", "prepacked": "pp"}  # fmt: skip


def _text(cfg: dict) -> str:
    """``bm256 bk64 st6 sw4 direct ta1 cl1 lag0 pp1`` of a config."""
    return " ".join(f"{SHORT.get(k, k)}{int(v) if isinstance(v, bool) else v}"
                    for k, v in cfg.items())  # fmt: skip


def _probe_shape(torch, args, flush, shape, configs, built):
    """Check and time every config (and cuBLAS, the pipe kernel's best, the entry) at one
    shape; (table rows, whether every check passed)."""
    import matmul_wx_a16 as ex
    import matmul_wx_a16_pipe as pp
    import matmul_wx_a16_prefill as pf
    from rowwise import winner

    import tilus

    m, n, k = shape
    tag = f"{m}x{n}x{k}"
    x, w, s, w16 = ex.torch_problem(torch, m, n, k, 128)
    weights = ex.prepare_weights(w, s, wdtype=tilus.uint4b, group=128)
    wp = pf.prepack_torch(torch, w)  # the prefill kernel's byte order
    ref = torch.matmul(x.float(), w16.float().T)
    y = torch.full((m, n), float("nan"), dtype=torch.float16, device="cuda")

    def check(name) -> bool:
        err = ((y.float() - ref).abs().max() / ref.abs().max()).item()
        good = not torch.isnan(y).any().item() and err < 1e-2
        print(f"{tag} {name}: max rel err {err:.2e} {'ok' if good else 'FAIL'}", flush=True)
        return good

    runs = {"cuBLAS fp16": lambda: torch.matmul(x, w16.T)}
    table, ok_all = [], True
    cands = [(f"prefill {_text(c)}", pf.MatmulWxA16Prefill(tilus.uint4b, 128, **c), i,
              wp if c.get("prepacked") else w) for i, c in enumerate(configs)]  # fmt: skip
    if args.clusters != "only":
        pipe = pp.MatmulWxA16Pipe(tilus.uint4b, 128, **PIPE_BEST)
        cands.append(("pipe best (pinned)", pipe, -1, w))
    for name, kern, i, wb in cands:
        why = built.get((i, shape))
        if why:
            print(f"{tag} {name}: build failed: {why}", flush=True)
            table.append((tag, name, "build failed", "", ""))
            continue
        y.fill_(float("nan"))
        try:
            kern(m, n, k, x, wb, s, y)
            torch.cuda.synchronize()
        except Exception as e:  # noqa: BLE001 - reported in the table
            print(f"{tag} {name}: run failed: {e}", flush=True)
            table.append((tag, name, "run failed", "", ""))
            ok_all = False
            continue
        good = check(name)
        ok_all &= good
        if good:
            runs[name] = lambda kern=kern, wb=wb: kern(m, n, k, x, wb, s, y)
    if not args.no_entry:
        y.fill_(float("nan"))
        ex.matmul_wx_a16(x, weights, out=y)  # compile + tune the default space
        kernel, _ = ex.pick_kernel(m, weights)
        entry = f"entry {kernel.script_cls.__name__} {winner(kernel)}"
        good = check(entry)
        ok_all &= good
        if good:
            runs[entry] = lambda: ex.matmul_wx_a16(x, weights, out=y)
    table += _timed(torch, args, flush, tag, 2 * m * n * k, runs)
    # smaller M on the same builds (M is a runtime argument): where the prefill kernel wins
    for m2 in [int(v) for v in args.ms.split(",") if v]:
        x2, y2 = x[:m2], y[:m2]
        runs2 = {"cuBLAS fp16": lambda x2=x2: torch.matmul(x2, w16.T)}
        kernels = {c[0]: (c[1], c[3]) for c in cands}
        for name in runs:  # the kernels that passed their check
            if name in kernels:
                kern, wb = kernels[name]
                runs2[name] = lambda kern=kern, a=(m2, x2, wb, y2): kern(a[0], n, k, a[1], a[2],
                                                                       s, a[3])  # fmt: skip
        table += _timed(torch, args, flush, f"{m2}x{n}x{k}", 2 * m2 * n * k, runs2)
    return table, ok_all


def _timed(torch, args, flush, tag: str, flop: int, runs: dict) -> list:
    """Table rows of ``runs`` timed in ``args.rounds`` interleaved rounds (every impl once a
    round), the median of the rounds' medians, the ratio to the cuBLAS row."""
    rounds = {name: [] for name in runs}
    for _ in range(args.rounds):
        for name, fn in runs.items():
            rounds[name].append(time_ms(fn, torch, flush, args.reps))
    base = statistics.median(rounds["cuBLAS fp16"])
    rows = []
    for name, ts in rounds.items():
        ms = statistics.median(ts)
        rows.append((tag, name, f"{ms:.4f}", f"{flop / ms / 1e9:.0f}", f"{base / ms:.3f}"))
    return rows


def main(argv=None) -> int:
    """Compile, check and time every config; print the table; 0 if every check passed."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--shapes", default=SHAPES)
    ap.add_argument("--configs", default="probe", choices=["space", "probe"])
    ap.add_argument("--flush", default="dirty")
    ap.add_argument("--no-entry", action="store_true", help="leave the tuned entry row out")
    ap.add_argument("--ms", default="", help="smaller M also timed (comma-separated)")
    ap.add_argument(
        "--clusters",
        default="all",
        choices=["all", "only", "none"],
        help="keep the cluster configs, only them, or none (a hang loses less)",
    )
    args = ap.parse_args(argv)

    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    import matmul_wx_a16_prefill as pf
    import torch

    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    extra = [pf.pinned(**c) for c in PROBE] if args.configs == "probe" else []
    # every config on the plain bytes and on the prefill kernel's order (prepack_torch)
    configs = [dict(c, prepacked=pp) for c in pf.MatmulWxA16Prefill().configs + extra
               for pp in (False, True)]  # fmt: skip
    if args.clusters != "all":
        configs = [c for c in configs if (c["cluster"] > 1) == (args.clusters == "only")]
    with ProcessPoolExecutor(8, mp_context=mp.get_context("spawn")) as pool:
        futs = {
            (i, s): pool.submit(_compile, (c, s)) for s in shapes for i, c in enumerate(configs)
        }
        built = {key: f.result() for key, f in futs.items()}
    flush = make_flush(torch, args.flush)
    ok_all = True
    for m, n, k in shapes:
        rows, ok = _probe_shape(torch, args, flush, (m, n, k), configs, built)
        ok_all &= ok
        torch.cuda.empty_cache()
        print(f"\n{'shape':16s} {'impl':84s} {'ms':>8s} {'TFLOPS':>7s} {'ratio':>6s}")
        for row in rows:  # each shape's table as soon as it is timed
            print(f"{row[0]:16s} {row[1]:84s} {row[2]:>8s} {row[3]:>7s} {row[4]:>6s}", flush=True)
    return 0 if ok_all else 1


if __name__ == "__main__":
    sys.exit(main())
