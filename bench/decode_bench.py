"""Decode and paged decode attention per config beside cuDNN, after a dirty and a clean L2 flush.

On a Hopper GPU with torch: ``python bench/decode_bench.py [--out results.json]``. For each shape
(``--decode`` ``b x h x hkv x kv_len x d``, ``--paged`` ``b x h x hkv x kv_len x d x page``,
one query token, every sequence the full length so that SDPA computes the same thing) it checks
every run against a float32 reference (outputs poisoned with NaN first), then times all of them
in interleaved rounds (``--rounds``; in each round every run under each flush, the median of
``--reps`` CUDA-event timings; the median of the rounds is reported):

* ``tilus``: the default constructor, tuned on first use (what a user gets); for paged shapes
  also ``contig`` (the contiguous kernel on the same cache);
* ``b<block_n>s<stages>``: each config of the split kernel's autotune space, pinned (for page
  64, ``b128`` is a stage of two pages, and its ``b64s3`` runs two blocks an SM;
  ``pf``: with the L2 prefetch of the ring's first tiles);
  ``x<n>``: the tuned kernel with ``n`` splits;
* ``sdpa cudnn`` and ``sdpa flash`` on the contiguous cache (paged shapes too: the anchor reads
  the same bytes without a block table), the ratio to cuDNN in ``x cudnn``.

Two flushes before each timed run: ``dirty`` writes a 256 MiB buffer (as ``bench/attention.py``
does; the L2 is then full of dirty lines whose write-back the timed kernel pays for), ``clean``
writes it and then reads another 256 MiB (the L2 holds clean lines only). GB/s counts the KV
read (``2 b hkv kv_len d`` elements) and ``%HBM`` is against the H200's 4.8 TB/s.

``--budget`` seconds: shapes not started by then are skipped (listed), so a time-limited run
still prints its table. ``--dry-run`` needs no GPU: it builds the runs of one tiny shape on the
interpreter and checks them against NumPy.
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
for p in (REPO, REPO / "examples" / "attention", Path(__file__).resolve().parent):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from l2_flush import FLUSHES, make_flush  # noqa: E402
from rowwise import git_commit, time_ms, winner  # noqa: E402

HBM_GBS = 4800.0  # the H200's HBM3e bandwidth
# the page-64 rows first (the known gaps), then the long cache, then the rest
PAGED = "64x32x8x16384x128x64,16x32x8x4096x128x64,16x32x8x32768x128x128,64x32x8x4096x128x128"
DECODE = "16x32x8x32768x128,16x32x8x4096x128,64x32x8x4096x128,64x32x8x16384x128"


def timed(torch, runs, flusher, rounds, reps):
    """(name, flush) -> (median of the rounds' medians, the rounds): rounds interleave every
    run under both flushes."""
    for fn in runs.values():
        fn()
    torch.cuda.synchronize()
    out = {(n, k): [] for n in runs for k in FLUSHES}
    for _ in range(rounds):
        for kind in FLUSHES:
            for name, fn in runs.items():
                out[name, kind].append(time_ms(fn, torch, flusher[kind], reps))
    return {key: (statistics.median(ts), ts) for key, ts in out.items()}


def checked(torch, name, run, ref, failures):
    """``run`` after one call with its output poisoned, if it matches ``ref``; else None."""
    try:
        o, _ = run()
        o.fill_(float("nan"))
        o, _ = run()
        torch.cuda.synchronize()
    except Exception as e:  # noqa: BLE001 - report and go on with the next run
        failures.append(f"{name}: {type(e).__name__}: {str(e)[:200]}")
        return None
    err = ((o.float() - ref).abs().max() / ref.abs().max()).item()
    if not err < 2e-2:  # NaN fails too
        failures.append(f"{name}: max error {err:.2e}")
        return None
    return run


def sdpa_runs(torch, q, k, v):
    """'sdpa cudnn' and 'sdpa flash' -> run (GQA), those that accept the inputs."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    F = torch.nn.functional
    runs = {}
    for name, backend in (
        ("cudnn", SDPBackend.CUDNN_ATTENTION),
        ("flash", SDPBackend.FLASH_ATTENTION),
    ):

        def run(b=backend):
            with sdpa_kernel([b]):
                return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)

        try:
            run()
            torch.cuda.synchronize()
            runs[f"sdpa {name}"] = run
        except Exception as e:  # noqa: BLE001 - a backend may refuse a shape
            print(f"  sdpa {name} refused: {type(e).__name__}: {str(e).splitlines()[0][:80]}")
    return runs


