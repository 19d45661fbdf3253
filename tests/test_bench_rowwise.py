"""bench/rowwise.py on the CPU: --help, and --dry-run checks every kernel on the interpreter."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _run(*args):
    env = dict(os.environ, TILUS_INTERPRET="1")
    return subprocess.run(
        [sys.executable, "bench/rowwise.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_help():
    p = _run("--help")
    assert p.returncode == 0 and "--dry-run" in p.stdout and "--out" in p.stdout


def test_dry_run_checks_every_kernel():
    p = _run("--dry-run")
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.count(" ok") == 4 and "FAIL" not in p.stdout
