"""Launch pinned W4A16 mma configs many times on one problem and report every launch's error.

``python3 bench/w4a16_repeat.py --configs 'k=v,...;...' [--shape 1x8192x8192] [--launches 40]``:
a config whose output is wrong only now and then (a race) shows here as some launches over the
tolerance, with the 64-row tiles that were wrong; each launch's output is poisoned (NaN) first
and compared against torch in float32 on the dequantized weights.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
for p in (REPO, REPO / "bench", REPO / "examples" / "quantized"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))


def main(argv=None) -> int:
    """Parse the arguments, repeat each config; the exit status (1 if any launch was wrong)."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--configs", required=True, help="'k=v,...;...' (see w4a16_configs.py)")
    ap.add_argument("--shape", default="1x8192x8192", help="MxNxK")
    ap.add_argument("--launches", type=int, default=40)
    args = ap.parse_args(argv)
    import matmul_wx_a16 as ex
    import matmul_wx_a16_mma as mma
    import torch
    from w4a16_configs import parse_configs

    import tilus

    m, n, k = map(int, args.shape.split("x"))
    x, w, s, w16 = ex.torch_problem(torch, m, n, k, 128, tilus.uint4b)
    wp = mma.prepack_torch(torch, w, tilus.uint4b)
    ref = torch.matmul(x.float(), w16.float().T)
    status = 0
    for cfg in parse_configs(args.configs):
        kern = mma.MatmulWxA16Mma(tilus.uint4b, 128, **mma.pinned(**cfg))
        errs, tiles = [], set()
        y = torch.empty((m, n), dtype=torch.float16, device="cuda")
        for _ in range(args.launches):
            y.fill_(float("nan"))
            kern(m, n, k, x, wp, s, y)
            d = (y.float() - ref).abs()
            # the tuner's cross-check measure: the largest error against the largest value
            errs.append(((d.max() / ref.abs().max()).item(), torch.isnan(y).any().item()))
            bad = (d.nan_to_num(float("inf")).max(0).values > 1e-2 * ref.abs().max()).nonzero()
            tiles |= {int(r) // 64 for r in bad.flatten()}
        wrong = sum(e > 1e-2 or nan for e, nan in errs)
        status |= wrong > 0
        print(f"{args.shape} {cfg}: {wrong} of {len(errs)} launches wrong, max error "
              f"{max(e for e, _ in errs):.2e}, wrong 64-row tiles {sorted(tiles)[:16]}", flush=True)  # fmt: skip
    return status


if __name__ == "__main__":
    sys.exit(main())
