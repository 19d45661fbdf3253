"""compute-sanitizer over the Hopper matmul examples: memcheck, racecheck and synccheck on one run
of every config of V0-V7 (V7 in fp16 and bf16) at a ragged size; prints a table of error counts.

Run on a Hopper GPU with torch and ``compute-sanitizer`` on ``PATH`` (or ``$COMPUTE_SANITIZER``):
``python3 bench/sanitize.py [--tools memcheck,racecheck,synccheck] [--kernels v0,...,v7,v7bf16]``.
Every config is built first without the sanitizer (so the sanitized processes only load cached
cubins; the logs go to ``$OUT`` or a temporary folder); then one process per (tool, kernel) runs every config of the kernel once on fresh
random inputs into a NaN-poisoned C and checks it against ``torch.matmul``. The tool's
``ERROR SUMMARY`` line gives the count. Writes JSON to ``$OUT/sanitize.json`` when ``$OUT`` is
set and to ``bench/results/<YYYY-MM-DD>-h200-sanitize.json``; exits 1 when any count is not 0 or
missing, or a config that built ran wrong or failed. A config that tilus refuses to build (a
``TilusCompileError``: e.g. a 128 x 256 accumulator on one warp group of V1/V3 needs more
registers than fit, the same refusal the autotuner skips) is counted as *skipped*, not failed.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
for p in (REPO, REPO / "bench", REPO / "examples" / "hopper_matmul"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

SIZE = (200, 328, 392)  # ragged in M, N and K; K spans more tiles than any ring has stages
TOOLS = ("memcheck", "racecheck", "synccheck")
#: name -> (module, class, dtype)
KERNELS = {
    "v0": ("matmul_v0", "MatmulTMA", "float16"),
    "v1": ("matmul_v1", "MatmulWGMMA", "float16"),
    "v2": ("matmul_v2", "MatmulWGMMAV2", "float16"),
    "v3": ("matmul_v3", "MatmulWGMMAV3", "float16"),
    "v4": ("matmul_v4", "MatmulWGMMAV4", "float16"),
    "v5": ("matmul_v5", "MatmulWGMMAV5", "float16"),
    "v6": ("matmul_v6", "MatmulWGMMAV6", "float16"),
    "v7": ("matmul_v7", "MatmulV7", "float16"),
    "v7bf16": ("matmul_v7", "MatmulV7BF16", "bfloat16"),
}


def kernel_class(name: str):
    """The example's Script class."""
    import importlib

    module, cls, _ = KERNELS[name]
    return getattr(importlib.import_module(module), cls)


def run_every_config(name: str) -> int:
    """One run of every config of kernel ``name``, checked; the number of failed configs
    (configs that tilus refuses to compile are skipped)."""
    import torch

    import tilus

    cls = kernel_class(name)
    tdt = getattr(torch, KERNELS[name][2])
    m, n, k = SIZE
    a = torch.randn(m, k, device="cuda", dtype=tdt)
    b = torch.randn(n, k, device="cuda", dtype=tdt)
    ref = a.float() @ b.float().T
    bad = skipped = 0
    for cfg in cls().configs:
        c = torch.full((m, n), float("nan"), device="cuda", dtype=tdt)
        try:
            cls(**cfg)(m, n, k, a, b, c)
            torch.cuda.synchronize()
        except tilus.TilusCompileError as e:  # refused before anything ran: not a failure
            print(f"{name} {cfg}: SKIPPED (refused: {str(e).splitlines()[0][-90:]})")
            skipped += 1
            continue
        except Exception as e:  # noqa: BLE001 - count it, run the other configs
            print(f"{name} {cfg}: FAILED {type(e).__name__}: {str(e).splitlines()[0]}")
            bad += 1
            continue
        nan = bool(torch.isnan(c).any())
        err = float((c.float() - ref).abs().max() / ref.abs().max())
        if nan or not err < 1e-2:
            print(f"{name} {cfg}: WRONG (NaN {nan}, rel err {err:.2e})")
            bad += 1
    print(f"{name}: {len(cls().configs)} configs run, {bad} failed, {skipped} skipped", flush=True)
    return bad


def sanitizer() -> str:
    """The compute-sanitizer executable."""
    exe = os.environ.get("COMPUTE_SANITIZER") or shutil.which("compute-sanitizer")
    for guess in ("/usr/local/cuda/bin/compute-sanitizer",):
        if exe is None and Path(guess).exists():
            exe = guess
    if exe is None:
        raise SystemExit("compute-sanitizer not found: put it on PATH or set $COMPUTE_SANITIZER")
    return exe


