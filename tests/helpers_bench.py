"""Running a bench script on the CPU in a child process, with the interpreter forced on."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]


def run_bench(script: str, *args, timeout: int = 300) -> subprocess.CompletedProcess:
    """``python bench/<script> *args`` from the repository root with ``TILUS_INTERPRET=1``."""
    env = dict(os.environ, TILUS_INTERPRET="1")
    return subprocess.run(
        [sys.executable, f"bench/{script}", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
