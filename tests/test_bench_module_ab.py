"""bench/module_ab.py on the CPU: both versions of a module checked on the interpreter."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_dry_run_checks_both_versions(tmp_path):
    # the same file as both versions: the tool loads them apart and checks each one
    kernel = REPO / "examples" / "quantized" / "matmul_wx_a16_mma.py"
    old = tmp_path / "old_mma.py"
    old.write_text(kernel.read_text())
    p = subprocess.run(
        [sys.executable, "bench/module_ab.py", "--old", str(old), "--dry-run", "--floor"],
        cwd=REPO, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert p.returncode == 0, p.stdout + p.stderr
    assert "old: interpreter" in p.stdout and "new: interpreter" in p.stdout
    assert "old floor: interpreter ok" in p.stdout and "new floor: interpreter ok" in p.stdout
