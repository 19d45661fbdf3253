"""bench/attention.py on the CPU: --help, and --dry-run checks the kernels on the interpreter."""

from __future__ import annotations

import subprocess
import sys

from tests.helpers_bench import ROOT, run_bench


def _run(*args):
    return run_bench("attention.py", *args)


def test_help():
    p = _run("--help")
    assert p.returncode == 0 and "--dry-run" in p.stdout and "--paged" in p.stdout


def test_dry_run_checks_the_kernels():
    p = _run("--dry-run")
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.count(": ok") == 4 and "FAIL" not in p.stdout
    assert "paged decode" in p.stdout
    assert "decode floor 2x4/2 cache 150: ok" in p.stdout  # the stream floor ran to its end


def test_variant_study_lists_buildable_variants():
    p = subprocess.run(
        [sys.executable, "bench/attention_variants.py", "--list"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    assert "d128 causal:" in p.stdout and "cg2 pp pers er" in p.stdout
    # every variant is a valid kernel construction (block_m splits over the consumer groups)
    sys.path.insert(0, str(ROOT / "bench"))
    import attention_variants as AV

    for (d, causal), vs in AV.VARIANTS.items():
        for v in vs:
            k = AV.kernel_of(v, d, causal)
            assert len(k.configs) == 1 and AV.label(v)
