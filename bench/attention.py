"""Benchmark the attention examples beside ``torch.nn.functional.scaled_dot_product_attention``.

On a Hopper GPU with torch: ``python bench/attention.py [--out results.json]``. In one process,
for each shape, it checks every kernel against a float32 reference (NaN-poisoned outputs) and
then times, in interleaved rounds (``--rounds``, each the median of ``--reps`` CUDA-event
timings, the L2 flushed before each run; the median of the rounds is reported):

* forward (``--forward``, default the issue's shapes ``b x h x s x d`` with ``c`` for causal):
  ``FlashAttention`` with its default constructor (tuned on first use) and SDPA with each of its
  backends (flash, cuDNN, efficient; ``torch.nn.attention.sdpa_kernel``), in TFLOPS
  (``4 b h s^2 d``, halved when causal) and the ratio to the fastest SDPA backend;
* decode (``--decode``, ``b x h x hkv x kv_len x d``, one query token, every sequence the full
  length so that SDPA computes the same thing): ``decode_attention`` (split kernel and combine)
  and each SDPA backend, in GB/s of the KV read (``2 b hkv kv_len d`` elements) and the ratio;
  ``floor: stream`` streams the same bytes through the decode kernel's ring with no math
  (``bench/decode_floor.py``, tuned), and the ``x floor`` column of the tilus rows is its time
  over theirs (1.0: the kernel moves the cache as fast as its pipeline can with nothing else
  to do; under the dirty flush that floor includes the flush's write-back);
* paged decode (``--paged``, ``b x h x hkv x kv_len x d x page_size``): ``paged_decode_attention``
  over a shuffled page pool holding the same cache, beside our contiguous ``decode_attention``
  and each SDPA backend on the contiguous cache; GB/s, the ratio to the fastest SDPA backend and
  to the contiguous kernel (``x contig``).

``--flush dirty`` (the default) flushes the L2 by zeroing 256 MiB, which leaves it full of
dirty lines that the timed kernel then writes back; ``--flush clean`` reads another 256 MiB
after that write, so the timed kernel finds clean lines only (as after a serving loop's earlier
kernels, which leave few dirty lines); ``--flush both`` times every shape under each.

``--per-config`` adds a row for each pinned config of the decode kernels (their registers in the
``impl`` column), to pick the autotune space, and one (``+combine``) of the tuned kernel with its
splits merged by ``DecodeCombine`` even when there is one split (else the split kernel writes
the output itself).

A backend that refuses a shape is listed as unsupported. ``--dry-run`` needs no GPU: it runs
both kernels on the tilus interpreter at tiny ragged sizes against NumPy.
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
for p in (REPO, REPO / "examples" / "attention", Path(__file__).resolve().parent):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from decode_floor import stream_launcher  # noqa: E402
from l2_flush import make_flush  # noqa: E402
from rowwise import git_commit, interleaved_rounds  # noqa: E402

FORWARD = (
    "4x32x4096x128,4x32x4096x128c,2x16x8192x128,4x32x4096x64,16x16x1024x128,"
    "4x32x4096x256,4x32x4096x256c"
)
DECODE = "16x32x8x4096x128,16x32x8x32768x128,64x32x8x4096x128,64x32x8x16384x128"
PAGED = "16x32x8x4096x128x64,16x32x8x32768x128x128,64x32x8x4096x128x128,64x32x8x16384x128x64"
BACKENDS = ("flash", "cudnn", "efficient")
FLOOR = "floor: stream"  # the decode rows' memory floor (bench/decode_floor.py)


def sdpa_runs(torch, q, k, v, causal):
    """label -> callable for each SDPA backend that accepts these inputs (else the error)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    F = torch.nn.functional
    which = {
        "flash": SDPBackend.FLASH_ATTENTION,
        "cudnn": SDPBackend.CUDNN_ATTENTION,
        "efficient": SDPBackend.EFFICIENT_ATTENTION,
    }
    gqa = q.shape[1] != k.shape[1]
    runs, refused = {}, {}
    for name in BACKENDS:

        def run(b=which[name]):
            with sdpa_kernel([b]):
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)

        try:
            run()
            torch.cuda.synchronize()
            runs[f"sdpa {name}"] = run
        except Exception as e:  # noqa: BLE001 - a backend may refuse a shape: say so
            refused[f"sdpa {name}"] = f"{type(e).__name__}: {str(e).splitlines()[0][:80]}"
    return runs, refused


