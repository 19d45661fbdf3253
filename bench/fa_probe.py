"""Time pinned FlashAttention forward configs beside SDPA cuDNN (interleaved rounds, L2 flushed).

On a Hopper GPU: ``python bench/fa_probe.py [--shapes 16x16x1024x128,4x32x4096x128]
[--only REGEX] [--rounds 5 --reps 10 --flush dirty]``. Every config is tile 0 of the head dim's
space with some arguments pinned (``PROBES``), compiled first in parallel worker processes,
checked against a float32 reference on a NaN-poisoned output, then timed in interleaved rounds
with cuDNN (the median of the rounds' medians). The table gives ms, TFLOPS, the ratios to cuDNN
and to the unpinned tile 0, and ptxas' registers and spill bytes. ``--list``: the configs;
``--compile-only``: their ptxas resources (no GPU).
"""

from __future__ import annotations

import argparse
import multiprocessing
import re
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
for p in (REPO, REPO / "examples" / "attention", Path(__file__).resolve().parent):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

SHAPES = "16x16x1024x128,4x32x4096x128"

#: label -> the arguments pinned on tile 0 (ff: full_first; s<n>: the producer's and storer's
#: waits suspend up to n ns per try; c<n>: the consumers' too; pp: ping-pong; er: early rescale)
PROBES = {
    "t0": {},
    "t0 ff": dict(full_first=True),
    "t0 s100": dict(suspend_ns=100),
    "t0 s1000": dict(suspend_ns=1000),
    "t0 s10000": dict(suspend_ns=10000),
    "t0 s1000 c50": dict(suspend_ns=1000, consumer_suspend_ns=50),
    "t0 s1000 c500": dict(suspend_ns=1000, consumer_suspend_ns=500),
    "t0 ff s1000": dict(full_first=True, suspend_ns=1000),
    "t0 er": dict(early_rescale=True),  # O rescaled while S runs
    "t0 pp": dict(pingpong=True),  # the groups take turns issuing (overlap kept)
    "t0 pp er": dict(pingpong=True, early_rescale=True),
    "t0 pp er ff": dict(pingpong=True, early_rescale=True, full_first=True),
    "t0 pp er ff s1000": dict(pingpong=True, early_rescale=True, full_first=True, suspend_ns=1000),
    "t1": dict(tile=1),  # overlap=0
    "t1 ff": dict(tile=1, full_first=True),
    "t2": dict(tile=2),  # head dim 64: skip_empty (tuned at 4096 rows)
    "t2 ff": dict(tile=2, full_first=True),
}


def parse(shape: str):
    causal = shape.endswith("c")
    b, h, s, d = (int(x) for x in shape.rstrip("c").split("x"))
    return b, h, s, d, causal


def kernel_of(name: str, dim: int, causal: bool):
    from flash_attention import FlashAttention

    kw = dict(tile=0, dim=dim, causal=causal)
    kw.update(PROBES[name])
    return FlashAttention(**kw)


def _compile(job):
    """Worker: compile one (config, dim, causal) into the shared cache; its ptxas resources."""
    name, dim, causal = job
    import tilus

    args = (1, 1, 1024, 1024, 0.1) + (tilus.void_p,) * 4 + (tilus.float32,)
    try:
        ck = tilus.compile(kernel_of(name, dim, causal), *args)
    except Exception as e:  # noqa: BLE001 - reported in the table
        return job, {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:90]}"}
    ck = ck[0] if isinstance(ck, list) else ck
    r = dict(ck.resources)
    r["serialized"] = bool(ck.wgmma_serialized)
    return job, r


