"""Time FlashAttention tile / schedule variants one by one beside SDPA cuDNN (design study).

On a Hopper GPU: ``python bench/attention_variants.py [--shapes ...] [--rounds 3 --reps 10]``.
Every variant (``block_m x block_n x stages, consumer groups, ping-pong``) of the shapes' head
dims is compiled first, in parallel worker processes that fill a private compile cache, then
each is checked against a float32 reference (NaN-poisoned output) and timed in interleaved
rounds with SDPA's cuDNN backend. The table gives ms, TFLOPS, the ratio to cuDNN, and the
kernel's registers and spill bytes (from ptxas). ``--list`` prints the variants (no GPU).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import re
import statistics
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
for p in (REPO, REPO / "examples" / "attention", Path(__file__).resolve().parent):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

SHAPES = "4x32x4096x128,4x32x4096x128c,4x32x4096x64,16x16x1024x128,2x16x8192x128"

SPLIT = (("split_producer", True),)  # warp 0 of the producer loads Q and K, warp 1 V
PSH = (("p_shared", True),)  # P through shared memory (frees registers for 3 consumers)
SPAA = SPLIT + (("all_arrive", True),)  # every consumer thread arrives on the empty barriers
LATE = (("late_p", True),)  # P converted while the next S runs
OV = (("overlap", True),)  # persistent: the next tile's first S runs during this one's epilogue
OV2 = (("overlap", 2),)  # and its softmax during this one's last P V (measured slower)
ES1 = (("early_s1", True),)  # with OV: a tile's second S before its first softmax (slower)
SE = (("skip_empty", True),)  # groups past the last query row (the ragged block) run no GEMM

#: (head dim, causal) -> variants (block_m, block_n, num_stages, consumers, pingpong, persistent,
#: early_rescale, cluster)
VARIANTS = {
    (64, False): [
        (128, 128, 4, 2, True, False, True, 1),
        (128, 128, 4, 2, False, False, False, 1, SPAA),
        (128, 128, 4, 2, True, False, True, 1, SPAA),
        (128, 128, 4, 2, False, False, True, 1, SPAA + LATE),
        (128, 128, 3, 2, True, True, True, 1, SPAA),
        (128, 128, 4, 2, False, True, False, 1, SPAA + OV),
        (128, 128, 4, 2, False, True, False, 1, SPAA + OV2),
        (192, 128, 4, 3, True, False, True, 1),
        (192, 128, 4, 3, True, False, True, 1, SPAA),
        (192, 128, 4, 3, False, False, False, 1, SPAA),
        (192, 128, 4, 3, False, True, False, 1, SPAA),
        (192, 128, 4, 3, False, True, False, 1, SPAA + OV),
        (192, 128, 4, 3, False, False, False, 1, SPAA + SE),
        (192, 128, 4, 3, True, False, True, 1, SPAA + SE),
        (192, 128, 3, 3, True, False, True, 1, SPAA + PSH),
        (192, 128, 4, 3, True, False, True, 1, SPAA + PSH),
    ],
    (128, False): [
        (128, 128, 3, 2, False, False, False, 1),
        (128, 128, 3, 2, False, False, False, 1, SPAA),
        (128, 128, 3, 2, False, False, True, 1, SPAA),
        (128, 128, 3, 2, False, False, True, 1, SPAA + LATE),
        (128, 128, 2, 2, False, False, False, 1, SPAA),
        (128, 128, 2, 2, False, False, False, 1, SPAA + PSH),
        (128, 176, 2, 2, False, False, False, 1, SPAA),
        (128, 128, 2, 2, True, False, True, 1),
        (128, 128, 2, 2, True, False, True, 1, SPAA),
        (128, 128, 2, 2, False, True, False, 1, SPAA),
        (128, 128, 2, 2, True, True, True, 1, SPAA),
        # persistent: fewer arrivals, early rescale, three stages (O stored from registers)
        (128, 128, 2, 2, False, True, False, 1),
        (128, 128, 2, 2, False, True, False, 1, SPLIT),
        (128, 128, 2, 2, False, True, True, 1, SPAA),
        (128, 128, 3, 2, False, True, False, 1, SPAA),
        (128, 128, 2, 2, False, True, False, 1, OV),
        (128, 128, 2, 2, False, True, False, 1, SPLIT + OV),
        (128, 128, 2, 2, False, True, False, 1, SPAA + OV),
        (128, 128, 2, 2, False, True, True, 1, SPAA + OV),
        (128, 128, 2, 2, False, True, False, 1, OV2),
        (128, 128, 2, 2, False, True, False, 1, SPLIT + OV2),
        (128, 128, 2, 2, False, True, False, 1, SPAA + OV2),
        (128, 128, 2, 2, False, True, False, 1, SPAA + OV + ES1),
        (128, 128, 2, 2, False, True, False, 1, SPLIT + OV + ES1),
        (128, 128, 2, 2, False, True, False, 1, OV + ES1),
    ],
    (128, True): [
        (128, 128, 3, 2, False, False, False, 1),
        (128, 128, 3, 2, False, False, False, 1, SPAA),
        (128, 128, 2, 2, True, False, True, 1, SPAA),
        (128, 128, 2, 2, False, True, False, 1, SPAA),
        (128, 128, 2, 2, True, True, True, 1, SPAA),
        (128, 128, 2, 2, False, True, False, 1, SPAA + OV),
        (128, 128, 2, 2, False, True, False, 1, SPAA + OV2),
    ],
    (256, False): [
        (128, 80, 2, 2, True, False, True, 1),
        (128, 80, 2, 2, True, False, True, 1, SPAA),
        (128, 64, 2, 2, True, False, False, 1),
        (128, 64, 2, 2, False, False, False, 1, SPAA),
    ],
}


#: a variant's optional ninth field: more constructor arguments ((name, value) pairs), shown in
#: its label by these
EXTRA = {
    "split_producer": "sp",
    "p_shared": "psh",
    "all_arrive": "aa",
    "late_p": "lp",
    "overlap": "ov",
    "early_s1": "es",
    "skip_empty": "se",
}


def label(v) -> str:
    bm, bn, st, cg, pp, ps, er, cl = v[:8]
    flags = "".join(
        f" {f}" for f, on in (("pp", pp), ("pers", ps), ("er", er), ("cl2", cl > 1)) if on
    )
    flags += "".join(
        f" {EXTRA[k]}{'' if on == 1 else on}" for k, on in (v[8] if len(v) > 8 else ()) if on
    )
    return f"{bm}x{bn}x{st} cg{cg}{flags}"


def kernel_of(v, dim: int, causal: bool):
    from flash_attention import FlashAttention

    bm, bn, st, cg, pp, ps, er, cl = v[:8]
    return FlashAttention(
        tile=0, dim=dim, causal=causal, block_m=bm, block_n=bn, num_stages=st, consumers=cg,
        pingpong=pp, persistent=ps, early_rescale=er, cluster=cl, **dict(v[8] if len(v) > 8 else ()),
    )  # fmt: skip


def _compile(job):
    """Worker: compile one (variant, dim, causal) into the shared cache; its resources."""
    v, dim, causal = job
    import tilus

    args = (1, 1, 1024, 1024, 0.1) + (tilus.void_p,) * 4 + (tilus.float32,)
    t = time.time()
    try:
        ck = tilus.compile(kernel_of(v, dim, causal), *args)
    except Exception as e:  # noqa: BLE001 - reported in the table
        return job, {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:90]}"}
    ck = ck[0] if isinstance(ck, list) else ck
    r = dict(ck.resources)
    r["serialized"] = bool(ck.wgmma_serialized)
    r["compile_s"] = time.time() - t
    return job, r


def parse(shape: str):
    causal = shape.endswith("c")
    b, h, s, d = (int(x) for x in shape.rstrip("c").split("x"))
    return b, h, s, d, causal


def compile_variants(shapes, jobs_n: int) -> dict:
    """(variant, dim, causal) -> ptxas resources (or an error), compiled in parallel."""
    jobs = sorted({(v, d, c) for _, _, _, d, c in shapes for v in VARIANTS[(d, c)]})
    t0 = time.time()
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=min(jobs_n, len(jobs)), mp_context=ctx) as pool:
        res = dict(pool.map(_compile, jobs))
    print(f"compiled {len(jobs)} variants in {time.time() - t0:.1f} s")
    return res


def print_resources(res: dict):
    """One line per compiled variant: registers, spills, whether wgmma was serialized."""
    for (v, d, c), r in sorted(res.items()):
        what = r.get("error") or (
            f"regs {r['registers']} spill {r['spill_store_bytes']}"
            f"{' SERIALIZED' if r['serialized'] else ''} ({r['compile_s']:.1f} s)"
        )
        print(f"d{d}{' causal' if c else ''} {label(v):26s} {what}")


def bench(args) -> int:
    import torch
    from attention_support import random_qkv
    from flash_attention import forward_launcher
    from rowwise import time_ms
    from torch.nn.attention import SDPBackend, sdpa_kernel

    shapes = [parse(s) for s in args.shapes.split(",") if s]
    res = compile_variants(shapes, args.jobs)
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    F = torch.nn.functional
    status = 0
    head = f"{'shape':16s} {'impl':26s} {'ms':>7s} {'TFLOPS':>7s} {'x cudnn':>7s} {'regs':>5s} {'spill':>5s}"
    print(head + "\n" + "-" * len(head))
    for b, h, s, d, causal in shapes:
        name = f"{b}x{h}x{s}x{d}{'c' if causal else ''}"
        q, k, v = random_qkv(torch, b, h, h, s, s, d, "float16", "cuda")
        ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal)

        def cudnn(q=q, k=k, v=v, causal=causal):
            with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

        runs, notes, first = {"sdpa cudnn": cudnn}, {}, {}
        for var in VARIANTS[(d, causal)]:
            r = res[(var, d, causal)]
            if "error" in r:
                notes[label(var)] = r["error"]
                continue
            o = torch.full_like(q, float("nan"))
            try:
                run = forward_launcher(
                    q, k, v, causal=causal, kernel=kernel_of(var, d, causal), out=o
                )
                t1 = time.time()
                run()
                torch.cuda.synchronize()
                first[label(var)] = time.time() - t1  # seconds: a cache miss compiles here
            except Exception as e:  # noqa: BLE001 - reported in the table
                notes[label(var)] = f"{type(e).__name__}: {str(e).splitlines()[0][:90]}"
                continue
            err = ((o.float() - ref).abs().max() / ref.abs().max()).item()
            if not err < 2e-2:  # NaN fails too
                notes[label(var)] = f"WRONG: max error {err:.2e}"
                status = 1
                continue
            runs[label(var)] = run
        for fn in runs.values():
            fn()
        torch.cuda.synchronize()
        times = {n: [] for n in runs}
        for _ in range(args.rounds):
            for n, fn in runs.items():
                times[n].append(time_ms(fn, torch, flush, args.reps))
        flops = 4 * b * h * s * s * d / (2 if causal else 1)
        base = statistics.median(times["sdpa cudnn"])
        for n, ts in times.items():
            ms = statistics.median(ts)
            r = next(
                (res[(var, d, causal)] for var in VARIANTS[(d, causal)] if label(var) == n), {}
            )
            regs = r.get("registers", "")
            spill = r.get("spill_store_bytes", "")
            ser = " SERIALIZED" if r.get("serialized") else ""
            if first.get(n, 0) > 1:
                ser += f" (first call {first[n]:.1f} s)"
            print(f"{name:16s} {n:26s} {ms:7.3f} {flops / ms / 1e9:7.0f} {base / ms:7.2f} "
                  f"{regs!s:>5s} {spill!s:>5s}{ser}")  # fmt: skip
        for n, why in notes.items():
            print(f"{name:16s} {n:26s} {why}")
    if args.ragged:
        status |= check_ragged(torch, res, shapes)
    return status


def check_ragged(torch, res: dict, shapes) -> int:
    """Every compiled variant once more at ragged lengths (q 333 rows, KV 333 causal / 517; then
    q 200 rows: a block of 192 rows past the end but for 8), against a float32 reference with a
    poisoned output; one line per variant and length."""
    from attention_support import random_qkv
    from flash_attention import forward_launcher

    F = torch.nn.functional
    status = 0
    for d, causal in sorted({(d, c) for _, _, _, d, c in shapes}):
        for sq in (333, 200):
            skv = sq if causal else 517
            q, k, v = random_qkv(torch, 2, 4, 4, sq, skv, d, "float16", "cuda")
            ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal)
            for var in VARIANTS[(d, causal)]:
                if "error" in res[(var, d, causal)]:
                    continue
                o = torch.full_like(q, float("nan"))
                kern = kernel_of(var, d, causal)
                forward_launcher(q, k, v, causal=causal, kernel=kern, out=o)()
                torch.cuda.synchronize()
                err = ((o.float() - ref).abs().max() / ref.abs().max()).item()
                ok = err < 2e-2
                status |= not ok
                print(f"ragged {sq}x{skv} d{d}{' causal' if causal else ''} {label(var):26s} "
                      f"max error {err:.2e} {'ok' if ok else 'WRONG'}")  # fmt: skip
    return status


def loop_opcodes(args) -> int:
    """Print the NVRTC version and, for each loop of the variant's SASS that issues wgmma
    (a backward branch over an HGMMA), its length and most frequent opcodes."""
    import collections

    import tilus
    from tilus.runtime.nvrtc import nvrtc_version

    _, _, _, d, causal = parse(args.shapes.split(",")[0])
    var = next((v_ for v_ in VARIANTS[(d, causal)] if label(v_) == args.sass), None)
    if var is None:
        print(f"no variant {args.sass!r} for d{d} causal={causal}")
        return 1
    argv = (1, 1, 1024, 1024, 0.1) + (tilus.void_p,) * 4 + (tilus.float32,)
    ck = tilus.compile(kernel_of(var, d, causal), *argv)
    ck = ck[0] if isinstance(ck, list) else ck
    ins = [
        (int(m.group(1), 16), m.group(2).strip())
        for m in re.finditer(r"/\*([0-9a-f]{4,})\*/\s+([^;]*);", ck.sass())
    ]
    print(f"nvrtc {nvrtc_version()}, {len(ins)} instructions, {label(var)} d{d}")
    for addr, text in ins:
        tgt = re.search(r"\bBRA (0x[0-9a-f]+)", text)
        if tgt and "BRA.DIV" not in text and int(tgt.group(1), 16) < addr:
            body = [t for a, t in ins if int(tgt.group(1), 16) <= a <= addr]
            if any("HGMMA" in t for t in body) and len(body) < 1000:
                ops = collections.Counter(
                    re.sub(r"^@!?U?P\w+\s+", "", t).split()[0].split(".")[0] for t in body
                )
                top = " ".join(f"{o}:{n}" for o, n in ops.most_common(12))
                print(f"loop {tgt.group(1)}-{addr:#x}: {len(body)} instructions; {top}")
    return 0


def profile(args) -> int:
    """Launch one variant (or SDPA cuDNN) three times at the first shape: a profiler's target
    (``ncu --launch-skip 1 --launch-count 1 -k regex:tl_``)."""
    import torch
    from attention_support import random_qkv
    from flash_attention import forward_launcher
    from torch.nn.attention import SDPBackend, sdpa_kernel

    b, h, s, d, causal = parse(args.shapes.split(",")[0])
    q, k, v = random_qkv(torch, b, h, h, s, s, d, "float16", "cuda")
    if args.profile == "cudnn":

        def run():
            with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)

    else:
        var = next((v_ for v_ in VARIANTS[(d, causal)] if label(v_) == args.profile), None)
        if var is None:
            print(f"no variant {args.profile!r} for d{d} causal={causal}")
            return 1
        run = forward_launcher(q, k, v, causal=causal, kernel=kernel_of(var, d, causal))
    for _ in range(3):
        run()
    torch.cuda.synchronize()
    return 0


def main(argv=None) -> int:
    """Parse the arguments; list the variants or run the study."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--shapes", default=SHAPES, help="b x h x s x d shapes, 'c' = causal")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved timing rounds")
    ap.add_argument("--reps", type=int, default=10, help="timed runs per kernel per round")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 4, help="compile processes")
    ap.add_argument("--only", metavar="REGEX", help="only the variants whose label matches")
    ap.add_argument("--list", action="store_true", help="print the variants and exit")
    ap.add_argument("--compile-only", action="store_true", help="no GPU: registers and spills")
    ap.add_argument(
        "--ragged", action="store_true", help="then check every variant at ragged sizes"
    )
    ap.add_argument(
        "--sass",
        metavar="LABEL",
        help="no GPU: the NVRTC version and each wgmma loop's SASS opcodes of one variant",
    )
    ap.add_argument(
        "--profile",
        metavar="LABEL",
        help="run one variant (its --list label, or 'cudnn') 3 times at the first shape, for ncu",
    )
    args = ap.parse_args(argv)
    if args.only:
        for key, vs in VARIANTS.items():
            VARIANTS[key] = [v for v in vs if re.search(args.only, label(v))]
    if args.profile:
        return profile(args)
    if args.sass:
        return loop_opcodes(args)
    if args.list:
        for (d, c), vs in VARIANTS.items():
            print(f"d{d}{' causal' if c else ''}: " + ", ".join(label(v) for v in vs))
        return 0
    os.environ.setdefault("TILUS_CACHE_DIR", tempfile.mkdtemp(prefix="tilus-variants-"))
    if args.compile_only:
        print_resources(
            compile_variants([parse(s) for s in args.shapes.split(",") if s], args.jobs)
        )
        return 0
    return bench(args)


if __name__ == "__main__":
    sys.exit(main())