def timed(torch, runs, flush, rounds, reps):
    """name -> (median of the rounds' medians in ms, the rounds), interleaved."""
    out = interleaved_rounds(runs, torch, flush, rounds, reps)
    return {name: (statistics.median(ts), ts) for name, ts in out.items()}


def bench_forward(torch, shape, flush, args, status):
    from attention_support import random_qkv
    from flash_attention import flash_attention, forward_launcher

    causal = shape.endswith("c")
    b, h, s, d = (int(x) for x in shape.rstrip("c").split("x"))
    q, k, v = random_qkv(torch, b, h, h, s, s, d, "float16", "cuda")
    ref = torch.nn.functional.scaled_dot_product_attention(
        q.float(), k.float(), v.float(), is_causal=causal
    )
    o = torch.full_like(q, float("nan"))
    flash_attention(q, k, v, causal=causal, out=o)  # compiles and tunes on first use
    torch.cuda.synchronize()
    err = ((o.float() - ref).abs().max() / ref.abs().max()).item()
    if not err < 2e-2:
        print(f"forward {shape}: tilus max error {err:.2e} FAILS")
        status[0] = 1
    runs, refused = sdpa_runs(torch, q, k, v, causal)
    runs = {"tilus": forward_launcher(q, k, v, causal=causal, out=o), **runs}
    flops = 4 * b * h * s * s * d / (2 if causal else 1)
    return _rows("forward", shape, timed(torch, runs, flush, args.rounds, args.reps), refused,
                 lambda ms: flops / ms / 1e9, "TFLOPS")  # fmt: skip


def bench_decode(torch, shape, flush, args, status):
    from attention_support import random_qkv
    from decode_attention import decode_attention, decode_launcher

    b, h, hkv, n, d = (int(x) for x in shape.split("x"))
    q, k, v = random_qkv(torch, b, h, hkv, 1, n, d, "float16", "cuda")
    lens = torch.full((b,), n, dtype=torch.int32, device="cuda")
    g = h // hkv
    ref = torch.nn.functional.scaled_dot_product_attention(
        q.float(), k.float().repeat_interleave(g, 1), v.float().repeat_interleave(g, 1)
    )
    o = torch.full_like(q, float("nan"))
    decode_attention(q, k, v, lens, out=o)
    torch.cuda.synchronize()
    err = ((o.float() - ref).abs().max() / ref.abs().max()).item()
    if not err < 2e-2:
        print(f"decode {shape}: tilus max error {err:.2e} FAILS")
        status[0] = 1
    runs, refused = sdpa_runs(torch, q, k, v, False)
    runs = {"tilus": decode_launcher(q, k, v, lens, max_seq_len=n, out=o), **runs}
    if d <= 128:  # the same bytes through the same ring with no math (bench/decode_floor.py)
        runs[FLOOR] = stream_launcher(q, k, v, lens, n)
    if args.per_config:
        runs |= decode_configs(torch, q, k, v, lens, n, ref, status)
    kv_bytes = 2 * b * hkv * n * d * 2
    return _rows("decode", shape, timed(torch, runs, flush, args.rounds, args.reps), refused,
                 lambda ms: kv_bytes / ms / 1e6, "GB/s", floor=FLOOR)  # fmt: skip


def _registers(kernel, args) -> str:
    import tilus

    try:
        ck = tilus.compile(kernel, *args)
        ck = ck[0] if isinstance(ck, list) else ck
        spill = ck.resources["spill_store_bytes"]
        return f"{ck.resources['registers']}r" + (f" {spill}B spill" if spill else "")
    except Exception as e:  # noqa: BLE001 - the count is informative only
        return f"?r {type(e).__name__}"


