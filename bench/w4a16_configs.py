"""Time pinned configs of the W4A16 kernels at the decode and prefill shapes, beside fp16 cuBLAS.

``python bench/w4a16_configs.py [--kernel decode|pipe|wgmma|mma] [--shapes 1x8192x8192,...]
[--configs 'rows=1,reps=1,block_m=1;...'] [--rounds 3] [--reps 10]``: each config is checked
against torch (NaN-poisoned output) and timed with the L2 flushed before each run (as
``bench/rowwise.py`` does); the table gives ms, GB/s of the weight read (packed codes and
scales), the ratio to cuBLAS fp16 and the registers a thread. Used to pick the autotune space.
``--configs tuned`` times the kernel's default constructor, tuned over its autotune space on
first use at each shape (the config column then names the winner): the kernels side by side
at a range of M set ``matmul_wx_a16.MMA_MAX_M``, the boundary of ``matmul_wx_a16()``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
for p in (REPO, REPO / "bench", REPO / "examples" / "quantized"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from rowwise import time_ms, winner  # noqa: E402 - the shared timing helpers

DECODE = "rows=1,reps=1,block_m=1;rows=2,reps=1,block_m=1;rows=1,reps=2,block_m=1;" \
         "rows=1,reps=1,block_m=1,warps=8"  # fmt: skip


def parse_configs(text: str) -> list[dict]:
    """``'a=1,b=2;a=3'`` -> [{'a': 1, 'b': 2}, {'a': 3}] (ints and True/False)."""
    out = []
    for part in text.split(";"):
        cfg = {}
        for kv in filter(None, part.split(",")):
            k, v = kv.split("=")
            cfg[k.strip()] = {"True": True, "False": False}.get(v.strip(), None)
            if cfg[k.strip()] is None:
                cfg[k.strip()] = int(v)
        if cfg:
            out.append(cfg)
    return out


def main(argv=None) -> int:
    """Parse the arguments, check and time every config; print the table."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--kernel", default="decode", choices=["decode", "pipe", "wgmma", "mma"])
    ap.add_argument("--shapes", default="1x8192x8192,1x28672x4096")
    ap.add_argument("--configs", default=DECODE)
    ap.add_argument("--group", type=int, default=128)
    ap.add_argument("--wdtypes", default="uint4b", help="weight types, e.g. uint4b,int8")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=10)
    args = ap.parse_args(argv)
    import matmul_wx_a16 as ex
    import torch

    import tilus

    pin = dict  # the pipelined kernel's autotune group is pinned whole
    if args.kernel == "decode":
        import matmul_wx_a16_decode as mod

        cls = mod.MatmulWxA16Decode
    elif args.kernel == "pipe":
        import matmul_wx_a16_pipe as mod

        cls = mod.MatmulWxA16Pipe
        pin = mod.pinned
    elif args.kernel == "mma":
        import matmul_wx_a16_mma as mod

        cls = mod.MatmulWxA16Mma
    else:
        import matmul_wx_a16 as mod

        cls = mod.MatmulWxA16
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    g, status = args.group, 0
    print(f"{'shape':22s} {'config':40s} {'ms':>8s} {'GB/s':>6s} {'ratio':>6s} {'regs':>4s}")
    for shape, wname in [(a, b) for b in args.wdtypes.split(",") for a in args.shapes.split(",")]:
        m, n, k = map(int, shape.split("x"))
        wdtype = getattr(tilus, wname)
        x, w, s, w16 = ex.torch_problem(torch, m, n, k, g, wdtype)
        if args.kernel == "mma":  # the weights packed offline in fragment order
            w = mod.prepack_torch(torch, w, wdtype)
        shape = shape if wname == "uint4b" else f"{shape}:{wname}"
        ref = torch.matmul(x, w16.T).float()
        y = torch.full((m, n), float("nan"), dtype=torch.float16, device="cuda")

        def cublas_fn(x=x, w16=w16):
            return torch.matmul(x, w16.T)

        cublas = [time_ms(cublas_fn, torch, flush, args.reps)]
        moved = w.numel() + 2 * s.numel()
        rows = []
        tuned = args.configs == "tuned"
        for cfg in [{}] if tuned else parse_configs(args.configs):
            try:
                kern = cls(wdtype, g) if tuned else cls(wdtype, g, **pin(**cfg))
                y.fill_(float("nan"))
                kern(m, n, k, x, w, s, y)
                torch.cuda.synchronize()
            except Exception as e:  # noqa: BLE001 - report and go on with the next config
                print(f"{shape:22s} {str(cfg):40s} FAILED {type(e).__name__}: {str(e)[:200]}")
                status = 1
                continue
            err = ((y.float() - ref).abs().max() / ref.abs().max()).item()
            if torch.isnan(y).any() or not err < 1e-2:
                print(f"{shape:22s} {str(cfg):40s} WRONG max rel err {err:.2e}")
                status = 1
            regs = "?"
            if tuned:  # no register count: it would compile the whole space again
                cfg = {"tuned": winner(kern)}
            else:
                try:
                    ck = tilus.compile(kern, m, n, k, tilus.float16, tilus.uint8, tilus.float16,
                                       tilus.float16)  # fmt: skip
                    regs = str((ck[0] if isinstance(ck, list) else ck).resources["registers"])
                except Exception:  # noqa: BLE001 - the count is informative only
                    pass
            t = (m, n, k, x, w, s, y)
            rows.append((cfg, regs, lambda kern=kern, t=t: kern(*t)))
        rounds = {i: [] for i in range(len(rows))}
        for _ in range(args.rounds):
            cublas.append(time_ms(cublas_fn, torch, flush, args.reps))
            for i, (_c, _r, fn) in enumerate(rows):
                rounds[i].append(time_ms(fn, torch, flush, args.reps))
        base = statistics.median(cublas)
        print(f"{shape:22s} {'cuBLAS fp16':40s} {base:8.4f} {2 * n * k / base / 1e6:6.0f}")
        for i, (cfg, regs, _fn) in enumerate(rows):
            ms = statistics.median(rounds[i])
            cfg_s = ",".join(f"{a}={b}" for a, b in cfg.items())
            print(f"{shape:22s} {cfg_s:40s} {ms:8.4f} {moved / ms / 1e6:6.0f} {base / ms:6.2f} "
                  f"{regs:>4s}")  # fmt: skip
        del ref, y, cublas_fn, rows
    return status


if __name__ == "__main__":
    sys.exit(main())