def split_runs(torch, make, base_splits, mults, ref, failures):
    """'x<n>' -> the tuned kernel with ``n`` = mult x the launcher's splits (at most 64)."""
    runs = {}
    for mult in mults:
        sp = min(mult * base_splits, 64)
        run = checked(torch, f"x{sp}", make(sp), ref, failures)
        if run:
            runs[f"x{sp}"] = run
    return runs


def chosen(kernel) -> str:
    """The tuner's pick for ``kernel`` (informative only: never fails the run)."""
    try:
        return winner(kernel)
    except Exception as e:  # noqa: BLE001
        return f"? ({type(e).__name__})"


def launcher_splits(b, hkv, n, q) -> int:
    import torch
    from decode_attention import num_splits

    return num_splits(
        b, hkv, n, 128, torch.cuda.get_device_properties(q.device).multi_processor_count
    )


def decode_shape(torch, shape, args, failures):
    """name -> run for a contiguous decode shape, and the KV bytes."""
    from attention_support import random_qkv
    from decode_attention import decode_kernel, decode_launcher

    b, h, hkv, n, d = (int(x) for x in shape.split("x"))
    q, k, v = random_qkv(torch, b, h, hkv, 1, n, d, "float16", "cuda")
    lens = torch.full((b,), n, dtype=torch.int32, device="cuda")
    F = torch.nn.functional
    ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), enable_gqa=True)

    def make(kernel=None, splits=None):
        return decode_launcher(q, k, v, lens, max_seq_len=n, kernel=kernel, splits=splits,
                               out=torch.empty_like(q))  # fmt: skip

    runs = {}
    tuned = decode_kernel(d)
    cands = [("tilus", make(tuned))]
    if args.configs:
        cands += [
            (f"b{c['block_n']}s{c['num_stages']}", make(decode_kernel(d, **c)))
            for c in decode_kernel(d).configs
        ]
        pf = decode_kernel(d, block_n=128, num_stages=2, prefetch=True)
        cands.append(("b128s2 pf", make(pf)))  # with the L2 head start
    for name, run in cands:
        if checked(torch, f"decode {shape} {name}", run, ref, failures):
            runs[name] = run
    if args.splits:
        base = launcher_splits(b, hkv, n, q)
        runs |= split_runs(torch, lambda sp: make(tuned, sp), base, args.splits, ref, failures)
    runs |= sdpa_runs(torch, q, k, v)
    print(f"  decode {shape}: the tuner chose {chosen(tuned)}")
    return runs, 2 * b * hkv * n * d * 2


def paged_shape(torch, shape, args, failures):
    """name -> run for a paged decode shape (the cache paginated, pages shuffled)."""
    from attention_support import paginate, random_qkv
    from decode_attention import decode_launcher
    from paged_decode import PagedDecodeAttention, paged_decode_launcher, paged_tiles

    b, h, hkv, n, d, ps = (int(x) for x in shape.split("x"))
    q, k, v = random_qkv(torch, b, h, hkv, 1, n, d, "float16", "cuda")
    kc, vc, table = paginate(torch, k, v, ps)
    lens = torch.full((b,), n, dtype=torch.int32, device="cuda")
    F = torch.nn.functional
    ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), enable_gqa=True)

    def make(kernel=None, splits=None):
        return paged_decode_launcher(q, kc, vc, table, lens, n, kernel=kernel, splits=splits,
                                     out=torch.empty_like(q))  # fmt: skip

    tuned = PagedDecodeAttention(page_size=ps, dim=d)
    cands = [("tilus", make(tuned))]
    if args.configs:
        cands += [
            (f"b{bn}s{st}", make(PagedDecodeAttention(tile=i, page_size=ps, dim=d)))
            for i, (bn, st) in enumerate(paged_tiles(ps, d))
        ]
    cands.append(("contig", decode_launcher(q, k, v, lens, max_seq_len=n, out=torch.empty_like(q))))
    runs = {}
    for name, run in cands:
        if checked(torch, f"paged {shape} {name}", run, ref, failures):
            runs[name] = run
    if args.splits:
        base = launcher_splits(b, hkv, n, q)
        runs |= split_runs(torch, lambda sp: make(tuned, sp), base, args.splits, ref, failures)
    runs |= sdpa_runs(torch, q, k, v)
    print(f"  paged {shape}: the tuner chose {chosen(tuned)} of {paged_tiles(ps, d)}")
    return runs, 2 * b * hkv * n * d * 2