def _checked(torch, name, run, ref, status):
    """``run`` after one checked call (its output poisoned first), else None."""
    try:
        o, _ = run()
        o.fill_(float("nan"))
        o, _ = run()
        torch.cuda.synchronize()
    except Exception as e:  # noqa: BLE001 - report and go on with the next config
        print(f"{name}: FAILED {type(e).__name__}: {str(e)[:200]}")
        status[0] = 1
        return None
    err = ((o.float() - ref).abs().max() / ref.abs().max()).item()
    if not err < 2e-2:
        print(f"{name}: max error {err:.2e} FAILS")
        status[0] = 1
    return run


def decode_configs(torch, q, k, v, lens, n, ref, status):
    """'tilus b<block_n>s<stages> <regs>' -> run, for each pinned config of the split kernel."""
    from decode_attention import decode_kernel, decode_launcher

    import tilus

    runs, d = {}, q.shape[-1]
    vp, f = tilus.void_p, tilus.float32
    tuned = decode_kernel(d)  # one kernel: tuned once for the rows below
    run = decode_launcher(q, k, v, lens, max_seq_len=n, out=torch.empty_like(q), combine=True,
                          kernel=tuned)  # fmt: skip
    if _checked(torch, "tilus +combine", run, ref, status):
        runs["tilus +combine"] = run  # the tuned kernel, its splits merged by DecodeCombine
    for mult in (2, 4):  # more splits than the heuristic's (blocks for a second wave)
        sp = min(mult * decode_splits(q, k, n), 64)
        run = decode_launcher(q, k, v, lens, max_seq_len=n, out=torch.empty_like(q), splits=sp,
                              kernel=tuned)  # fmt: skip
        if _checked(torch, f"tilus {sp} splits", run, ref, status):
            runs[f"tilus {sp} splits"] = run
    # rings small enough for two blocks an SM, with twice the splits (so that two are there)
    extra = [dict(block_n=64, num_stages=3), dict(block_n=64, num_stages=2)]
    sp2 = min(2 * decode_splits(q, k, n), 64)
    for cfg in decode_kernel(d).configs + (extra if d <= 128 else []):
        kern = decode_kernel(d, **cfg)
        regs = _registers(
            kern, (16, 8, 4, 8192, 2, 4096, 0.1, vp, vp, vp, tilus.int32, f, f, 1, vp, f)
        )
        sp = sp2 if cfg in extra else None
        name = f"tilus b{cfg['block_n']}s{cfg['num_stages']}{f' x{sp}' if sp else ''} {regs}"
        o = torch.empty_like(q)
        run = decode_launcher(q, k, v, lens, max_seq_len=n, kernel=kern, out=o, splits=sp)
        if _checked(torch, name, run, ref, status):
            runs[name] = run
    return runs


def decode_splits(q, k, n) -> int:
    """The splits the decode launchers choose for a cache of ``n`` positions."""
    import torch
    from decode_attention import num_splits

    sms = torch.cuda.get_device_properties(q.device).multi_processor_count
    return num_splits(q.shape[0], k.shape[1], n, 128, sms)


