"""Run one pinned config of a row-wise kernel a few times, for a profiler (``ncu``) to catch.

``python bench/profile_one.py softmax 4096x32000 block=8192 per_thread=8 stages=2 warps=0``
builds ``inputs`` for the op (fp16 rows, and the norms' weight and bias), compiles the example
kernel with that config, checks it once against torch in float32 and launches it ``--launches``
times; ``torch`` in place of the config runs ``torch.compile`` of the op instead. Profile it with
``ncu --clock-control none -k regex:tl_ --launch-skip 1 --launch-count 1 python3 bench/...``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
for p in (REPO, REPO / "examples"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))


def torch_op(op: str, torch):
    """The torch function of ``op`` (float32 math, fp16 out)."""
    F = torch.nn.functional
    if op == "softmax":
        return lambda x, w, b: torch.softmax(x.float(), dim=-1).half()
    if op == "layer_norm":
        return lambda x, w, b: F.layer_norm(x.float(), x.shape[-1:], w.float(), b.float()).half()
    return lambda x, w, b: (
        x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6) * w.float()
    ).half()


def main(argv=None) -> int:
    """Parse the arguments, check once, launch ``--launches`` times."""
    import layer_norm
    import rms_norm
    import softmax
    import torch

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("op", choices=("softmax", "layer_norm", "rms_norm"))
    ap.add_argument("shape", help="MxN")
    ap.add_argument("config", nargs="+", help="K=V of the config, or 'torch'")
    ap.add_argument("--launches", type=int, default=3)
    ap.add_argument("--time", action="store_true",
                    help="also time it in interleaved rounds beside a copy_ of the same bytes")  # fmt: skip
    args = ap.parse_args(argv)
    m, n = (int(v) for v in args.shape.split("x"))
    x = torch.randn(m, n, device="cuda", dtype=torch.float16)
    w = torch.randn(n, device="cuda", dtype=torch.float16)
    b = torch.randn(n, device="cuda", dtype=torch.float16)
    ref = torch_op(args.op, torch)(x, w, b).float()
    if args.config == ["torch"]:
        fn = torch.compile(torch_op(args.op, torch))
        run = lambda: fn(x, w, b)  # noqa: E731
    else:
        cls = {"softmax": softmax.Softmax, "layer_norm": layer_norm.LayerNorm,
               "rms_norm": rms_norm.RMSNorm}[args.op]  # fmt: skip
        cfg = {k: int(v) for k, v in (c.split("=") for c in args.config)}
        cfg.setdefault("hints", 0)  # the re-read form's cache hints (examples/softmax.py)
        kernel = cls(**cfg)
        y = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float16)
        vecs = {"softmax": (), "layer_norm": (w, b), "rms_norm": (w,)}[args.op]
        run = lambda: kernel(m, n, x, *vecs, y)  # noqa: E731
        run()
        torch.cuda.synchronize()
        err = ((y.float() - ref).abs().max() / ref.abs().max().clamp(min=1)).item()
        print(f"{args.op} {args.shape} {args.config}: max error {err:.2e}")
    for _ in range(args.launches):
        run()
    torch.cuda.synchronize()
    if args.time:
        src, dst = x.clone(), torch.empty_like(x)  # the anchor: read and write m x n fp16
        ms = interleaved({"kernel": run, "copy": lambda: dst.copy_(src)}, torch)
        print(f"{args.op} {args.shape} {' '.join(args.config)}: {ms['kernel']:.4f} ms, "
              f"copy {ms['copy']:.4f} ms, x copy {ms['copy'] / ms['kernel']:.3f}")  # fmt: skip
    return 0


def interleaved(fns: dict, torch, rounds: int = 5, reps: int = 20) -> dict:
    """Median over ``rounds`` of each function's mean time (ms) over ``reps`` launches queued
    back to back between two events, the functions taking turns round by round (the headline
    protocol: no idle pauses; the host's launch cost hides behind the queued work)."""
    import statistics

    per = {k: [] for k in fns}
    for fn in fns.values():  # warm-up: compiles, caches, clocks
        for _ in range(3):
            fn()
    torch.cuda.synchronize()
    for _ in range(rounds):
        for k, fn in fns.items():
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            for _ in range(reps):
                fn()
            b.record()
            b.synchronize()
            per[k].append(a.elapsed_time(b) / reps)
    return {k: statistics.median(v) for k, v in per.items()}


if __name__ == "__main__":
    sys.exit(main())