def bench(args) -> int:
    import torch
    from attention_support import random_qkv
    from flash_attention import forward_launcher
    from l2_flush import make_flush
    from rowwise import time_ms
    from torch.nn.attention import SDPBackend, sdpa_kernel

    names = [n for n in PROBES if re.search(args.only, n)]
    shapes = [parse(s) for s in args.shapes.split(",") if s]
    jobs = sorted({(n, d, c) for _, _, _, d, c in shapes for n in names})
    t0 = time.time()
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=min(args.jobs, len(jobs)), mp_context=ctx) as pool:
        res = dict(pool.map(_compile, jobs))
    print(f"compiled {len(jobs)} configs in {time.time() - t0:.1f} s", flush=True)
    flush = make_flush(torch, args.flush)
    F = torch.nn.functional
    status = 0
    rows = []
    for b, h, s, d, causal in shapes:
        shape = f"{b}x{h}x{s}x{d}{'c' if causal else ''}"
        q, k, v = random_qkv(torch, b, h, h, s, s, d, "float16", "cuda")
        ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal)

        def cudnn(q=q, k=k, v=v, causal=causal):
            with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

        runs, notes = {"sdpa cudnn": cudnn}, {}
        for n in names:
            r = res[(n, d, causal)]
            if "error" in r:
                notes[n] = r["error"]
                continue
            o = torch.full_like(q, float("nan"))
            run = forward_launcher(q, k, v, causal=causal, kernel=kernel_of(n, d, causal), out=o)
            run()
            torch.cuda.synchronize()
            err = ((o.float() - ref).abs().max() / ref.abs().max()).item()
            if not err < 2e-2:  # NaN fails too
                notes[n] = f"WRONG: max error {err:.2e}"
                status = 1
                continue
            runs[n] = run
        times = {n: [] for n in runs}
        for _ in range(args.rounds):  # interleaved: every config once per round
            for n, fn in runs.items():
                times[n].append(time_ms(fn, torch, flush, args.reps))
        flops = 4 * b * h * s * s * d / (2 if causal else 1)
        med = {n: statistics.median(ts) for n, ts in times.items()}
        base, t0ms = med["sdpa cudnn"], med.get("t0")
        for n, ms in med.items():
            r = res.get((n, d, causal), {})
            vs_t0 = f"{t0ms / ms:6.3f}" if t0ms else "     -"
            spread = f"{min(times[n]):.4f}-{max(times[n]):.4f}"
            rows.append(f"{shape:16s} {n:16s} {ms:8.4f} {flops / ms / 1e9:7.0f} {base / ms:7.3f} "
                        f"{vs_t0} {r.get('registers', '')!s:>5s} "
                        f"{r.get('spill_store_bytes', '')!s:>5s}  {spread}"
                        f"{' SERIALIZED' if r.get('serialized') else ''}")  # fmt: skip
        rows += [f"{shape:16s} {n:16s} {why}" for n, why in notes.items()]
    head = (f"{'shape':16s} {'impl':16s} {'ms':>8s} {'TFLOPS':>7s} {'x cudnn':>7s} {'x t0':>6s} "
            f"{'regs':>5s} {'spill':>5s}  rounds min-max")  # fmt: skip
    print(head + "\n" + "-" * len(head) + "\n" + "\n".join(rows))
    return status


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default=SHAPES)
    ap.add_argument("--only", default="", help="a regex over the config labels")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--flush", default="dirty")
    ap.add_argument("--jobs", type=int, default=12)
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--compile-only", action="store_true")
    args = ap.parse_args(argv)
    if args.list:
        for n, kw in PROBES.items():
            print(f"{n:16s} {kw}")
        return 0
    if args.compile_only:  # no GPU needed: ptxas' resources of every config
        shapes = [parse(s) for s in args.shapes.split(",") if s]
        for n in (n for n in PROBES if re.search(args.only, n)):
            for d, c in sorted({(d, c) for _, _, _, d, c in shapes}):
                r = _compile((n, d, c))[1]
                print(f"d{d}{'c' if c else ''} {n:16s} {r.get('error') or r}")
        return 0
    return bench(args)


if __name__ == "__main__":
    sys.exit(main())