def rows_of(kind, shape, times, kv_bytes):
    """One row per run: both flushes' ms, GB/s, %HBM and the ratio to cuDNN."""
    names = list(dict.fromkeys(n for n, _ in times))
    rows = []
    for name in names:
        row = dict(kind=kind, shape=shape, impl=name)
        for f in FLUSHES:
            ms, ts = times[name, f]
            anchor = times.get(("sdpa cudnn", f))
            row[f] = dict(ms=ms, gbs=kv_bytes / ms / 1e6, hbm=kv_bytes / ms / 1e6 / HBM_GBS,
                          x_cudnn=anchor[0] / ms if anchor else None, rounds_ms=ts)  # fmt: skip
        rows.append(row)
    return rows


def header() -> str:
    cols = "".join(f" | {f + ' ms':>9s} {'GB/s':>5s} {'%HBM':>4s} {'x cudnn':>7s}" for f in FLUSHES)
    return f"{'kind':6s} {'shape':22s} {'impl':12s}{cols}"


def print_rows(rows):
    for r in rows:
        cells = ""
        for f in FLUSHES:
            c = r[f]
            x = f"{c['x_cudnn']:7.3f}" if c["x_cudnn"] else " " * 7
            cells += f" | {c['ms']:9.4f} {c['gbs']:5.0f} {100 * c['hbm']:4.0f} {x}"
        print(f"{r['kind']:6s} {r['shape']:22s} {r['impl']:12s}{cells}", flush=True)


def print_summary(results):
    """One line a shape: the tuned kernel's ratio to cuDNN after each flush and its share of
    HBM after the clean one, the fastest pinned config (clean) and the contiguous kernel."""
    print(f"summary: {'kind':6s} {'shape':22s} {'tuned x cudnn dirty/clean':>26s} {'%HBM':>4s}"
          f"  {'best pinned (clean x cudnn)':28s} contig (clean x cudnn)")  # fmt: skip
    shapes = list(dict.fromkeys((r["kind"], r["shape"]) for r in results))
    for kind, shape in shapes:
        rows = {r["impl"]: r for r in results if (r["kind"], r["shape"]) == (kind, shape)}
        t = rows.get("tilus")
        if t is None or t["clean"]["x_cudnn"] is None:
            print(f"summary: {kind:6s} {shape:22s} (no tuned or no cuDNN row)")
            continue
        pinned = [r for n, r in rows.items() if n.startswith("b")]
        best = min(pinned, key=lambda r: r["clean"]["ms"], default=None)
        b = f"{best['impl']} {best['clean']['x_cudnn']:.3f}" if best else "-"
        c = rows.get("contig")
        c = f"{c['clean']['x_cudnn']:.3f}" if c else "-"
        print(f"summary: {kind:6s} {shape:22s} {t['dirty']['x_cudnn']:12.3f} / {t['clean']['x_cudnn']:.3f}"
              f"       {100 * t['clean']['hbm']:4.0f}  {b:28s} {c}")  # fmt: skip


