"""Time pinned configs of the W4A16 kernels at the decode and prefill shapes, beside fp16 cuBLAS.

``python bench/w4a16_configs.py [--kernel decode|pipe|wgmma|mma] [--shapes 1x8192x8192,...]
[--configs 'rows=1,reps=1,block_m=1;...'] [--rounds 3] [--reps 10]``: each config is checked
against torch (NaN-poisoned output) and timed with the L2 flushed before each run (as
``bench/rowwise.py`` does); the table gives ms, GB/s of the weight read (packed codes and
scales), the ratio to cuBLAS fp16 and the registers a thread. Used to pick the autotune space.
``--kernel mma-floor`` times the mma kernel's pipeline with no math (``bench/w4a16_floor.py``:
its output is zero and only checked for NaN), the floor of its configs. ``--configs tuned`` times the kernel's default constructor, tuned over its autotune space on
first use at each shape (the config column then names the winner): the kernels side by side
at a range of M set ``matmul_wx_a16.MMA_MAX_M``, the boundary of ``matmul_wx_a16()``.
A config written ``@MxNxK cfg`` runs at that shape only. ``--flush dirty|clean|both`` picks the L2 flush protocol(s) (``bench/quantized.py``'s
``--flush``; with ``both`` each row is timed under each, interleaved, in one table); ``--floor``
adds the floor rows: an (almost) empty kernel and a read of the kernel's weight bytes and of
cuBLAS's (a sum of an int32 tensor of that size).
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

from l2_flush import FLUSHES, make_flush  # noqa: E402 - the L2 flush protocols
from rowwise import time_ms, winner  # noqa: E402 - the shared timing helpers

DECODE = "rows=1,reps=1,block_m=1;rows=2,reps=1,block_m=1;rows=1,reps=2,block_m=1;" \
         "rows=1,reps=1,block_m=1,warps=8"  # fmt: skip


def parse_configs(text: str, shape: str | None = None) -> list[dict]:
    """``'a=1,b=2;a=3'`` -> [{'a': 1, 'b': 2}, {'a': 3}] (ints and True/False); a config
    written ``@MxNxK a=1,...`` is kept only for that ``shape``."""
    out = []
    for part in text.split(";"):
        part = part.strip()
        if part.startswith("@"):
            only, _, part = part[1:].partition(" ")
            if shape is not None and only != shape:
                continue
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
    ap.add_argument("--kernel", default="decode",
                    choices=["decode", "pipe", "wgmma", "mma", "mma-floor", "mma-scales"])  # fmt: skip
    ap.add_argument("--shapes", default="1x8192x8192,1x28672x4096")
    ap.add_argument("--configs", default=DECODE)
    ap.add_argument("--group", type=int, default=128)
    ap.add_argument("--wdtypes", default="uint4b", help="weight types, e.g. uint4b,int8")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--flush", default="dirty", choices=[*FLUSHES, "both"])
    ap.add_argument("--floor", action="store_true", help="add the empty-kernel and read rows")
    args = ap.parse_args(argv)
    import matmul_wx_a16 as ex
    import torch

    import tilus

    pin = dict  # the pipelined and mma kernels' autotune groups are pinned whole
    if args.kernel == "decode":
        import matmul_wx_a16_decode as mod

        cls = mod.MatmulWxA16Decode
    elif args.kernel == "pipe":
        import matmul_wx_a16_pipe as mod

        cls = mod.MatmulWxA16Pipe
        pin = mod.pinned
    elif args.kernel in ("mma", "mma-floor", "mma-scales"):
        import matmul_wx_a16_mma as mod

        cls = mod.MatmulWxA16Mma
        pin = mod.pinned
        if args.kernel == "mma-floor":  # the same pipeline with no math (bench/w4a16_floor.py)
            from w4a16_floor import MatmulWxA16MmaStream as cls
        if args.kernel == "mma-scales":  # that pipeline with the scale loads kept
            from w4a16_floor import MatmulWxA16MmaScales as cls
    else:
        import matmul_wx_a16 as mod

        cls = mod.MatmulWxA16
    protocols = list(FLUSHES) if args.flush == "both" else [args.flush]
    flushes = {p: make_flush(torch, p) for p in protocols}
    g, status = args.group, 0
    cols = "".join(f" {p + ' ms':>9s} {'GB/s':>5s} {'ratio':>5s}" for p in protocols)
    print(f"{'shape':22s} {'config':40s}{cols} {'regs':>4s}")
    for shape, wname in [(a, b) for b in args.wdtypes.split(",") for a in args.shapes.split(",")]:
        m, n, k = map(int, shape.split("x"))
        wdtype = getattr(tilus, wname)
        x, w, s, w16 = ex.torch_problem(torch, m, n, k, g, wdtype)
        if args.kernel.startswith("mma"):  # the weights packed offline in fragment order
            w = mod.prepack_torch(torch, w, wdtype)
        shape = shape if wname == "uint4b" else f"{shape}:{wname}"
        ref = torch.matmul(x, w16.T).float()
        y = torch.full((m, n), float("nan"), dtype=torch.float16, device="cuda")

        def cublas_fn(x=x, w16=w16):
            return torch.matmul(x, w16.T)

        moved = w.numel() + 2 * s.numel()
        rows = [("cuBLAS fp16", "", cublas_fn, 2 * n * k)]
        if args.floor:
            rows += floor_rows(torch, moved, 2 * n * k)
        tuned = args.configs == "tuned"
        for cfg in [{}] if tuned else parse_configs(args.configs, shape.split(":")[0]):
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
            if args.kernel in ("mma-floor", "mma-scales"):  # no products: not checked
                err = 0.0 if not torch.isnan(y).any() else float("nan")
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
            cfg_s = ",".join(f"{a}={b}" for a, b in cfg.items())
            rows.append((cfg_s, regs, lambda kern=kern, t=t: kern(*t), moved))
        for _c, _r, fn, _b in rows:  # warm up
            fn()
        rounds = {(i, p): [] for i in range(len(rows)) for p in protocols}
        for _ in range(args.rounds):
            for p in protocols:
                for i, (_c, _r, fn, _b) in enumerate(rows):
                    rounds[i, p].append(time_ms(fn, torch, flushes[p], args.reps))
        base = {p: statistics.median(rounds[0, p]) for p in protocols}
        for i, (cfg_s, regs, _fn, nbytes) in enumerate(rows):
            line = f"{shape:22s} {cfg_s:40s}"
            for p in protocols:
                ms = statistics.median(rounds[i, p])
                line += f" {ms:9.4f} {nbytes / ms / 1e6:5.0f} {base[p] / ms:5.2f}"
            print(f"{line} {regs:>4s}")
        del ref, y, cublas_fn, rows
    return status


def floor_rows(torch, wbytes: int, fp16_bytes: int) -> list:
    """The floor rows: a one-element ``zero_`` (launch and event overhead) and a sum of an
    int32 tensor of the kernel's weight bytes and of cuBLAS's (a stream of those bytes)."""
    tiny = torch.zeros(1, dtype=torch.int32, device="cuda")
    sink = torch.empty((), dtype=torch.int64, device="cuda")
    out = [("floor: empty kernel", "", lambda t=tiny: t.zero_(), 0)]
    for what, nbytes in (("weights", wbytes), ("fp16 weights", fp16_bytes)):
        buf = torch.ones(nbytes // 4, dtype=torch.int32, device="cuda")
        out.append((f"floor: read {what} {nbytes / 1e6:.1f} MB", "",
                    lambda b=buf: torch.sum(b, dim=0, out=sink), nbytes))  # fmt: skip
    return out


if __name__ == "__main__":
    sys.exit(main())
