"""Run one pinned MatmulV7 config a few times, for a profiler (``ncu``) to catch.

``python bench/v7_one.py 256x8192x8192 block_m=256 block_n=128 num_stages=4 coop=1
epilogue=tma1 stream_k=1`` builds the config (keywords not given take the constructor's
defaults; ``num_sms`` too), checks it once against torch in float32 on a NaN-poisoned C and
launches it ``--launches`` times. Profile it with ``ncu --clock-control none -k regex:tl_
--launch-skip 1 --launch-count 1 python3 bench/v7_one.py ...``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


def parse_value(text: str):
    """A config value: an int where it reads as one, else the text."""
    try:
        return int(text)
    except ValueError:
        return text


def main(argv=None) -> int:
    """Parse the arguments, check once, launch ``--launches`` times."""
    import torch

    from tests.test_matmul_v7 import load_v7

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("shape", help="MxNxK")
    ap.add_argument("config", nargs="*", help="K=V constructor keywords")
    ap.add_argument("--launches", type=int, default=3)
    ap.add_argument("--dtype", default="fp16", choices=("fp16", "bf16"))
    args = ap.parse_args(argv)
    m, n, k = (int(v) for v in args.shape.split("x"))
    v7 = load_v7()
    cls = v7.MatmulV7 if args.dtype == "fp16" else v7.MatmulV7BF16
    cfg = {key: parse_value(v) for key, v in (c.split("=", 1) for c in args.config)}
    base = dict(cls().configs[0])
    base.update(cfg)
    kernel = cls(**base)
    tdt = torch.float16 if args.dtype == "fp16" else torch.bfloat16
    a = torch.randn(m, k, device="cuda", dtype=tdt)
    b = torch.randn(n, k, device="cuda", dtype=tdt)
    c = torch.full((m, n), float("nan"), device="cuda", dtype=tdt)
    kernel(m, n, k, a, b, c)
    torch.cuda.synchronize()
    ref = a.float() @ b.float().T
    err = ((c.float() - ref).abs().max() / ref.abs().max()).item()
    print(f"v7 {args.shape} {base}: max error {err:.2e}", flush=True)
    for _ in range(args.launches):
        kernel(m, n, k, a, b, c)
    torch.cuda.synchronize()
    return 0 if err < 1e-2 else 1


if __name__ == "__main__":
    sys.exit(main())
