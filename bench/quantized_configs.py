"""Every config of the fp8 and cast kernels timed pinned, beside its anchor (H200).

``python bench/quantized_configs.py [--cases cast,matmul,lowbit] [--reps 10] [--out f.json]``
prints one row per (kernel, config, shape): milliseconds (median of CUDA-event timings with a
cold L2), the metric (GB/s of bytes moved, or TFLOPS), the ratio to the anchor (``copy_`` of the
same bytes for the casts, ``torch._scaled_mm`` for the fp8 matmul) and the registers. Each
config is checked first (NaN-poisoned output against torch, or the interpreter for the packed
casts); a config that fails its check is listed as such. Every space is compiled up front in
parallel (``tilus.compile``), so the timings do not wait for NVRTC one config at a time.
``bench/quantized.py`` times what a user gets (the tuned default); this script says which
config wins and by how much.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
for p in (REPO, REPO / "bench", REPO / "examples" / "quantized"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from rowwise import config_text  # noqa: E402 - the shared timing helpers
from rowwise import time_ms as _time_ms  # noqa: E402

import tilus  # noqa: E402

CAST_SHAPES = [(4096, 7168), (16384, 4096), (3000, 5000)]
MATMUL_SHAPE = (8192, 8192, 8192)
LOWBIT_NUMEL = 1 << 28
DEV = "cuda"  # "cpu" in a --dry-run: the interpreter at tiny sizes, wall-clock times


def _cast_space() -> list:
    from tilus.kernels.cast import SPACE

    return [dict(zip(("block", "warps", "vector", "per_sm"), c)) for c in SPACE]


EXTRA: dict = {}  # constructor arguments of the persistent kernels (2 "SMs" in a dry run)


def _dry_run_sizes() -> None:
    global DEV, CAST_SHAPES, MATMUL_SHAPE, LOWBIT_NUMEL, EXTRA
    DEV, CAST_SHAPES, MATMUL_SHAPE, LOWBIT_NUMEL = "cpu", [(7, 300)], (130, 136, 160), 3 * 4096 + 77
    EXTRA = {"num_sms": 2}


def time_ms(fn, torch, flush, reps):
    """rowwise's CUDA-event median on a GPU; one wall-clock run in a dry run."""
    if DEV == "cuda":
        return _time_ms(fn, torch, flush, reps)
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1e3


def _row(rows, **kw):
    rows.append(kw)
    reg = kw.get("registers", "")
    val = f"{kw['value']:.0f} {kw['metric']}" if "value" in kw else kw.get("note", "")
    ms = f"{kw['ms']:.4f}" if "ms" in kw else "-"
    ratio = f"{kw['ratio']:.2f}" if "ratio" in kw else "-"
    print(f"{kw['kernel']:18s} {kw['shape']:15s} {kw['config']:44s} {ms:>8s} {val:>14s} "
          f"{ratio:>6s} {reg!s:>4s}", flush=True)  # fmt: skip


def _compile_job(job) -> str | None:
    """Build one pinned kernel into the cache (in a worker process); None, or why it failed."""
    import importlib

    import tilus

    module, name, args, kwargs, values = job
    cls = getattr(importlib.import_module(module), name)
    args = [getattr(tilus, a[1:]) if isinstance(a, str) and a[:1] == "@" else a for a in args]
    try:
        tilus.compile(cls(*args, **kwargs), *values)
    except Exception as e:  # noqa: BLE001 - the timing reports the failure
        return f"{type(e).__name__}: {e}"
    return None


def precompile(pool, jobs) -> list:
    """Futures of ``_compile_job`` over ``jobs``, ``(module, class, args, kwargs, call)``:
    every config transpiled and compiled in worker processes (the transpiler holds the GIL), so
    the timings find each kernel in the cache; tensors in ``call`` become None (a compile does
    not read them), dtypes in ``args`` are passed by name."""
    if pool is None:
        return []

    def plain(v):
        return None if hasattr(v, "data_ptr") or hasattr(v, "storage") else v

    def dtype(v):
        return f"@{v.name}" if hasattr(v, "nbits") else v

    return [pool.submit(_compile_job, (mod, cls, [dtype(a) for a in args], kw,
                                       [plain(v) for v in call]))
            for mod, cls, args, kw, call in jobs]  # fmt: skip


