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
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
for p in (REPO, REPO / "bench", REPO / "examples" / "quantized"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from rowwise import config_text, time_ms  # noqa: E402 - the shared timing helpers

CAST_SHAPES = [(4096, 7168), (16384, 4096), (3000, 5000)]
MATMUL_SHAPE = (8192, 8192, 8192)
LOWBIT_NUMEL = 1 << 28


def _row(rows, **kw):
    rows.append(kw)
    reg = kw.get("registers", "")
    val = f"{kw['value']:.0f} {kw['metric']}" if "value" in kw else kw.get("note", "")
    ms = f"{kw['ms']:.4f}" if "ms" in kw else "-"
    ratio = f"{kw['ratio']:.2f}" if "ratio" in kw else "-"
    print(f"{kw['kernel']:18s} {kw['shape']:15s} {kw['config']:44s} {ms:>8s} {val:>14s} "
          f"{ratio:>6s} {reg!s:>4s}", flush=True)  # fmt: skip


def precompile(jobs) -> None:
    """``tilus.compile(kernel, *args)`` for each ``(kernel, args)`` of ``jobs`` in threads (NVRTC
    runs outside the GIL), so the timings below find every kernel in the cache."""
    from concurrent.futures import ThreadPoolExecutor

    import tilus

    def one(job):
        try:
            tilus.compile(job[0], *job[1])
        except Exception:  # noqa: BLE001 - the timing reports the failure
            pass

    with ThreadPoolExecutor(8) as ex:
        list(ex.map(one, jobs))


def _registers(kernel, *args) -> int | str:
    """Registers per thread of a pinned kernel (compiled already: a cache hit)."""
    import tilus

    try:
        return tilus.compile(kernel, *args).resources.get("registers", "?")
    except Exception:  # noqa: BLE001 - only a column of the table
        return "?"


def cast_case(torch, flush, reps, rows):
    """Every PerTokenCast config at the bench's shapes, against ``copy_``."""
    import per_token_cast as ptc

    space = ptc.PerTokenCast().configs
    for m, n in CAST_SHAPES:
        x = torch.randn(m, n, device="cuda").to(torch.bfloat16)
        q = torch.empty(m, n, dtype=torch.float8_e4m3fn, device="cuda")
        s = torch.empty(m, dtype=torch.float32, device="cuda")
        precompile([(ptc.PerTokenCast(**cfg), (m, n, x, q, s)) for cfg in space])
        moved = 3 * m * n + 4 * m
        src = torch.empty(moved // 2, dtype=torch.uint8, device="cuda")
        dst = torch.empty_like(src)
        copy_ms = time_ms(lambda d=dst, c=src: d.copy_(c), torch, flush, reps)
        _row(rows, kernel="copy", shape=f"{m}x{n}", config="-", ms=copy_ms, metric="GB/s",
             value=moved / copy_ms / 1e6, ratio=1.0)  # fmt: skip
        for cfg in space:
            k = ptc.PerTokenCast(**cfg)
            label = config_text(cfg)
            try:
                ok, note, *_ = ptc.run_once(k, torch, m, n, "cuda")
                if not ok:
                    _row(rows, kernel="PerTokenCast", shape=f"{m}x{n}", config=label,
                         note=f"FAIL {note}")  # fmt: skip
                    continue
                ms = time_ms(lambda k=k, t=(m, n, x, q, s): k(*t), torch, flush, reps)
            except Exception as e:  # noqa: BLE001 - a config that fails is listed
                _row(rows, kernel="PerTokenCast", shape=f"{m}x{n}", config=label,
                     note=f"{type(e).__name__}")  # fmt: skip
                continue
            _row(rows, kernel="PerTokenCast", shape=f"{m}x{n}", config=label, ms=ms,
                 metric="GB/s", value=moved / ms / 1e6, ratio=copy_ms / ms,
                 registers=_registers(k, m, n, x, q, s))  # fmt: skip


def matmul_case(torch, flush, reps, rows):
    """Every config of MatmulFP8 and MatmulFP8PingPong at 8192^3 with row scales, checked on
    the GPU against torch float32 (NaN-poisoned C), timed against ``torch._scaled_mm``."""
    import matmul_fp8 as mf

    m, n, k = MATMUL_SHAPE
    a8, b8, sa, sb, scale = mf.quantized_inputs(torch, m, n, k, "cuda")
    c = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
    shape = f"{m}x{n}x{k}"
    args = (m, n, k, a8, b8, sa, sb, scale, c)
    kernels = [(cls, cfg) for cls in (mf.MatmulFP8PingPong, mf.MatmulFP8) for cfg in cls().configs]
    precompile([(cls(**cfg), args) for cls, cfg in kernels])
    ref = mf.reference(torch, a8, b8, sa, sb, scale)
    ref_max = float(ref.abs().max())
    sa_t, sb_t = (sa * scale)[:, None].contiguous(), sb[None, :].contiguous()

    def cublas():
        torch._scaled_mm(a8, b8.t(), scale_a=sa_t, scale_b=sb_t, out_dtype=torch.bfloat16)

    cublas()
    base = time_ms(cublas, torch, flush, reps)
    _row(rows, kernel="cuBLAS (row)", shape=shape, config="-", ms=base, metric="TFLOPS",
         value=2 * m * n * k / base / 1e9, ratio=1.0)  # fmt: skip
    for cls, cfg in kernels:
        kern = cls(**cfg)
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


#: (block, warps, vector) of the packed-cast probe (vector 0: the layout inferred)
LOWBIT_SPACE = [(1024, 4, 0), (4096, 8, 0), (4096, 4, 32), (8192, 8, 32), (16384, 8, 32)]


def lowbit_case(torch, flush, reps, rows):
    """The packed casts of ``bench/lowbit_casts.py`` at a few block sizes, against ``copy_``."""
    import lowbit_casts as lc
    import numpy as np

    import tilus
    from tilus.kernels.cast import Cast
    from tilus.packing import unpack

    space = tilus.autotune("block, warps, vector", LOWBIT_SPACE)(type("CastSpace", (Cast,), {}))
    n = LOWBIT_NUMEL
    for src, dst in lc.CASTS:
        x = tilus.Tensor(src, [n], torch.randint(0, 256, ((n * src.nbits + 7) // 8,),
                                                 dtype=torch.uint8, device="cuda"))  # fmt: skip
        y = tilus.empty([n], dst, device="cuda")

        def operand(t):
            return t.storage if t.dtype.nbits % 8 else t.torch().reshape(-1)

        xs, ys = operand(x), operand(y)
        half = (x.nbytes + y.nbytes) // 2
        a = torch.empty(half, dtype=torch.uint8, device="cuda")
        b = torch.empty_like(a)
        precompile([(space(src, dst, block=bl, warps=wa, vector=ve), (n, xs, ys))
                    for bl, wa, ve in LOWBIT_SPACE])  # fmt: skip
        # a ragged size, checked bit for bit against the interpreter's cast
        small = 3 * 4096 + 77
        if src.nbits % 8:
            xc = tilus.Tensor(src, [small], x.storage[: (small * src.nbits + 7) // 8].clone())
        else:  # finite values (as bench/lowbit_casts.py checks)
            xc = tilus.randn([small], src, device="cuda", seed=1)
        want = unpack(tilus.Tensor(src, [small], xc.storage.cpu()).to(dst).storage.numpy(),
                      dst.nbits, small)  # fmt: skip
        copy_ms = time_ms(lambda d=b, c=a: d.copy_(c), torch, flush, reps)
        shape = f"{src}->{dst}"
        _row(rows, kernel="copy", shape=shape, config="-", ms=copy_ms, metric="GB/s",
             value=2 * half / copy_ms / 1e6, ratio=1.0)  # fmt: skip
        for block, warps, vector in LOWBIT_SPACE:
            k = space(src, dst, block=block, warps=warps, vector=vector)
            label = f"block={block},warps={warps},vector={vector}"
            try:
                yc = tilus.empty([small], dst, device="cuda")
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


CASES = {"cast": cast_case, "matmul": matmul_case, "lowbit": lowbit_case}


def main(argv=None) -> int:
    """Parse the arguments, time the selected cases, print the rows (and write the JSON)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default="cast,matmul,lowbit")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("no CUDA GPU")
        return 1
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    rows: list[dict] = []
    print(f"{'kernel':18s} {'shape':15s} {'config':44s} {'ms':>8s} {'value':>14s} {'ratio':>6s} "
          f"regs")  # fmt: skip
    for name in args.cases.split(","):
        CASES[name](torch, flush, args.reps, rows)
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
