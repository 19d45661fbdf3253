"""bench/lowbit_casts.py without a GPU: its kernels checked on the interpreter (--dry-run)."""

from __future__ import annotations

import importlib.util
from pathlib import Path


def test_dry_run_checks_every_cast_case(capsys):
    path = Path(__file__).resolve().parents[1] / "bench" / "lowbit_casts.py"
    spec = importlib.util.spec_from_file_location("bench_lowbit_casts", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.main(["--dry-run"]) == []
    out = capsys.readouterr().out
    assert out.count("ok  cast") == len(mod.CASTS) == len(mod.CASES)