SKIP_REGS = False  # --no-regs: leave the registers column out (each lookup re-transpiles)
ONLY_CASTS: list = []  # --lowbit-casts: the packed casts timed (default: bench/lowbit_casts.py's)
ONLY_CLASSES: list = []  # --matmul-classes: the fp8 matmul classes timed (default: all four)


def _registers(kernel, *args) -> int | str:
    """Registers per thread of a pinned kernel (compiled already: a cache hit)."""
    import tilus

    if SKIP_REGS:
        return "-"
    try:
        return tilus.compile(kernel, *args).resources.get("registers", "?")
    except Exception:  # noqa: BLE001 - only a column of the table
        return "?"


def cast_case(torch, flush, reps, rows):
    """Every PerTokenCast config at the bench's shapes, against ``copy_``."""
    import per_token_cast as ptc

    space = ptc.PerTokenCast().configs + [dict(zip(CAST_KEYS, c)) for c in CAST_PROBES]
    for m, n in CAST_SHAPES:
        x = (torch.randn(m, n, device=DEV) * torch.rand(m, 1, device=DEV) * 10).to(torch.bfloat16)
        x[m // 2] = 0  # an all-zero row
        q_ref, s_ref = ptc.reference(torch, x)
        codes_ref = q_ref.view(torch.uint8)
        q = torch.empty(m, n, dtype=torch.float8_e4m3fn, device=DEV)
        s = torch.empty(m, dtype=torch.float32, device=DEV)
        moved = 3 * m * n + 4 * m
        src = torch.empty(moved // 2, dtype=torch.uint8, device=DEV)
        dst = torch.empty_like(src)
        copy_ms = time_ms(lambda d=dst, c=src: d.copy_(c), torch, flush, reps)
        _row(rows, kernel="copy", shape=f"{m}x{n}", config="-", ms=copy_ms, metric="GB/s",
             value=moved / copy_ms / 1e6, ratio=1.0)  # fmt: skip
        for cfg in space:
            k = ptc.PerTokenCast(**cfg, **EXTRA)
            label = config_text(cfg)
            try:
                q.view(torch.uint8).fill_(0x7F)  # NaN codes
                s.fill_(float("nan"))
                k(m, n, x, q, s)
                off = int((q.view(torch.uint8) != codes_ref).sum())
                if off or not torch.allclose(s, s_ref, rtol=1e-6, atol=0):
                    _row(rows, kernel="PerTokenCast", shape=f"{m}x{n}", config=label,
                         note=f"FAIL {off} codes")  # fmt: skip
                    continue
                ms = time_ms(lambda k=k, t=(m, n, x, q, s): k(*t), torch, flush, reps)
            except Exception as e:  # noqa: BLE001 - a config that fails is listed
                _row(rows, kernel="PerTokenCast", shape=f"{m}x{n}", config=label,
                     note=f"{type(e).__name__}")  # fmt: skip
                continue
            _row(rows, kernel="PerTokenCast", shape=f"{m}x{n}", config=label, ms=ms,
                 metric="GB/s", value=moved / ms / 1e6, ratio=copy_ms / ms,
                 registers=_registers(k, m, n, x, q, s))  # fmt: skip


def matmul_kernels(mf) -> list:
    """(class, config) of the matmul probe: every config of the four spaces, and the cluster
    ones also on a grid of fewer clusters (two blocks of ~210 KB of shared memory must fit one
    GPC: if fewer clusters than half the SMs can be resident, a full grid runs a second wave)."""
    out = []
    clustered = (mf.MatmulFP8Cluster, mf.MatmulFP8ClusterM)
    for cls in (mf.MatmulFP8PingPong, *clustered, mf.MatmulFP8):
        if ONLY_CLASSES and cls.__name__ not in ONLY_CLASSES:
            continue
        for cfg in cls().configs:
            out.append((cls, dict(cfg)))
            if cls in clustered and not EXTRA:
                out.append((cls, dict(cfg, num_sms=mf.sm_count() - 12)))
    return out


def matmul_case(torch, flush, reps, rows):
    """Every config of the four fp8 matmuls at 8192^3 with row scales, checked on
    the GPU against torch float32 (NaN-poisoned C), timed against ``torch._scaled_mm``."""
    import matmul_fp8 as mf

    m, n, k = MATMUL_SHAPE
    a8, b8, sa, sb, scale = mf.quantized_inputs(torch, m, n, k, DEV)
    c = torch.empty(m, n, dtype=torch.bfloat16, device=DEV)
    shape = f"{m}x{n}x{k}"
    args = (m, n, k, a8, b8, sa, sb, scale, c)
    kernels = matmul_kernels(mf)
    ref = mf.reference(torch, a8, b8, sa, sb, scale)
    ref_max = float(ref.abs().max())
    sa_t, sb_t = (sa * scale)[:, None].contiguous(), sb[None, :].contiguous()

    def cublas():
        if DEV == "cpu":  # a dry run: a float32 matmul stands in
            return torch.matmul(a8.float(), b8.float().T)
        return torch._scaled_mm(a8, b8.t(), scale_a=sa_t, scale_b=sb_t, out_dtype=torch.bfloat16)

    cublas()
    base = time_ms(cublas, torch, flush, reps)
    _row(rows, kernel="cuBLAS (row)", shape=shape, config="-", ms=base, metric="TFLOPS",
         value=2 * m * n * k / base / 1e9, ratio=1.0)  # fmt: skip
    for cls, cfg in kernels:
        kern = cls(**{**cfg, **EXTRA})
        label = config_text(cfg)
        try:
            c.fill_(float("nan"))
            kern(*args)
            err = float((c.float() - ref).abs().max()) / ref_max  # NaN when C holds a NaN
            if not err < mf.TOLERANCE:
                _row(rows, kernel=cls.__name__, shape=shape, config=label, note=f"FAIL {err:.1e}")
                continue
            ms = time_ms(lambda kern=kern: kern(*args), torch, flush, reps)
        except Exception as e:  # noqa: BLE001 - a config that fails is listed
            _row(rows, kernel=cls.__name__, shape=shape, config=label,
                 note=f"{type(e).__name__}: {str(e).splitlines()[0][:60]}")  # fmt: skip
            continue
        _row(rows, kernel=cls.__name__, shape=shape, config=label, ms=ms, metric="TFLOPS",
             value=2 * m * n * k / ms / 1e9, ratio=base / ms,
             registers=_registers(kern, *args))  # fmt: skip
    base2 = time_ms(cublas, torch, flush, reps)  # the clock drifts: the anchor again at the end
    _row(rows, kernel="cuBLAS (row)", shape=shape, config="again", ms=base2, metric="TFLOPS",
         value=2 * m * n * k / base2 / 1e9, ratio=base / base2)  # fmt: skip


#: PerTokenCast configs timed beside its tuned space (rows, warps, per_thread, blocks_per_sm,
#: vector, stages, passes, min_blocks): other ring depths and widths, fixed warps a row with
#: and without a register cap, and the re-read form (passes=2)
CAST_KEYS = ("rows", "warps", "per_thread", "blocks_per_sm", "vector", "stages", "passes",
             "min_blocks")  # fmt: skip
CAST_PROBES = [
    (2, 0, 2, 0, 8, 3, 1, 0), (1, 0, 2, 0, 8, 0, 1, 0), (2, 0, 1, 0, 16, 0, 1, 0),
    (1, 4, 1, 0, 8, 0, 1, 0), (1, 4, 1, 0, 8, 0, 1, 8), (1, 8, 1, 0, 8, 0, 1, 0),
    (1, 8, 1, 0, 8, 0, 1, 4), (1, 16, 1, 0, 8, 0, 1, 0), (1, 0, 1, 0, 8, 0, 1, 0),
    (1, 0, 1, 0, 8, 0, 1, 2), (1, 2, 1, 0, 8, 0, 2, 8), (1, 4, 1, 0, 8, 0, 2, 4),
    (1, 4, 2, 0, 8, 0, 2, 4), (1, 4, 1, 0, 16, 0, 2, 4), (1, 8, 1, 0, 8, 0, 2, 4),
    (1, 8, 2, 0, 8, 0, 2, 4), (1, 8, 1, 0, 16, 0, 2, 4), (1, 16, 1, 0, 8, 0, 2, 2),
    (1, 32, 1, 0, 8, 0, 2, 2),
]  # fmt: skip

#: (block, warps, vector, per_sm) of the packed-cast probe: the tuned space of
#: tilus.kernels.cast, then other block sizes, vectors (32: 16-byte narrow stores) and
#: persistent grids
LOWBIT_SPACE = [tuple(c.values()) for c in _cast_space()] + [
    (1024, 4, 8, 0), (4096, 8, 16, 0), (8192, 8, 16, 0), (2048, 2, 8, 0), (8192, 4, 16, 0),
    (4096, 4, 8, 8), (4096, 4, 32, 0), (8192, 8, 32, 0), (2048, 2, 16, 0), (1024, 1, 16, 0),
]  # fmt: skip


def lowbit_case(torch, flush, reps, rows):
    """The packed casts of ``bench/lowbit_casts.py`` at a few block sizes, against ``copy_``."""
    import lowbit_casts as lc
    import numpy as np

    import tilus
    from tilus.kernels.cast import Cast as space
    from tilus.kernels.cast import operand
    from tilus.packing import unpack

    n = LOWBIT_NUMEL
    for src, dst in _lowbit_casts(lc):
        x = tilus.Tensor(src, [n], torch.randint(0, 256, ((n * src.nbits + 7) // 8,),
                                                 dtype=torch.uint8, device=DEV))  # fmt: skip
        y = tilus.empty([n], dst, device=DEV)

        xs, ys = operand(x), operand(y)
        half = (x.nbytes + y.nbytes) // 2
        a = torch.empty(half, dtype=torch.uint8, device=DEV)
        b = torch.empty_like(a)
        # a ragged size, checked bit for bit against the interpreter's cast
        small = 3 * 4096 + 77
        if src.nbits % 8:
            xc = tilus.Tensor(src, [small], x.storage[: (small * src.nbits + 7) // 8].clone())
        else:  # finite values (as bench/lowbit_casts.py checks)
            xc = tilus.randn([small], src, device=DEV, seed=1)
        want = unpack(tilus.Tensor(src, [small], xc.storage.cpu()).to(dst).storage.numpy(),
                      dst.nbits, small)  # fmt: skip
        copy_ms = time_ms(lambda d=b, c=a: d.copy_(c), torch, flush, reps)
        shape = f"{src}->{dst}"
        _row(rows, kernel="copy", shape=shape, config="-", ms=copy_ms, metric="GB/s",
             value=2 * half / copy_ms / 1e6, ratio=1.0)  # fmt: skip
        for block, warps, vector, per_sm in LOWBIT_SPACE:
            k = space(src, dst, block=block, warps=warps, vector=vector, per_sm=per_sm)
            label = f"block={block},warps={warps},vector={vector},per_sm={per_sm}"
            try:
                yc = tilus.empty([small], dst, device=DEV)
                k(small, operand(xc), operand(yc))
                got = unpack(yc.storage.cpu().numpy(), dst.nbits, small)
                if not np.array_equal(got, want):
                    _row(rows, kernel="Cast", shape=shape, config=label, note="FAIL bits")
                    continue
                k(n, xs, ys)
                ms = time_ms(lambda k=k, t=(n, xs, ys): k(*t), torch, flush, reps)
            except Exception as e:  # noqa: BLE001 - a config that fails is listed
                _row(rows, kernel="Cast", shape=shape, config=label,
                     note=type(e).__name__)  # fmt: skip
                continue
            _row(rows, kernel="Cast", shape=shape, config=label,
                 ms=ms, metric="GB/s", value=2 * half / ms / 1e6, ratio=copy_ms / ms,
                 registers=_registers(k, n, xs, ys))  # fmt: skip


def _lowbit_casts(lc) -> list:
    """The (src, dst) pairs of the packed-cast probe: ``--lowbit-casts`` or every cast."""
    if not ONLY_CASTS:
        return lc.CASTS
    return [(s, d) for s, d in lc.CASTS if f"{s}->{d}" in ONLY_CASTS]


def jobs(name: str) -> list:
    """The compile jobs of case ``name`` (see :func:`precompile`)."""
    if name == "cast":
        import per_token_cast as ptc

        cfgs = ptc.PerTokenCast().configs + [dict(zip(CAST_KEYS, c)) for c in CAST_PROBES]
        return [("per_token_cast", "PerTokenCast", [], {**cfg, **EXTRA}, [m, n, None, None, None])
                for m, n in CAST_SHAPES for cfg in cfgs]  # fmt: skip
    if name == "matmul":
        import matmul_fp8 as mf

        call = [*MATMUL_SHAPE, None, None, None, None, None, None]
        return [("matmul_fp8", cls.__name__, [], {**cfg, **EXTRA}, call)
                for cls, cfg in matmul_kernels(mf)]  # fmt: skip
    import lowbit_casts as lc

    return [("tilus.kernels.cast", "Cast", [s, d], dict(block=b, warps=w, vector=v, per_sm=p),
             [LOWBIT_NUMEL, None, None])
            for s, d in _lowbit_casts(lc) for b, w, v, p in LOWBIT_SPACE]  # fmt: skip


CASES = {"cast": cast_case, "matmul": matmul_case, "lowbit": lowbit_case}


def main(argv=None) -> int:
    """Parse the arguments, time the selected cases, print the rows (and write the JSON)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default="cast,matmul,lowbit")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--out", default=None)
    ap.add_argument("--dry-run", action="store_true", help="the interpreter at tiny sizes")
    ap.add_argument("--no-regs", action="store_true", help="no registers column (faster)")
    ap.add_argument("--lowbit-casts", default="", help="only these packed casts (SRC->DST,...)")
    ap.add_argument("--matmul-classes", default="", help="only these fp8 matmul classes (,...)")
    args = ap.parse_args(argv)
    global SKIP_REGS, ONLY_CASTS, ONLY_CLASSES
    SKIP_REGS = args.no_regs
    ONLY_CASTS = [c for c in args.lowbit_casts.split(",") if c]
    ONLY_CLASSES = [c for c in args.matmul_classes.split(",") if c]
    import torch

    if args.dry_run:
        _dry_run_sizes()
    elif not torch.cuda.is_available():
        print("no CUDA GPU: use --dry-run")
        return 1
    flush = torch.empty(256 << 20 if DEV == "cuda" else 16, dtype=torch.uint8, device=DEV)
    rows: list[dict] = []
    print(f"{'kernel':18s} {'shape':15s} {'config':44s} {'ms':>8s} {'value':>14s} {'ratio':>6s} "
          f"regs")  # fmt: skip
    names = args.cases.split(",")
    pool = None
    if not args.dry_run:
        import multiprocessing as mp
        import os
        from concurrent.futures import ProcessPoolExecutor

        workers = max(1, min(12, (os.cpu_count() or 2) - 2))
        pool = ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn"))
    futures = {name: precompile(pool, jobs(name)) for name in names}  # all cases at once
    with tilus.option.scoped(interpret=args.dry_run):
        for name in names:
            failed = [f.result() for f in futures[name]]
            for why in {w for w in failed if w}:
                print(f"compile failure: {why.splitlines()[0][:150]}")
            CASES[name](torch, flush, args.reps, rows)
    if pool is not None:
        pool.shutdown()
    best = {}
    for r in rows:
        if "ratio" in r and r["kernel"] not in ("copy",) and not r["kernel"].startswith("cuBLAS"):
            key = (r["kernel"], r["shape"])
            if key not in best or r["ratio"] > best[key]["ratio"]:
                best[key] = r
    print("best:")
    for (kern, shape), r in best.items():
        print(f"  {kern:18s} {shape:15s} {r['config']:44s} {r['ratio']:.2f}")
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