def bench_paged(torch, shape, flush, args, status):
    from attention_support import paginate, random_qkv
    from decode_attention import decode_launcher
    from paged_decode import PagedDecodeAttention, paged_decode_launcher, paged_tiles

    import tilus

    b, h, hkv, n, d, ps = (int(x) for x in shape.split("x"))
    q, k, v = random_qkv(torch, b, h, hkv, 1, n, d, "float16", "cuda")
    kc, vc, table = paginate(torch, k, v, ps)
    lens = torch.full((b,), n, dtype=torch.int32, device="cuda")
    F = torch.nn.functional
    ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), enable_gqa=True)
    o, oc = torch.empty_like(q), torch.empty_like(q)
    runs = {
        "tilus paged": paged_decode_launcher(q, kc, vc, table, lens, out=o),  # checks the table
        "tilus contig": decode_launcher(q, k, v, lens, max_seq_len=n, out=oc),
    }
    for name in list(runs):
        if not _checked(torch, f"paged {shape} {name}", runs[name], ref, status):
            del runs[name]
    if args.per_config:
        vp, f, i = tilus.void_p, tilus.float32, tilus.int32
        run = paged_decode_launcher(q, kc, vc, table, lens, n, out=torch.empty_like(q),
                                    combine=True)  # fmt: skip
        if _checked(torch, "paged +combine", run, ref, status):
            runs["paged +combine"] = run
        for tile, (bn, st) in enumerate(paged_tiles(ps, d)):
            kern = PagedDecodeAttention(tile=tile, page_size=ps, dim=d)
            regs = _registers(
                kern, (16, 8, 4, 4096, 64, 2, 4096, 0.1, vp, vp, vp, i, i, f, f, 1, vp, f)
            )
            name = f"paged b{bn}s{st} {regs}"
            run = paged_decode_launcher(q, kc, vc, table, lens, n, kernel=kern,
                                        out=torch.empty_like(q))  # fmt: skip
            if _checked(torch, name, run, ref, status):
                runs[name] = run
    sdpa, refused = sdpa_runs(torch, q, k, v, False)
    runs |= sdpa
    kv_bytes = 2 * b * hkv * n * d * 2
    return _rows("paged", shape, timed(torch, runs, flush, args.rounds, args.reps), refused,
                 lambda ms: kv_bytes / ms / 1e6, "GB/s", anchor="tilus contig")  # fmt: skip


def _rows(kind, shape, times, refused, rate, unit, anchor=None, floor=None):
    """The result rows of one shape: each run's time and rate, its ratio to the fastest SDPA
    backend, to the ``anchor`` run (``ratio_to_contiguous``) and, for the kernels, the
    ``floor`` run's time over theirs (``ratio_to_floor``: 1.0 is the floor's speed)."""
    best = min((ms for name, (ms, _) in times.items() if name.startswith("sdpa")), default=None)
    base = times[anchor][0] if anchor in times else None
    low = times[floor][0] if floor in times else None
    rows = []
    for name, (ms, ts) in times.items():
        to_floor = (low / ms) if low and name.startswith("tilus") else None
        rows.append(dict(kind=kind, shape=shape, impl=name, ms=ms, rate=rate(ms), unit=unit,
                         ratio_to_best_sdpa=(best / ms) if best else None, rounds_ms=ts,
                         ratio_to_contiguous=(base / ms) if base else None,
                         ratio_to_floor=to_floor))  # fmt: skip
    for name, why in refused.items():
        rows.append(dict(kind=kind, shape=shape, impl=name, unsupported=why))
    return rows


def dry_run() -> int:
    """The kernels on the interpreter at tiny ragged sizes, against NumPy float64."""
    import torch
    from attention_support import (
        max_error,
        paged_reference,
        random_paged,
        random_qkv,
        reference,
        reference_decode,
    )
    from decode_attention import decode_attention
    from flash_attention import flash_attention
    from paged_decode import paged_decode_attention

    import tilus

    status = 0
    with tilus.option.scoped(interpret=True):
        q, k, v = random_qkv(torch, 1, 2, 1, 70, 70, 64, "float16")
        o, lse = flash_attention(q, k, v, causal=True)
        ro, rl = reference(q, k, v, True, 64**-0.5)
        ok = max_error(o, ro) < 2e-2 and max_error(lse, rl) < 1e-3
        print(f"forward 1x2/1x70x64 causal: {'ok' if ok else 'FAIL'}")
        status |= not ok
        q, k, v = random_qkv(torch, 2, 4, 2, 1, 150, 64, "float16")
        lens = [150, 33]
        o, lse = decode_attention(q, k, v, torch.tensor(lens, dtype=torch.int32))
        ro, rl = reference_decode(q, k, v, lens, 64**-0.5)
        ok = max_error(o, ro) < 2e-2 and max_error(lse, rl) < 1e-3
        print(f"decode 2x4/2 cache 150: {'ok' if ok else 'FAIL'}")
        status |= not ok
        stream_launcher(q, k, v, torch.tensor(lens, dtype=torch.int32), max(lens))()
        print("decode floor 2x4/2 cache 150: ok (streamed)")
        q, kc, vc, table = random_paged(torch, 2, 4, 2, 1, lens, 64, 64, "float16")
        o, lse = paged_decode_attention(q, kc, vc, table, torch.tensor(lens, dtype=torch.int32))
        ro, rl = paged_reference(q, kc, vc, table, lens, 64**-0.5)
        ok = max_error(o, ro) < 2e-2 and max_error(lse, rl) < 1e-3
        print(f"paged decode 2x4/2 page 64: {'ok' if ok else 'FAIL'}")
        status |= not ok
    return int(status)