def bench(args) -> int:
    """Check and time every shape on the GPU; print the table, write the JSON."""
    import torch

    if not torch.cuda.is_available():
        print("no CUDA GPU: use --dry-run for the CPU checks")
        return 1
    t0 = time.time()
    flusher = {kind: make_flush(torch, kind) for kind in FLUSHES}
    failures, results, skipped = [], [], []
    work = [("paged", s) for s in filter(None, args.paged.split(","))]
    work += [("decode", s) for s in filter(None, args.decode.split(","))]
    if args.decode_first:
        work.sort(key=lambda w: w[0] != "decode")
    print(header())
    for kind, shape in work:
        if time.time() - t0 > args.budget:
            skipped.append(f"{kind} {shape}")
            continue
        make = paged_shape if kind == "paged" else decode_shape
        runs, kv_bytes = make(torch, shape, args, failures)
        rows = rows_of(kind, shape, timed(torch, runs, flusher, args.rounds, args.reps), kv_bytes)
        print_rows(rows)  # as each shape finishes: a run cut short still shows them
        results += rows
        del runs
        torch.cuda.empty_cache()
    print_summary(results)
    for f in failures:
        print(f"FAILED {f}")
    if skipped:
        print(f"skipped (budget {args.budget} s): {', '.join(skipped)}")
    meta = dict(
        date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        gpu=torch.cuda.get_device_name(),
        commit=git_commit(),
        command=" ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        torch=torch.__version__,
        seconds=round(time.time() - t0, 1),
    )
    print(f"# {meta['date']} {meta['gpu']} commit {meta['commit'][:10]} {meta['seconds']} s")
    if args.out:
        Path(args.out).write_text(json.dumps(dict(meta=meta, results=results), indent=1) + "\n")
    return 1 if failures else 0


def dry_run() -> int:
    """The tuned and pinned runs of a tiny paged and a contiguous shape on the interpreter."""
    import torch
    from attention_support import (
        max_error,
        paged_reference,
        random_paged,
        random_qkv,
        reference_decode,
    )
    from decode_attention import decode_attention
    from paged_decode import PagedDecodeAttention, paged_decode_attention, paged_tiles

    import tilus

    status = 0
    lens = [150, 33]
    lt = torch.tensor(lens, dtype=torch.int32)
    with tilus.option.scoped(interpret=True):
        q, k, v = random_qkv(torch, 2, 4, 2, 1, 150, 64, "float16")
        o, lse = decode_attention(q, k, v, lt)
        ro, rl = reference_decode(q, k, v, lens, 64**-0.5)
        ok = max_error(o, ro) < 2e-2 and max_error(lse, rl) < 1e-3
        print(f"decode 2x4/2 cache 150: {'ok' if ok else 'FAIL'}")
        status |= not ok
        q, kc, vc, table = random_paged(torch, 2, 4, 2, 1, lens, 64, 64, "float16")
        ro, rl = paged_reference(q, kc, vc, table, lens, 64**-0.5)
        for i, (bn, st) in enumerate(paged_tiles(64, 64)):
            kern = PagedDecodeAttention(tile=i, page_size=64, dim=64)
            o, lse = paged_decode_attention(q, kc, vc, table, lt, kernel=kern)
            ok = max_error(o, ro) < 2e-2 and max_error(lse, rl) < 1e-3
            print(f"paged 2x4/2 page 64 b{bn}s{st}: {'ok' if ok else 'FAIL'}")
            status |= not ok
    return int(status)


def main(argv=None) -> int:
    """Parse the arguments and run the benchmark (or the CPU dry run)."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--decode", default=DECODE, help="b x h x hkv x kv_len x d shapes")
    ap.add_argument("--paged", default=PAGED, help="b x h x hkv x kv_len x d x page_size shapes")
    ap.add_argument("--decode-first", action="store_true", help="the contiguous shapes first")
    ap.add_argument("--no-configs", dest="configs", action="store_false",
                    help="only the tuned kernels and the anchors")  # fmt: skip
    ap.add_argument("--splits", type=lambda s: [int(x) for x in s.split(",")], default=[],
                    help="also the tuned kernel with these multiples of its splits, e.g. 2,4")  # fmt: skip
    ap.add_argument("--rounds", type=int, default=3, help="interleaved timing rounds")
    ap.add_argument("--reps", type=int, default=10, help="timed runs per run, flush and round")
    ap.add_argument("--budget", type=float, default=1e9, help="start no shape after this (s)")
    ap.add_argument("--out", default=None, help="write the results as JSON here")
    ap.add_argument("--dry-run", action="store_true", help="CPU only: check on the interpreter")
    args = ap.parse_args(argv)
    return dry_run() if args.dry_run else bench(args)


if __name__ == "__main__":
    sys.exit(main())
