"""Where the WxA16 entry should switch kernels: each candidate beside fp16 cuBLAS over M.

For each weight type and weight shape, at each M: the kernels ``matmul_wx_a16.pick_kernel``
chooses between (the decode kernel, the pipelined WGMMA one for 4-bit weights, the
dequantize-then-V7 path), each its default constructor tuned on first use, checked against
``torch.matmul`` on the dequantized weights (NaN-poisoned output), then timed interleaved with
cuBLAS in rounds (median of the round medians, the L2 flushed before every run). Prints one line
per (type, shape, M) with each candidate's ratio to cuBLAS and the kernel the entry picks.

Run on a Hopper GPU: ``python3 bench/wx_crossover.py [--types uint4b,uint3b] [--m 16,256,4096]
[--rounds 3] [--reps 10] [--out FILE.json]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
for p in (REPO, REPO / "bench", REPO / "examples" / "quantized"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from l2_flush import make_flush  # noqa: E402
from rowwise import git_commit, interleaved_rounds  # noqa: E402

SHAPES = [(8192, 8192), (28672, 4096)]
GROUP = 128


def candidates(wdtype):
    """name -> kernel (called as ``k(m, n, k, x, w_packed, scales, y)``) for ``wdtype``."""
    import matmul_wx_a16_decode as dec
    import matmul_wx_a16_dequant as dq
    import matmul_wx_a16_pipe as pipe

    import tilus

    out = {
        "decode": dec.decode_kernel(wdtype, GROUP),
        "dequant+v7": dq.MatmulWxA16Dequant(wdtype, GROUP),
    }
    if wdtype in (tilus.uint4b, tilus.int4b):
        out["pipe"] = pipe.MatmulWxA16Pipe(wdtype, GROUP)
    return out


def one(torch, flush, args, wname, n, k, m) -> dict:
    """Check and time every candidate at one (type, N, K, M)."""
    import matmul_wx_a16 as ex

    import tilus

    wdtype = getattr(tilus, wname)
    x, w, s, w16 = ex.torch_problem(torch, m, n, k, GROUP, wdtype)
    ref = torch.matmul(x, w16.T).float()
    runs, errs = {}, {}
    for name, kern in candidates(wdtype).items():
        if name == "decode" and m > args.decode_max_m:
            continue
        y = torch.full((m, n), float("nan"), dtype=torch.float16, device="cuda")
        try:
            kern(m, n, k, x, w, s, y)
        except Exception as e:  # noqa: BLE001 - reported, the others still run
            errs[name] = f"{type(e).__name__}: {e}"[:200]
            continue
        err = ((y.float() - ref).abs().max() / ref.abs().max()).item()
        if torch.isnan(y).any() or err > 1e-2:
            errs[name] = f"wrong: max rel err {err:.2e}"
            continue
        runs[name] = lambda kern=kern, y=y: kern(m, n, k, x, w, s, y)
    runs["cublas"] = lambda: torch.matmul(x, w16.T)
    rounds = interleaved_rounds(runs, torch, flush, args.rounds, args.reps)
    ms = {name: statistics.median(v) for name, v in rounds.items()}
    weights = ex.prepare_weights(w, s, wdtype=wdtype, group=GROUP)
    picked = ex.pick_kernel(m, weights)[0].script_cls.__name__
    return dict(type=wname, n=n, k=k, m=m, ms=ms, errors=errs, picked=picked,
                vs_cublas={nm: ms["cublas"] / t for nm, t in ms.items() if nm != "cublas"})  # fmt: skip


def main(argv=None) -> int:
    """Run the grid, print the lines, write the JSON."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--types", default="uint4b,uint3b,int8")
    ap.add_argument("--m", default="16,64,256,1024,4096")
    ap.add_argument("--shapes", default="0,1", help="indices into SHAPES")
    ap.add_argument("--decode-max-m", type=int, default=256, help="skip the decode kernel above")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    import torch

    flush = make_flush(torch, "dirty")
    rows = []
    for wname in args.types.split(","):
        for si in args.shapes.split(","):
            n, k = SHAPES[int(si)]
            for m in (int(v) for v in args.m.split(",")):
                r = one(torch, flush, args, wname, n, k, m)
                rows.append(r)
                cells = "  ".join(f"{nm} {v:.3f}" for nm, v in sorted(r["vs_cublas"].items()))
                print(f"{wname:8s} {m:5d}x{n}x{k}  cublas {r['ms']['cublas']:.4f} ms  {cells}"
                      f"  picked {r['picked']}" + (f"  errors {r['errors']}" if r["errors"] else ""),
                      flush=True)  # fmt: skip
    if args.out:
        meta = dict(commit=git_commit(), gpu=torch.cuda.get_device_name(), argv=sys.argv[1:])
        Path(args.out).write_text(json.dumps(dict(meta=meta, rows=rows), indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
