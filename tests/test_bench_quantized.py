"""bench/quantized.py on the CPU: --help, and --dry-run checks every case on the interpreter."""

from __future__ import annotations

import pytest

from tests.helpers_bench import run_bench

pytest.importorskip("torch")


def _run(*args):
    return run_bench("quantized.py", *args)


def test_help_names_the_cases():
    p = _run("--help")
    assert p.returncode == 0 and "--dry-run" in p.stdout and "fp8_matmul" in p.stdout


def test_dry_run_checks_every_case():
    p = _run("--dry-run")
    assert p.returncode == 0, p.stdout + p.stderr
    # 16 rows besides the per-token cast's, one a config of its CPU_CONFIGS
    assert p.stdout.count("fp8_cast rows=") == 6
    assert p.stdout.count(" ok") == 22 and "FAIL" not in p.stdout
    assert p.stdout.count("fp8_matmul MatmulFP8Precise ") == 2  # promoted sums, both scalings
    assert p.stdout.count("dequant ") == 2  # the dequantize kernel, two weight types
    assert p.stdout.count("w4a16 entry ") == 2  # the user entry at both M regimes
    assert p.stdout.count("w4a16 split_k=") == 2


def test_unknown_case_is_refused():
    p = _run("--dry-run", "--cases", "fp8_matmul,nope")
    assert p.returncode != 0 and "nope" in (p.stdout + p.stderr)


def test_crossover_bench_help():
    p = run_bench("wx_crossover.py", "--help")
    assert p.returncode == 0 and "--types" in p.stdout


def test_rotate_protocol_is_for_the_w4a16_case_only():
    p = _run("--dry-run", "--flush", "rotate", "--cases", "fp8_matmul,w4a16")
    assert p.returncode != 0 and "rotate times the w4a16 case only" in p.stderr
    assert "fp8_matmul" in p.stderr
