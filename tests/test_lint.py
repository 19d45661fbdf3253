"""The tree is lint-clean and formatted with the pinned ruff (skipped where ruff is absent)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PATHS = ["tilus", "tests", "examples", "bench"]


def _ruff(*args):
    exe = shutil.which("ruff")
    if exe is None:
        pytest.skip("ruff is not installed (pip install -e '.[test]')")
    return subprocess.run([exe, *args, *PATHS], cwd=ROOT, capture_output=True, text=True)


def test_ruff_check_is_clean():
    r = _ruff("check", "--no-cache")
    assert r.returncode == 0, r.stdout + r.stderr


def test_ruff_format_is_clean():
    r = _ruff("format", "--check", "--no-cache")
    assert r.returncode == 0, r.stdout + r.stderr
