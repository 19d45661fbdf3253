"""Experiment: a row-wise kernel (RMS norm by default) against copy_ and torch.compile.

``python3 bench/rms_probe.py [--shapes 8192x8192] [--rounds 9]`` (H200), bench/rowwise.py's
protocol (L2 flushed before each run, one launch a timing, median of 10, the median of
interleaved rounds). At each shape it times:

* ``copy`` (x into the tilus output y), ``torch.compile`` of the op as bench/rowwise.py has it
  (its output a fresh allocation each call) and the tuned kernel (``--op``) into y;
* ``tilus alloc``: the tuned kernel into ``torch.empty_like(x)`` made in the call, the block
  the caching allocator hands torch.compile too, and ``copy alloc`` likewise;
* ``--configs``: pinned configs (``block/per_thread/stages/warps[/hints]``) into y;
* ``--offsets``: copy_ and the tuned kernel into y placed at that many MiB (or KiB with a ``k``)
  past the start of a pool, x fixed: the DRAM placement of the write stream against the reads.

It prints the addresses (output - x, in MiB) and the table last.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
for p in (HERE.parent, HERE.parent / "examples", HERE):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

DEFAULT_CONFIGS = (
    "16384/8/0/0/0,16384/8/0/0/1,16384/8/0/0/2,16384/16/0/0/0,16384/16/0/0/1,8192/16/0/0/0,"
    "8192/16/0/0/1,8192/16/0/0/2,0/16/0/16/0,0/16/0/16/1,0/16/0/16/2,0/8/0/16/1,0/16/0/32/1"
)


def parse_config(text: str) -> dict:
    """``block/per_thread/stages/warps[/hints]`` -> constructor kwargs."""
    keys = ("block", "per_thread", "stages", "warps", "hints")
    return dict(zip(keys, (int(v) for v in text.split("/"))))


def offset_bytes(text: str) -> int:
    """``4`` -> 4 MiB, ``64k`` -> 64 KiB."""
    if text.endswith("k"):
        return int(text[:-1]) << 10
    return int(text) << 20


def run_shape(m, n, args, torch, rows):
    from rowwise import tilus_kernels, time_ms, torch_fn, winner

    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    x = torch.randn(m, n, device="cuda").half()
    wb = [torch.randn(n, device="cuda").half() for _ in range(2)]
    y = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float16)
    f = torch_fn(args.op, torch)
    ref = f(x.float(), *(v.float() for v in wb))
    comp = torch.compile(f)
    _, cls, argf, _, _ = tilus_kernels()[args.op][0]
    tuned = cls()
    a = argf(x, *wb, y)[1:-1]  # the vectors the kernel takes (after x, before y)

    def check(name, out):
        err = ((out.float() - ref).abs().max() / ref.abs().max()).item()
        assert err < 2e-2, (name, err)

    runs = {
        "copy": lambda: y.copy_(x),
        "torch.compile": lambda: comp(x, *wb),
        "tilus": lambda: tuned(m, n, x, *a, y),
        "tilus alloc": lambda: tuned(m, n, x, *a, torch.empty_like(x)),
        "copy alloc": lambda: torch.empty_like(x).copy_(x),
    }
    runs["tilus"]()
    torch.cuda.synchronize()
    check("tilus", y)
    for text in filter(None, args.configs.split(",")):
        k = cls(**parse_config(text))
        y.fill_(float("nan"))
        k(m, n, x, *a, y)
        torch.cuda.synchronize()
        check(text, y)
        runs[f"W {text}"] = lambda k=k: k(m, n, x, *a, y)
    nbytes = m * n * 2
    pool = None
    offs = [offset_bytes(o) for o in filter(None, args.offsets.split(","))]
    if offs:
        pool = torch.empty(nbytes + max(offs) + (2 << 20), dtype=torch.uint8, device="cuda")
        for o, text in zip(offs, args.offsets.split(",")):
            yo = pool[o : o + nbytes].view(torch.float16).view(m, n)
            runs[f"copy @{text}"] = lambda yo=yo: yo.copy_(x)
            runs[f"tilus @{text}"] = lambda yo=yo: tuned(m, n, x, *a, yo)
    out = comp(x, *wb)
    check("torch.compile", out)
    mib = lambda t: (t.data_ptr() - x.data_ptr()) / (1 << 20)  # noqa: E731
    print(f"{m}x{n}: x at 0x{x.data_ptr():x}; y {mib(y):+.2f} MiB, compile's output "
          f"{mib(out):+.2f} MiB, pool {mib(pool) if pool is not None else 0:+.2f} MiB, "
          f"tuned {winner(tuned)}", flush=True)  # fmt: skip
    del out
    for fn in runs.values():
        fn()
    torch.cuda.synchronize()
    o2 = comp(x, *wb)
    print(f"   compile's output (steady) {mib(o2):+.2f} MiB", flush=True)
    del o2
    table = {k: [] for k in runs}
    names = list(runs)
    for r in range(args.rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            table[name].append(time_ms(runs[name], torch, flush, 10))
    copy_ms = statistics.median(table["copy"])
    comp_ms = statistics.median(table["torch.compile"])
    for name in names:
        ms = statistics.median(table[name])
        rows.append((f"{args.op} {m}x{n}", name, ms, copy_ms / ms, comp_ms / ms))
    del pool, flush


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--op", default="rms_norm", choices=("softmax", "layer_norm", "rms_norm"))
    ap.add_argument("--shapes", default="8192x8192")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--configs", default=DEFAULT_CONFIGS)
    ap.add_argument("--offsets", default="", help="e.g. 0,1,2,64k")
    args = ap.parse_args()
    import torch

    rows = []
    for s in args.shapes.split(","):
        m, n = (int(v) for v in s.split("x"))
        run_shape(m, n, args, torch, rows)
        torch.cuda.empty_cache()
    print(f"\n{'op, shape':22s} {'impl':26s} {'ms':>8s} {'x copy':>7s} {'x compile':>9s}")
    for shape, name, ms, rc, rk in rows:
        print(f"{shape:22s} {name:26s} {ms:8.4f} {rc:7.3f} {rk:9.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
