"""Benchmark the quantized kernels beside their torch/cuBLAS counterparts, in one process.

On a Hopper GPU with torch: ``python bench/quantized.py [--cases fp8_matmul,fp8_cast]
[--out results.json]``. The benchmark is a table of cases (``CASES``); each checks its tilus
kernel against torch float32 first (NaN-poisoned outputs), then times every implementation
in interleaved rounds (``--rounds``, each the median of ``--reps`` CUDA-event timings with the
L2 flushed before each run, as ``bench/rowwise.py`` does) and reports the median of the
rounds:

* ``fp8_matmul``: ``examples/quantized/matmul_fp8.py`` with its default constructor (tuned
  over its autotune space on first use) beside ``torch._scaled_mm`` (cuBLAS fp8, bf16 out),
  both with per-tensor scales and both with per-row scales, at 8192^3, 4096^3 and a ragged
  shape: TFLOPS and the ratio to cuBLAS in its default mode, which promotes the tensor
  cores' fp32 sums into full fp32 ones every few K steps; the ``cuBLAS fast`` rows are
  ``use_fast_accum=True``, which does not, as ``MatmulFP8`` does not; ``tilus precise`` is
  ``MatmulFP8Precise``, which does (each printed with its error against the float32
  reference: the fast forms' grows with K);
* ``fp8_cast``: ``examples/quantized/per_token_cast.py`` (bf16 -> e4m3 with per-row scales)
  beside ``copy_`` of the same number of bytes (the HBM ceiling) and torch eager: GB/s (bytes
  read + written) and the ratio to the copy.
* ``w4a16``: ``matmul_wx_a16()`` of ``examples/quantized/matmul_wx_a16.py`` as a user calls
  it: on weights made once by ``prepare_weights`` (uint4b, group-128 fp16 scales), the kernel
  it picks for M with its default constructor tuned on first use, beside fp16 cuBLAS
  (``torch.matmul(x, w_fp16.T)``) at M = 1, 16, 4096 with N = K = 8192 and N = 28672,
  K = 4096, and the other weight types (``--wx-types``, default ``WX_TYPES``) at M = 1 (or
  ``--wx-m``), N = K = 8192: GB/s of the weight read (packed codes and scales, or fp16), the
  ratio to cuBLAS, and below the table the kernel and tuned config of each tilus row.
* ``dequant``: ``DequantWx`` of ``examples/quantized/matmul_wx_a16_dequant.py`` (the fp16
  weights of the large-M path), tuned, checked bit-exact against torch's dequantize, beside a
  ``copy_`` that moves as many bytes: GB/s (read + written) and the ratio to the copy.

``--flush dirty`` (the default) empties the L2 before each timed run with a 256 MiB
``zero_()``, which leaves it full of dirty lines: the timed kernel's first reads also write
those back. ``--flush clean`` then reads another 256 MiB (outside the timed span), so the L2
holds clean lines only, as in a decode loop whose previous layers read their weights.
``--flush rotate`` (the w4a16 case only) flushes nothing: each implementation runs back to
back over random problems of the shape that together are several L2s (``bench/rowwise.py``),
as the layers of a decode loop run.

``--dry-run`` needs no GPU: every case runs its tilus kernel on the interpreter at a tiny
ragged size and checks it.
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
for p in (REPO, REPO / "bench", REPO / "examples" / "quantized"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from l2_flush import FLUSHES, make_flush  # noqa: E402 - the L2 flush protocols
from rowwise import git_commit, interleaved_rounds, rotated_rounds  # noqa: E402 - timing helpers

MATMUL_SHAPES = [(8192, 8192, 8192), (4096, 4096, 4096), (4000, 3008, 4000)]
CAST_SHAPES = [(4096, 7168), (16384, 4096), (3000, 5000)]


@dataclass(frozen=True)
class Case:
    """One benchmark case: its CPU check and its GPU timing.

    Attributes:
        name: what ``--cases`` selects it by.
        dry_run: ``() -> bool``, the tilus kernel on the interpreter at a tiny size, checked.
        bench: ``(torch, args, flush) -> (rows, ok)``: result dicts (``impl``, ``shape``,
            ``ms``, ``metric``, ``value``, ``ratio``, ``rounds_ms``) and whether every check
            passed.
    """

    name: str
    dry_run: Callable[[], bool]
    bench: Callable


def _interleaved(runs: dict, torch, flush, args) -> dict:
    """name -> list of per-round median ms, the implementations interleaved in each round."""
    return interleaved_rounds(runs, torch, flush, args.rounds, args.reps)


# --- fp8 matmul ---------------------------------------------------------------------------------


def fp8_matmul_dry() -> bool:
    """A pinned config of MatmulFP8 and MatmulFP8Precise, each with both kinds of scales, on
    the interpreter at a small ragged size."""
    import matmul_fp8
    import torch

    import tilus

    ok_all = True
    for cls in (matmul_fp8.MatmulFP8, matmul_fp8.MatmulFP8Precise):
        for rs in (True, False):
            cfg = dict(num_stages=3, block_m=128, block_n=128, block_k=128, swizzle=4)
            kernel = cls(num_sms=2, row_scales=rs, **cfg)
            with tilus.option.scoped(interpret=True):
                ok, err, note, _, _ = matmul_fp8.run_once(kernel, torch, 130, 136, 160, "cpu", rs)
            print(f"fp8_matmul {cls.__name__} row_scales={rs} 130x136x160 interpreter max err "
                  f"{err:.1e} {'ok' if ok else 'FAIL ' + note}")  # fmt: skip
            ok_all &= ok
    return ok_all


def fp8_matmul_bench(torch, args, flush):
    """tilus fp8 matmul vs torch._scaled_mm, per-tensor and per-row scales (the tuned config
    of each tilus row listed below the table)."""
    import matmul_fp8
    from rowwise import winner

    rows, ok_all = [], True
    # the tensor cores' sums over all of K (as cuBLAS's use_fast_accum), and promoted every K tile
    kernels = {}
    for cls, what in (
        (matmul_fp8.MatmulFP8, "tilus"),
        (matmul_fp8.MatmulFP8Precise, "tilus precise"),
    ):
        for rs in (True, False):
            kernels[f"{what} ({'row' if rs else 'tensor'})"] = (cls(row_scales=rs), rs)
    shapes = MATMUL_SHAPES[: args.fp8_matmul_shapes or None]
    for m, n, k in shapes:
        a8, b8, sa, sb, scale = matmul_fp8.quantized_inputs(torch, m, n, k, "cuda")
        one = torch.ones((), device="cuda")
        runs, errs, refs = {}, {}, {}
        for label, (kernel, rs) in kernels.items():
            tag = "row" if rs else "tensor"
            c = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
            kernel(m, n, k, a8, b8, sa, sb, scale, c)  # compile + tune on first use
            if rs not in refs:
                refs[rs] = matmul_fp8.reference(torch, a8, b8, sa, sb, scale, rs)
            ok, err, note = matmul_fp8.check(torch, c, refs[rs])
            if not ok:
                print(f"fp8_matmul {m}x{n}x{k} {label}: error {err:.2e} {note} FAILS")
                ok_all = False
            t = (m, n, k, a8, b8, sa, sb, scale, c)
            runs[label] = lambda kern=kernel, t=t: kern(*t)
            errs[label] = err
        for rs in (True, False):
            tag = "row" if rs else "tensor"
            if rs:
                sa_t, sb_t = (sa * scale)[:, None].contiguous(), sb[None, :].contiguous()
            else:
                sa_t, sb_t = one * scale, one
            for fast in (False, True):  # cuBLAS's default promotes the fp32 sums (precise)
                name = f"cuBLAS{' fast' if fast else ''} ({tag})"
                runs[name] = lambda sa_t=sa_t, sb_t=sb_t, a8=a8, b8=b8, f=fast: torch._scaled_mm(
                    a8, b8.t(), scale_a=sa_t, scale_b=sb_t, out_dtype=torch.bfloat16,
                    use_fast_accum=f,
                )  # fmt: skip
                _, errs[name], _ = matmul_fp8.check(torch, runs[name](), refs[rs])
        print(f"fp8_matmul {m}x{n}x{k} max |C - ref| / max |ref|: "
              + ", ".join(f"{k_} {v:.2e}" for k_, v in errs.items()))  # fmt: skip
        del refs
        rounds = _interleaved(runs, torch, flush, args)
        configs = {label: winner(kern) for label, (kern, _) in kernels.items()}
        for name, ts in rounds.items():
            ms = statistics.median(ts)
            base = "cuBLAS (row)" if "(row)" in name else "cuBLAS (tensor)"  # the default
            rows.append(dict(case="fp8_matmul", impl=name, shape=f"{m}x{n}x{k}", ms=ms,
                             metric="TFLOPS", value=2 * m * n * k / ms / 1e9,
                             ratio=statistics.median(rounds[base]) / ms, rounds_ms=ts,
                             config=configs.get(name, "")))  # fmt: skip
    return rows, ok_all


# --- per-token fp8 cast --------------------------------------------------------------------------


def fp8_cast_dry() -> bool:
    """Two pinned configs of PerTokenCast on the interpreter at a small ragged size."""
    import per_token_cast
    import torch

    import tilus

    ok_all = True
    for c in per_token_cast.CPU_CONFIGS:
        cfg = dict(zip(per_token_cast.KEYS, c))
        with tilus.option.scoped(interpret=True):
            kernel = per_token_cast.PerTokenCast(**cfg, num_sms=2)
            ok, note, *_ = per_token_cast.run_once(kernel, torch, 7, 300, "cpu")
        label = " ".join(f"{k}={v}" for k, v in cfg.items())
        print(f"fp8_cast {label} 7x300 interpreter {note} {'ok' if ok else 'FAIL'}")
        ok_all &= ok
    return ok_all


def fp8_cast_bench(torch, args, flush):
    """tilus per-token cast vs copy_ of the same bytes and torch eager (the tuned config
    listed below the table)."""
    import per_token_cast
    from rowwise import winner

    rows, ok_all = [], True
    kernel = per_token_cast.PerTokenCast()
    for m, n in CAST_SHAPES:
        ok, note, x, q, s = per_token_cast.run_once(kernel, torch, m, n, "cuda")
        if not ok:
            print(f"fp8_cast {m}x{n}: {note} FAILS")
            ok_all = False
        moved = 2 * m * n + m * n + 4 * m  # bf16 read, fp8 and the scales written
        src = torch.empty(moved // 2, dtype=torch.uint8, device="cuda")
        dst = torch.empty_like(src)
        runs = {
            "copy": lambda d=dst, s=src: d.copy_(s),
            "tilus": lambda t=(m, n, x, q, s): kernel(*t),
            "torch eager": lambda x=x: per_token_cast.reference(torch, x),
        }
        rounds = _interleaved(runs, torch, flush, args)
        copy_ms = statistics.median(rounds["copy"])
        tuned = winner(kernel)
        for name, ts in rounds.items():
            ms = statistics.median(ts)
            rows.append(dict(case="fp8_cast", impl=name, shape=f"{m}x{n}", ms=ms,
                             metric="GB/s", value=moved / ms / 1e6, ratio=copy_ms / ms,
                             rounds_ms=ts, config=tuned if name == "tilus" else ""))  # fmt: skip
    return rows, ok_all


# --- W4A16 matmul ---------------------------------------------------------------------------

#: (M, N, K) of the W4A16 rows: decode (M = 1, 16) and prefill (M = 4096) on two LLM weights
W4A16_SHAPES = [(m, n, k) for n, k in [(8192, 8192), (28672, 4096)] for m in (1, 16, 4096)]
W4A16_GROUP = 128
#: the other weight types timed at decode (M = 1, N = K = 8192); the issue's target for each
#: is a speed-up over fp16 cuBLAS of 0.75 x 16 / bits
WX_TYPES = ["uint1b", "uint2b", "uint3b", "int8", "float4_e2m1", "float6_e3m2"]


def w4a16_dry() -> bool:
    """The W4A16 kernels on the interpreter at small ragged sizes: the tensor-core kernel
    unsplit and split-K, the decode kernel, the pipelined one, the persistent prefill one,
    and the decode kernel on an 8-bit and a sub-byte float type."""
    import matmul_wx_a16
    import matmul_wx_a16_decode
    import matmul_wx_a16_pipe
    import matmul_wx_a16_prefill

    import tilus

    ok_all = True
    runs = [
        (
            f"w4a16 split_k={split}",
            tilus.uint4b,
            11,
            100,
            512,
            None,
            dict(block_m=16, block_k=64, reg_a=True, split_k=split),
        )
        for split in (1, 4)
    ]
    runs += [
        ("w4a16 decode", tilus.uint4b, 3, 70, 384, matmul_wx_a16_decode.MatmulWxA16Decode,
         dict(rows=2, reps=1, block_m=4, stages=4)),
        ("w4a16 pipe", tilus.uint4b, 3, 70, 384, matmul_wx_a16_pipe.MatmulWxA16Pipe,
         matmul_wx_a16_pipe.pinned(num_stages=2, split_k=2)),
        ("w4a16 prefill", tilus.uint4b, 37, 300, 384, matmul_wx_a16_prefill.MatmulWxA16Prefill,
         dict(num_sms=3, **matmul_wx_a16_prefill.pinned(block_m=16, num_stages=3))),
        ("wxa16 int8 decode", tilus.int8, 2, 9, 256, matmul_wx_a16_decode.MatmulWxA16Decode,
         dict(rows=1, reps=1, block_m=2, stages=0)),
        ("wxa16 float6_e3m2 decode", tilus.float6_e3m2, 2, 9, 256,
         matmul_wx_a16_decode.MatmulWxA16Decode, dict(rows=1, reps=1, block_m=2, stages=3)),
    ]  # fmt: skip
    for name, wdtype, m, n, k, kernel, cfg in runs:
        with tilus.option.scoped(interpret=True):
            err = matmul_wx_a16.run_interp(wdtype, W4A16_GROUP, m, n, k, kernel=kernel, **cfg)
        ok = err < 1e-2
        print(f"{name} {m}x{n}x{k} interpreter max rel err {err:.1e} {'ok' if ok else 'FAIL'}")
        ok_all &= ok
    import matmul_wx_a16_mma

    with tilus.option.scoped(interpret=True):
        err = matmul_wx_a16_mma.run_interp(tilus.uint4b, W4A16_GROUP, 3, 70, 384, block_m=8,
                                           split_k=2, unroll=2)  # fmt: skip
    ok = err < 1e-2
    print(f"w4a16 mma 3x70x384 interpreter max rel err {err:.1e} {'ok' if ok else 'FAIL'}")
    ok_all &= ok
    # the user entry on prepared weights at both M regimes (the mma kernel, the pipelined one)
    for m in (3, matmul_wx_a16.MMA_MAX_M + 5):
        err, name = matmul_wx_a16.run_entry(tilus.uint4b, W4A16_GROUP, m, 70, 384)
        ok = err < 1e-2
        print(f"w4a16 entry {m}x70x384 ({name}) interpreter max rel err {err:.1e} "
              f"{'ok' if ok else 'FAIL'}")  # fmt: skip
        ok_all &= ok
    return ok_all


def _w4a16_rows(torch, args, flush, m, n, k, wname):
    """Check and time ``matmul_wx_a16`` on weights made once by ``prepare_weights`` (the
    kernel it picks for M, its default constructor tuned on first use), as a user calls it,
    beside ``torch.matmul(x, w_fp16.T)`` on the same dequantized weights."""
    import matmul_wx_a16
    from rowwise import winner

    import tilus

    g, wdtype = W4A16_GROUP, getattr(tilus, wname)
    x, w, s, w16 = matmul_wx_a16.torch_problem(torch, m, n, k, g, wdtype)
    weights = matmul_wx_a16.prepare_weights(w, s, wdtype=wdtype, group=g)
    y = torch.full((m, n), float("nan"), dtype=torch.float16, device="cuda")
    matmul_wx_a16.matmul_wx_a16(x, weights, out=y)  # compile + tune
    ref = torch.matmul(x, w16.T).float()
    err = ((y.float() - ref).abs().max() / ref.abs().max()).item()
    ok = not torch.isnan(y).any() and err < 1e-2
    if not ok:
        print(f"w4a16 {m}x{n}x{k} {wname}: max rel error {err:.2e} FAILS")
    del ref
    kernel, wbytes = matmul_wx_a16.pick_kernel(m, weights)
    config = f"{kernel.script_cls.__name__} {winner(kernel)}"
    tag = "tilus w4a16" if wname == "uint4b" else f"tilus {wname}"
    runs = {
        tag: lambda t=(x, weights, y): matmul_wx_a16.matmul_wx_a16(t[0], t[1], out=t[2]),
        "cuBLAS fp16": lambda x=x, w16=w16: torch.matmul(x, w16.T),
    }
    moved = {tag: wbytes.numel() + 2 * s.numel(), "cuBLAS fp16": 2 * n * k}
    if args.flush == "rotate":
        rounds = rotated_rounds(_w4a16_sets(torch, runs, moved, tag, m, n, k, wdtype, w.shape),
                                torch, args.rounds, args.reps)  # fmt: skip
    else:
        rounds = _interleaved(runs, torch, flush, args)
    base = statistics.median(rounds["cuBLAS fp16"])
    rows = []
    for name, ts in rounds.items():
        ms = statistics.median(ts)
        rows.append(dict(case="w4a16", impl=name, shape=f"{m}x{n}x{k}", ms=ms,
                         metric="GB/s", value=moved[name] / ms / 1e6, ratio=base / ms,
                         rounds_ms=ts, config=config if name == tag else ""))  # fmt: skip
    return rows, ok


def _w4a16_sets(torch, runs, moved, tag, m, n, k, wdtype, wshape) -> dict:
    """The ``rotate`` protocol's runs: each of ``runs`` (on the checked problem) and more
    random problems of the shape, enough that no set is still in the L2 when its turn comes
    (``rowwise.rotation_sets`` of each implementation's bytes): prepared random weight bytes
    for tilus, random fp16 weights for cuBLAS."""
    import matmul_wx_a16
    from rowwise import rotation_sets

    g = W4A16_GROUP
    out = {name: [fn] for name, fn in runs.items()}
    for _ in range(1, rotation_sets(moved[tag])):
        x = torch.randn(m, k, dtype=torch.float16, device="cuda")
        w = torch.randint(0, 256, tuple(wshape), dtype=torch.uint8, device="cuda")
        s = (torch.rand(n, k // g, device="cuda") * 0.02 + 0.002).half()
        weights = matmul_wx_a16.prepare_weights(w, s, wdtype=wdtype, group=g)
        y = torch.empty((m, n), dtype=torch.float16, device="cuda")
        out[tag].append(lambda t=(x, weights, y): matmul_wx_a16.matmul_wx_a16(t[0], t[1], out=t[2]))
    for _ in range(1, rotation_sets(moved["cuBLAS fp16"])):
        x = torch.randn(m, k, dtype=torch.float16, device="cuda")
        w16 = torch.randn(n, k, dtype=torch.float16, device="cuda")
        out["cuBLAS fp16"].append(lambda x=x, w16=w16: torch.matmul(x, w16.T))
    return out


def w4a16_bench(torch, args, flush):
    """tilus W4A16 (uint4b, group 128; ``matmul_wx_a16`` on prepared weights, tuned on first
    use) vs ``torch.matmul(x, w_fp16.T)`` on the same dequantized weights at
    ``W4A16_SHAPES``, then the ``--wx-types`` at decode; GB/s of each one's weight read
    (packed codes and scales, or fp16), ratio = cuBLAS ms / tilus ms."""
    rows, ok_all = [], True
    keep = {int(m) for m in args.w4a16_m.split(",") if m} if args.w4a16_m else None
    cases = [(m, n, k, "uint4b") for m, n, k in W4A16_SHAPES if keep is None or m in keep]
    wx_m = [int(m) for m in args.wx_m.split(",") if m]
    cases += [(m, 8192, 8192, t) for m in wx_m for t in args.wx_types.split(",") if t]
    for m, n, k, wname in cases:
        r, ok = _w4a16_rows(torch, args, flush, m, n, k, wname)
        rows += r
        ok_all &= ok
    return rows, ok_all


# --- the dequantize kernel (fp16 weights for the large-M path) ---------------------------

#: (N, K) of the weights dequantized, and their types (group 128)
DEQUANT_SHAPES = [(8192, 8192), (28672, 4096)]
DEQUANT_TYPES = ["uint4b", "uint3b", "int8"]


def dequant_dry() -> bool:
    """``DequantWx`` on the interpreter, bit-exact at a ragged size for two types."""
    import matmul_wx_a16_dequant as dq

    import tilus

    ok_all = True
    for wdtype in (tilus.uint4b, tilus.uint3b):
        bad = dq.run_dequant(wdtype, 64, 37, 5 * 64, rows=2, reps=1, warps=4)
        print(f"dequant {wdtype} 37x320 interpreter: {bad} elements differ "
              f"{'ok' if bad == 0 else 'FAIL'}")  # fmt: skip
        ok_all &= bad == 0
    return ok_all


def dequant_bench(torch, args, flush):
    """``DequantWx`` (its default constructor, tuned) beside a ``copy_`` that moves as many
    bytes (read + written); ratio = copy ms / tilus ms, GB/s of the bytes moved."""
    import matmul_wx_a16 as ex
    import matmul_wx_a16_dequant as dq
    from rowwise import winner

    import tilus

    rows, ok_all = [], True
    for n, k in DEQUANT_SHAPES:
        for wname in DEQUANT_TYPES:
            wdtype = getattr(tilus, wname)
            _x, w, s, w16 = ex.torch_problem(torch, 1, n, k, 128, wdtype)
            out = torch.full((n, k), float("nan"), dtype=torch.float16, device="cuda")
            kernel = dq.DequantWx(wdtype, 128)
            kernel(n, k, w, s, out)  # compile + tune
            ok = bool(torch.equal(out.view(torch.int16), w16.view(torch.int16)))
            if not ok:
                print(f"dequant {wname} {n}x{k}: differs from the torch dequantize")
            ok_all &= ok
            moved = w.numel() + 2 * s.numel() + 2 * n * k
            src = torch.empty(moved // 2, dtype=torch.uint8, device="cuda")
            dst = torch.empty_like(src)
            tag = f"tilus {wname}"
            runs = {
                tag: lambda a=(kernel, n, k, w, s, out): a[0](*a[1:]),
                "copy_": lambda d=dst, c=src: d.copy_(c),
            }
            rounds = _interleaved(runs, torch, flush, args)
            base = statistics.median(rounds["copy_"])
            for name, ts in rounds.items():
                ms = statistics.median(ts)
                rows.append(dict(case="dequant", impl=name, shape=f"{n}x{k}", ms=ms,
                                 metric="GB/s", value=moved / ms / 1e6, ratio=base / ms,
                                 rounds_ms=ts,
                                 config=f"DequantWx {winner(kernel)}" if name == tag else ""))  # fmt: skip
    return rows, ok_all


#: The cases, in the order they run (more quantized kernels add their rows here).
CASES = [
    Case("fp8_matmul", fp8_matmul_dry, fp8_matmul_bench),
    Case("fp8_cast", fp8_cast_dry, fp8_cast_bench),
    Case("w4a16", w4a16_dry, w4a16_bench),
    Case("dequant", dequant_dry, dequant_bench),
]


def _selected(names: str) -> list[Case]:
    want = [c.strip() for c in names.split(",") if c.strip()]
    known = {c.name: c for c in CASES}
    bad = [w for w in want if w not in known]
    if bad:
        raise SystemExit(f"unknown case(s) {bad}; known: {sorted(known)}")
    return [known[w] for w in want]


def bench(args) -> int:
    """Check and time the selected cases on the GPU; print the table, write the JSON."""
    import torch

    if not torch.cuda.is_available():
        print("no CUDA GPU: use --dry-run for the CPU checks")
        return 1
    flush = None if args.flush == "rotate" else make_flush(torch, args.flush)
    results, status = [], 0
    for case in _selected(args.cases):
        rows, ok = case.bench(torch, args, flush)
        results += rows
        status |= not ok
    header = f"{'case':11s} {'shape':15s} {'impl':16s} {'ms':>9s} {'value':>13s} {'ratio':>6s}"
    print(header)
    print("-" * len(header))
    for r in results:
        val = f"{r['value']:.0f} {r['metric']}"
        print(f"{r['case']:11s} {r['shape']:15s} {r['impl']:16s} {r['ms']:9.4f} {val:>13s} "
              f"{r['ratio']:6.2f}")  # fmt: skip
    for r in results:
        if r.get("config"):
            print(f"{r['case']} {r['shape']} {r['impl']}: {r['config']}")
    print(f"L2 flush before each run: {args.flush}")
    print("ratio: fp8_matmul to cuBLAS with the same scales; fp8_cast to the copy; w4a16 to "
          "cuBLAS fp16 (GB/s: of the weight read); dequant to a copy_ of as many bytes")  # fmt: skip
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
    return status


def dry_run(args) -> int:
    """Every selected case's tilus kernel on the interpreter, checked."""
    ok = True
    for case in _selected(args.cases):
        ok &= case.dry_run()
    return 0 if ok else 1


def main(argv=None) -> int:
    """Parse the arguments and run the benchmark (or the CPU dry run)."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--cases", default=",".join(c.name for c in CASES))
    ap.add_argument("--rounds", type=int, default=5, help="interleaved timing rounds")
    ap.add_argument("--reps", type=int, default=20, help="timed runs per kernel per round")
    ap.add_argument("--wx-types", default=",".join(WX_TYPES),
                    help="w4a16: the other weight types timed at --wx-m (comma-separated)")  # fmt: skip
    ap.add_argument("--wx-m", default="1",
                    help="w4a16: the M the --wx-types are timed at (comma-separated)")  # fmt: skip
    ap.add_argument("--w4a16-m", default="",
                    help="w4a16: only these M of W4A16_SHAPES (comma-separated; default all)")  # fmt: skip
    ap.add_argument("--fp8-matmul-shapes", type=int, default=0,
                    help="fp8_matmul: only the first this many of MATMUL_SHAPES (0: all)")  # fmt: skip
    ap.add_argument("--flush", default="dirty", choices=(*FLUSHES, "rotate"),
                    help="the L2 flush before each timed run: dirty (a 256 MiB write) or clean "
                         "(the write, then a 256 MiB read); rotate (w4a16 only): no flush, "
                         "back to back over several L2s of input sets")  # fmt: skip
    ap.add_argument("--out", default=None, help="write the results as JSON here")
    ap.add_argument("--dry-run", action="store_true", help="CPU only: check on the interpreter")
    args = ap.parse_args(argv)
    other = [c.name for c in _selected(args.cases) if c.name != "w4a16"]
    if args.flush == "rotate" and other:
        raise SystemExit(f"--flush rotate times the w4a16 case only; also selected: {other}")
    return dry_run(args) if args.dry_run else bench(args)


if __name__ == "__main__":
    sys.exit(main())