def sanitized(tool: str, name: str, log_dir: Path) -> dict:
    """Run kernel ``name``'s configs under ``tool``; its error count and the checks' result."""
    cmd = [sanitizer(), "--tool", tool, sys.executable, __file__, "--child", name]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    text = proc.stdout + proc.stderr
    (log_dir / f"sanitize-{tool}-{name}.txt").write_text(text)
    errors = error_count(text)
    kinds = sorted(set(re.findall(r"^========= (?:Program hit |Invalid |)(\S.*?)(?: at| on|$)",
                                  text, re.M)))[:5]  # fmt: skip
    checked = re.search(rf"^{name}: (\d+) configs run, (\d+) failed, (\d+) skipped", text, re.M)
    return {
        "errors": errors,
        "configs": int(checked[1]) if checked else None,
        "failed_checks": int(checked[2]) if checked else None,
        "skipped": int(checked[3]) if checked else None,
        "rc": proc.returncode,
        "first_kinds": kinds,
    }


def main(argv=None) -> int:
    """Build, run every (tool, kernel) under the sanitizer, print the table, write the JSON."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tools", default=",".join(TOOLS))
    ap.add_argument("--kernels", default=",".join(KERNELS))
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        return 1 if run_every_config(args.child) else 0
    tools = [t for t in args.tools.split(",") if t]
    names = [k for k in args.kernels.split(",") if k]
    bad = [t for t in tools if t not in TOOLS] + [k for k in names if k not in KERNELS]
    if bad:
        ap.error(f"unknown tools or kernels: {bad}")
    log_dir = Path(os.environ.get("OUT") or tempfile.mkdtemp(prefix="tilus-sanitize-"))
    log_dir.mkdir(parents=True, exist_ok=True)
    print(f"sanitizer logs in {log_dir}")
    failed = 0
    for name in names:  # build (and check) every config once without a sanitizer
        failed += run_every_config(name)
    print(f"unsanitized runs: {failed} failed configs")
    table = {}
    for name in names:
        for tool in tools:
            r = sanitized(tool, name, log_dir)
            table[f"{name} {tool}"] = r
            print(f"{name:7s} {tool:10s} errors {r['errors']}  checks failed {r['failed_checks']}"
                  f"  skipped {r['skipped']}  rc {r['rc']}  {', '.join(r['first_kinds'])}",
                  flush=True)  # fmt: skip
            failed += verdict(r) != "ok"
    out = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "size": SIZE,
        "command": "python3 bench/sanitize.py " + " ".join(argv or sys.argv[1:]),
        "results": table,
    }
    text = json.dumps(out, indent=1)
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "sanitize.json").write_text(text)
    try:
        day = out["date"][:10]
        (REPO / "bench" / "results" / f"{day}-h200-sanitize.json").write_text(text)
    except OSError:
        pass
    print(f"\nkernel   {'  '.join(f'{t:>10s}' for t in tools)}  (errors; failed checks)")
    for name in names:
        cells = [table[f"{name} {t}"] for t in tools]
        text = [f"{c['errors']}; {c['failed_checks']}" for c in cells]
        print(f"{name:8s} {'  '.join(f'{x:>10s}' for x in text)}")
    print(f"exit status {1 if failed else 0}: {failed} failed (tool, kernel) runs or configs")
    return 1 if failed else 0


def error_count(text: str):
    """The tool's error count: memcheck and synccheck end with ``ERROR SUMMARY: N errors``,
    racecheck with ``RACECHECK SUMMARY: H hazards displayed (N errors, W warnings)``; None
    when neither line is there (the tool did not finish)."""
    found = re.findall(r"ERROR SUMMARY: (\d+) error", text)
    found += re.findall(r"RACECHECK SUMMARY: \d+ hazards? displayed \((\d+) errors?", text)
    return int(found[-1]) if found else None


def verdict(r: dict) -> str:
    """``ok`` when the sanitizer ran, reported 0 errors and every config that built passed its
    check; else why not (a missing summary or check line means the child did not finish)."""
    if r["errors"] is None:
        return "no ERROR SUMMARY in the tool's output"
    if r["errors"]:
        return f"{r['errors']} errors"
    if r["failed_checks"] is None:
        return "the child did not report its checks"
    if r["failed_checks"]:
        return f"{r['failed_checks']} configs failed their check"
    return "ok"


if __name__ == "__main__":
    raise SystemExit(main())
