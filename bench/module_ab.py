"""Two versions of one example kernel module side by side on a GPU (A/B), beside cuBLAS fp16.

``python3 bench/module_ab.py --old OLD.py [--new examples/quantized/matmul_wx_a16_mma.py]``
loads both files as modules (the old one, e.g. ``git show REV:PATH > OLD.py``, under another
name so that their kernels keep apart in the dispatch table) and, for the W4A16 mma.sync
kernel's decode shapes (``--shapes``), runs each module's ``MatmulWxA16Mma(WDTYPE, 128)``
(``--wdtype``, default uint4b) by
its default constructor (tuned on first use) on weights packed by that module's
``prepack_torch``, checks both against torch in float32 (NaN-poisoned outputs), then times
old, new and ``torch.matmul`` on the fp16 weights in interleaved rounds (the median of
``--rounds`` round medians of ``--reps`` CUDA-event timings), the L2 flushed before every run
under each ``--flush`` protocol (``bench/l2_flush.py``; ``rotate``: no flush, each
implementation called back to back on input sets that together are several L2s,
``bench/rowwise.py``). Prints a line a shape and protocol
(microseconds, the ratio to cuBLAS, new over old); ``--out FILE`` keeps the rounds as JSON.
``--dry-run`` (no GPU) runs both modules on the interpreter at a small ragged size instead.
Only the kernel file is versioned: both versions import the helpers beside it as they are now
(``split_k.py``, ``mma_space.py``, ``mma_operands.py``; a file from before they were split out
has its own copies), so an A/B of a change to a helper needs the old helper copied too.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
for p in (REPO, REPO / "bench", REPO / "examples" / "quantized"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

DEFAULT_NEW = REPO / "examples" / "quantized" / "matmul_wx_a16_mma.py"
SHAPES = "1x8192x8192,1x28672x4096,16x8192x8192,16x28672x4096"


def load(path: Path, name: str):
    """The Python file ``path`` imported as module ``name``."""
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load {path}")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def dry_run(mods: dict, floor: bool = False, wdtype=None) -> bool:
    """Each module's kernel on the interpreter at a ragged size (with ``floor``, its floor
    kernel too, which must leave no NaN): True when all pass."""
    import numpy as np

    import tilus

    wdtype = wdtype or tilus.uint4b
    ok_all = True
    cfg = dict(block_m=8, split_k=2, unroll=1)
    for name, mod in mods.items():
        with tilus.option.scoped(interpret=True):
            err = mod.run_interp(wdtype, 128, 3, 37, 384, **cfg)
        ok = err < 1e-2
        print(f"{name}: interpreter max rel err {err:.1e} {'ok' if ok else 'FAIL'}")
        ok_all &= ok
        if floor:
            from w4a16_floor import stream_of

            m, n, k = 3, 37, 384
            rng = np.random.default_rng()
            x = rng.standard_normal((m, k)).astype(np.float16)
            w = mod.prepack(rng.integers(0, 16, (n, k)))
            s = np.ones((n, k // 128), np.float16)
            y = np.full((m, n), np.nan, np.float16)
            fk = stream_of(mod.MatmulWxA16Mma)(wdtype, 128, **mod.pinned(**cfg))
            with tilus.option.scoped(interpret=True):
                fk(m, n, k, x, w, s, y)
            ok = not np.isnan(y).any()
            print(f"{name} floor: interpreter {'ok' if ok else 'FAIL (NaN left)'}")
            ok_all &= ok
    return ok_all


def rotated_runs(mods: dict, runs: dict, kerns: dict, torch, m: int, n: int, k: int,
                 wdtype) -> dict:  # fmt: skip
    """The ``rotate`` protocol's runs: each of ``runs`` (on the set it was checked on) and the
    same kernels ``kerns`` (name -> the tuned kernel or floor) on more random input sets of
    the shape, enough that no set is left in the L2 when its turn comes again
    (``rowwise.rotation_sets``); cuBLAS on fp16 weights of each set."""
    from rowwise import rotation_sets

    kb = k * wdtype.nbits // 8  # a row's packed bytes
    sets_q = rotation_sets(n * kb + n * (k // 128) * 2)  # the packed codes and scales
    sets_h = rotation_sets(n * k * 2)  # cuBLAS's fp16 weights
    out = {name: [fn] for name, fn in runs.items()}
    for i in range(1, max(sets_q, sets_h)):
        x = torch.randn(m, k, dtype=torch.float16, device="cuda")
        y = torch.empty((m, n), dtype=torch.float16, device="cuda")
        if i < sets_h:
            w16 = torch.randn(n, k, dtype=torch.float16, device="cuda")
            out["cublas"].append(lambda x=x, w16=w16: torch.matmul(x, w16.T))
        if i >= sets_q:
            continue
        w = torch.randint(0, 256, (n, kb), dtype=torch.uint8, device="cuda")
        s = (torch.rand(n, k // 128, device="cuda") * 0.02 + 0.002).half()
        packed = {name: mod.prepack_torch(torch, w, wdtype) for name, mod in mods.items()}
        for name, kern in kerns.items():
            args = (m, n, k, x, packed[name.split()[0]], s, y)
            out[name].append(lambda kern=kern, args=args: kern(*args))
    return out


def measure(mods: dict, shapes, flushes, rounds: int, reps: int, floor: bool = False,
            wdtype=None) -> tuple[list, bool]:  # fmt: skip
    """Check, then time every module's tuned kernel and cuBLAS at each shape and flush (with
    ``floor``, each module's pipeline floor at its kernel's config too)."""
    import matmul_wx_a16 as ex
    import torch
    from l2_flush import make_flush
    from rowwise import interleaved_rounds, rotated_rounds, winner

    import tilus

    wdtype = wdtype or tilus.uint4b
    out, ok_all = [], True
    for m, n, k in shapes:
        x, w, s, w16 = ex.torch_problem(torch, m, n, k, 128, wdtype)
        ref = torch.matmul(x.float(), w16.float().T)
        runs, cfg, kerns = {}, {}, {}
        for name, mod in mods.items():
            wp = mod.prepack_torch(torch, w, wdtype)
            kern = mod.MatmulWxA16Mma(wdtype, 128)
            y = torch.full((m, n), float("nan"), dtype=torch.float16, device="cuda")
            kern(m, n, k, x, wp, s, y)  # compiles and tunes
            err = ((y.float() - ref).abs().max() / ref.abs().max()).item()
            ok = not torch.isnan(y).any().item() and err < 1e-2
            ok_all &= ok
            cfg[name] = winner(kern)
            print(f"{m}x{n}x{k} {name}: max rel err {err:.2e} {'ok' if ok else 'FAIL'} "
                  f"[{cfg[name]}]", flush=True)  # fmt: skip
            args = (m, n, k, x, wp, s, y)
            runs[name] = lambda kern=kern, args=args: kern(*args)
            kerns[name] = kern
            if floor:  # the module's pipeline with no math, at the config its kernel won
                from w4a16_configs import parse_configs
                from w4a16_floor import stream_of

                cfg_d = parse_configs(cfg[name])[0]
                fk = stream_of(mod.MatmulWxA16Mma)(wdtype, 128, **mod.pinned(**cfg_d))
                runs[f"{name} floor"] = lambda fk=fk, args=args: fk(*args)
                kerns[f"{name} floor"] = fk
        runs["cublas"] = lambda x=x, w16=w16: torch.matmul(x, w16.T)
        for fl in flushes:
            if fl == "rotate":
                rot = rotated_runs(mods, runs, kerns, torch, m, n, k, wdtype)
                r = rotated_rounds(rot, torch, rounds, reps)
            else:
                flush = make_flush(torch, fl)
                r = interleaved_rounds(runs, torch, flush, rounds, reps)
                del flush
            med = {key: statistics.median(v) for key, v in r.items()}
            out.append(dict(shape=f"{m}x{n}x{k}", flush=fl, ms=med, rounds=r, config=cfg))
            base = med["cublas"]
            text = "  ".join(f"{key} {med[key] * 1e3:6.1f} us ({base / med[key]:.2f}x)"
                             for key in runs if key != "cublas")  # fmt: skip
            print(f"{m}x{n}x{k} {fl:5s} cublas {base * 1e3:6.1f} us  {text}  new/old "
                  f"{med['old'] / med['new']:.3f}", flush=True)  # fmt: skip
    return out, ok_all


def main(argv=None) -> int:
    """Parse the arguments, load both modules, then dry-run or measure; the exit status."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--old", required=True, help="the old version of the module (a file)")
    ap.add_argument("--new", default=str(DEFAULT_NEW), help="the new version (default: main's)")
    ap.add_argument("--shapes", default=SHAPES, help="comma-separated MxNxK")
    ap.add_argument("--flush", default="dirty,clean",
                    help="comma-separated L2 flush protocols (dirty, clean, rotate)")  # fmt: skip
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--out", default=None, help="write the rounds as JSON")
    ap.add_argument("--floor", action="store_true",
                    help="time each module's pipeline floor (bench/w4a16_floor.py) beside it")  # fmt: skip
    ap.add_argument("--dry-run", action="store_true", help="the interpreter at a small size")
    ap.add_argument("--wdtype", default="uint4b", help="the weight type (a tilus dtype name)")
    args = ap.parse_args(argv)
    import tilus

    wdtype = getattr(tilus, args.wdtype)
    mods = {"old": load(Path(args.old), "ab_old"), "new": load(Path(args.new), "ab_new")}
    if args.dry_run:
        return 0 if dry_run(mods, args.floor, wdtype) else 1
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",") if s]
    rows, ok = measure(mods, shapes, args.flush.split(","), args.rounds, args.reps, args.floor,
                       wdtype)  # fmt: skip
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
