"""bench/rowwise.py on the CPU: --help, and --dry-run checks every kernel on the interpreter."""

from __future__ import annotations

from tests.helpers_bench import run_bench


def _run(*args):
    return run_bench("rowwise.py", *args)


def test_help():
    p = _run("--help")
    assert p.returncode == 0 and "--dry-run" in p.stdout and "--out" in p.stdout


def test_dry_run_checks_every_kernel():
    p = _run("--dry-run")
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.count(" ok") == 4 and "FAIL" not in p.stdout
