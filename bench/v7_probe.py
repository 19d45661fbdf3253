"""Pinned MatmulV7 candidates beside cuBLAS on a few LLM shapes: one ratio matrix per dtype.

Every candidate (``CANDIDATES``: constructor keywords, most of them outside the default space)
is built, checked against ``torch.matmul`` in fp32 on fresh inputs with a NaN-poisoned output,
then timed with cuBLAS in interleaved rounds (``bench/llm_shapes.py``'s ``measure_pinned``: the
median of the round medians, the L2 flushed before every run). Prints, per dtype, a matrix of
the ratios to cuBLAS (candidates x shapes) and the geometric mean of each row; writes JSON to
``$OUT/v7_probe-<dtypes>.json`` when ``$OUT`` is set.

Run on a Hopper GPU: ``python3 bench/v7_probe.py [--dtype fp16,bf16] [--shapes NAME,...]
[--only 0,3,5] [--rounds 5]``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import llm_shapes  # noqa: E402 - the suite's shapes and its pinned timing

SHAPES = ["square-8192", "l3-8b-down", "ragged-m3000", "m256-8192"]


def _cfg(bm, bn, st, sw, cl=1, coop=0, ep="tma", sk=1):
    return dict(block_m=bm, block_n=bn, block_k=64, num_stages=st, swizzle=sw, split_k=sk,
                cluster_n=cl, coop=coop, epilogue=ep)  # fmt: skip


#: the candidates: coop 128 x 256, 128 x 192, 128 x 224 and 256 x 128, ping-pong 128 x 128,
#: with the TMA epilogue of a C tile per group ("tma"), one C tile shared by both groups
#: ("tma1"), or none ("direct")
CANDIDATES = [
    _cfg(128, 256, 3, 8, coop=1),
    _cfg(128, 256, 4, 8, coop=1, ep="direct"),
    _cfg(128, 256, 4, 8, coop=1, ep="tma1"),
    _cfg(128, 256, 4, 2, coop=1, ep="tma1"),
    _cfg(128, 256, 4, 8, cl=2, coop=1, ep="tma1"),
    _cfg(128, 256, 4, 4, cl=2, coop=1, ep="tma1"),
    _cfg(128, 256, 4, 16, cl=2, coop=1, ep="tma1"),
    _cfg(128, 256, 4, 2, cl=2, coop=1, ep="tma1"),
    _cfg(128, 192, 4, 8, coop=1),
    _cfg(128, 192, 5, 8, coop=1, ep="tma1"),
    _cfg(128, 192, 5, 8, cl=2, coop=1, ep="tma1"),
    _cfg(128, 224, 4, 8, coop=1, ep="tma1"),
    _cfg(128, 224, 4, 8, cl=2, coop=1, ep="tma1"),
    _cfg(128, 224, 4, 4, cl=2, coop=1, ep="tma1"),
    _cfg(128, 224, 4, 16, cl=2, coop=1, ep="tma1"),
    _cfg(128, 192, 5, 4, cl=2, coop=1, ep="tma1"),
    _cfg(256, 128, 3, 8, coop=1),
    _cfg(256, 128, 4, 8, coop=1, ep="tma1"),
    _cfg(256, 128, 4, 8, cl=2, coop=1, ep="tma1"),
    _cfg(256, 128, 4, 4, cl=2, coop=1, ep="tma1"),
    _cfg(256, 128, 4, 2, cl=2, coop=1, ep="tma1"),
    _cfg(256, 128, 4, 8, cl=2, coop=1, ep="direct"),
    _cfg(128, 128, 5, 8),
    _cfg(128, 128, 6, 8, ep="tma1"),
    _cfg(128, 128, 6, 4, ep="tma1"),
    _cfg(128, 128, 6, 2, ep="tma1"),
    _cfg(128, 128, 6, 8, cl=2, ep="tma1"),
    _cfg(128, 128, 6, 2, cl=2, ep="tma1"),
    _cfg(128, 128, 7, 1, ep="direct"),
    _cfg(128, 128, 6, 1, ep="tma1"),
    _cfg(128, 128, 6, 8, coop=1),
]


def matrix(rows, cfgs) -> list[str]:
    """Text lines: per candidate its ratio to cuBLAS at each shape and the row's geo-mean."""
    names = [r["shape"] for r in rows]
    out = ["  #  config" + " " * 37 + "".join(f"{n[:12]:>13s}" for n in names) + "      geo"]
    for i, cfg in enumerate(cfgs):
        ratios = [r["runs"].get(f"v7 #{i}", {}).get("vs_cublas") for r in rows]
        cells = "".join(f"{x:13.3f}" if x else f"{'-':>13s}" for x in ratios)
        ok = [x for x in ratios if x]
        geo = math.exp(sum(map(math.log, ok)) / len(ok)) if len(ok) == len(ratios) else None
        text = llm_shapes._config_text(cfg)
        out.append(f"{i:3d}  {text:43s}{cells}" + (f"{geo:9.3f}" if geo else "        -"))
    return out


def main(argv=None) -> int:
    """Time the candidates, print the matrices, write the JSON."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dtype", default="fp16")
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--only", default=None, help="comma-separated candidate indices")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=10)
    args = ap.parse_args(argv)
    import torch

    cfgs = CANDIDATES
    if args.only:
        cfgs = [CANDIDATES[int(i)] for i in args.only.split(",")]
    names = [s for s in args.shapes.split(",") if s]
    tables, results = [], []
    for dtype in args.dtype.split(","):
        rows = llm_shapes.measure_pinned(torch, dtype, names, ["v7"], args.rounds, args.reps,
                                         {"*": cfgs}, tuned_too=False)  # fmt: skip
        results += rows
        tables.append(f"\n== {dtype}: ratio to cuBLAS ==")
        tables += matrix(rows, cfgs)
    print("\n".join(tables), flush=True)
    if os.environ.get("OUT"):
        text = json.dumps({"git_commit": llm_shapes.hm.git_commit(), "results": results}, indent=1)
        name = "v7_probe-" + args.dtype.replace(",", "-") + ".json"  # one file per invocation
        Path(os.environ["OUT"], name).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