def _print_rows(rows):
    for r in rows:
        if "unsupported" in r:
            print(
                f"{r['kind']:8s} {r['shape']:22s} {r['impl']:24s} unsupported: {r['unsupported']}"
            )
            continue
        ratio = f"{r['ratio_to_best_sdpa']:11.2f}" if r["ratio_to_best_sdpa"] else " " * 11
        contig = f"{r['ratio_to_contiguous']:8.2f}" if r.get("ratio_to_contiguous") else ""
        if r.get("ratio_to_floor"):
            contig = f"{r['ratio_to_floor']:8.3f}"
        print(f"{r['kind']:8s} {r['shape']:22s} {r['impl']:24s} {r['ms']:8.3f} "
              f"{r['rate']:7.0f} {r['unit']:5s} {ratio} {contig}", flush=True)  # fmt: skip


def bench(args) -> int:
    """Check and time everything on the GPU; print the table, write the JSON."""
    import torch

    if not torch.cuda.is_available():
        print("no CUDA GPU: use --dry-run for the CPU checks")
        return 1
    status, results = [0], []
    print(f"{'kind':8s} {'shape':22s} {'impl':24s} {'ms':>8s} {'rate':>13s} {'x best sdpa':>11s}"
          f" {'x contig|floor':>14s}")  # fmt: skip
    print("-" * 100)
    work = [(bench_forward, args.forward), (bench_decode, args.decode), (bench_paged, args.paged)]
    modes = ["dirty", "clean"] if args.flush == "both" else [args.flush]
    for mode in modes:  # both: every shape after the dirty flush, then after the clean one
        flush = make_flush(torch, mode)
        if len(modes) > 1:
            print(f"## L2 flush: {mode}")
        for fn, shapes in work:
            for shape in filter(None, shapes.split(",")):
                rows = [dict(r, flush=mode) for r in fn(torch, shape, flush, args, status)]
                _print_rows(rows)  # as each shape finishes: a run cut short still shows them
                results += rows
                torch.cuda.empty_cache()
        del flush
    meta = dict(
        date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        gpu=torch.cuda.get_device_name(),
        commit=git_commit(),
        command=" ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        torch=torch.__version__,
        flush=args.flush,
    )
    if args.out:
        Path(args.out).write_text(json.dumps(dict(meta=meta, results=results), indent=1) + "\n")
        print(f"wrote {args.out}")
    return status[0]


def main(argv=None) -> int:
    """Parse the arguments and run the benchmark (or the CPU dry run)."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--forward", default=FORWARD, help="b x h x s x d shapes, 'c' = causal")
    ap.add_argument("--decode", default=DECODE, help="b x h x hkv x kv_len x d shapes")
    ap.add_argument("--paged", default=PAGED, help="b x h x hkv x kv_len x d x page_size shapes")
    ap.add_argument("--per-config", action="store_true", help="also each decode kernel config")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved timing rounds")
    ap.add_argument("--reps", type=int, default=10, help="timed runs per kernel per round")
    ap.add_argument("--flush", choices=("dirty", "clean", "both"), default="dirty",
                    help="L2 flush before each timed run: dirty (zero 256 MiB), clean (then read "
                         "another 256 MiB) or both (every shape under each)")  # fmt: skip
    ap.add_argument("--out", default=None, help="write the results as JSON here")
    ap.add_argument("--dry-run", action="store_true", help="CPU only: check on the interpreter")
    args = ap.parse_args(argv)
    return dry_run() if args.dry_run else bench(args)


if __name__ == "__main__":
    sys.exit(main())
