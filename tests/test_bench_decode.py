"""bench/decode_bench.py on the CPU: --help, and --dry-run checks its runs on the interpreter."""

from __future__ import annotations

from tests.helpers_bench import run_bench


def test_help():
    p = run_bench("decode_bench.py", "--help")
    assert p.returncode == 0 and "--dry-run" in p.stdout and "clean" in p.stdout


def test_dry_run_checks_the_tuned_and_every_page_64_config():
    p = run_bench("decode_bench.py", "--dry-run")
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.count(": ok") == 5 and "FAIL" not in p.stdout
    assert "page 64 b128s3: ok" in p.stdout  # a stage of two pages
