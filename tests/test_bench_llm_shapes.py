"""bench/llm_shapes.py and bench/sanitize.py: argument checks, a CPU dry run that builds the kernels."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.cuda.conftest import needs_nvrtc

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
import llm_shapes  # noqa: E402


def test_the_suite_has_the_issue_shapes():
    shapes = set(llm_shapes.SHAPES.values())
    assert {(8192, 8192, 8192), (4096, 4096, 4096), (3000, 4096, 4096)} <= shapes
    assert {(4096, 28672, 4096), (4096, 4096, 14336), (8192, 57344, 8192)} <= shapes
    assert {(64, 4096, 4096), (256, 8192, 8192)} <= shapes
    assert set(llm_shapes.QUICK) <= set(llm_shapes.SHAPES)


def test_bad_arguments_are_refused():
    for argv in (["--dtype", "fp8"], ["--shapes", "nope"]):
        with pytest.raises(SystemExit) as info:
            llm_shapes.main([*argv, "--dry-run"])
        assert info.value.code == 2


@needs_nvrtc
def test_dry_run_builds_every_kernel():
    proc = subprocess.run(
        [sys.executable, "bench/llm_shapes.py", "--dry-run", "--shapes", "m64-4096"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for name in ("fp16 v5", "fp16 v6", "fp16 v7", "bf16 v7"):
        assert f"{name} m64-4096: built (0 spill bytes" in proc.stdout


def test_sanitize_covers_v0_to_v7_and_refuses_unknown_tools():
    import sanitize

    for name in sanitize.KERNELS:
        cls = sanitize.kernel_class(name)
        assert len(cls().configs) > 1, name
    assert {"v0", "v7", "v7bf16"} <= set(sanitize.KERNELS)
    with pytest.raises(SystemExit) as info:
        sanitize.main(["--tools", "leakcheck"])
    assert info.value.code == 2


def test_sanitize_verdict_counts_refused_configs_as_skipped():
    import sanitize

    ok = {"errors": 0, "failed_checks": 0, "skipped": 3, "rc": 0}
    assert sanitize.verdict(ok) == "ok"  # V1/V3's refused 128 x 256 configs: not a failure
    assert sanitize.verdict({**ok, "errors": 2}) == "2 errors"
    assert "no ERROR SUMMARY" in sanitize.verdict({**ok, "errors": None})
    assert "did not report" in sanitize.verdict({**ok, "failed_checks": None})
    assert "1 configs failed" in sanitize.verdict({**ok, "failed_checks": 1})


def test_sanitize_reads_every_tool_summary():
    import sanitize

    assert sanitize.error_count("========= ERROR SUMMARY: 0 errors\n") == 0
    assert sanitize.error_count("========= ERROR SUMMARY: 3 errors\n") == 3
    race = "========= RACECHECK SUMMARY: 2 hazards displayed (1 error, 1 warning)\n"
    assert sanitize.error_count(race) == 1
    assert (
        sanitize.error_count(
            race.replace("2 hazards", "0 hazards").replace("1 error,", "0 errors,")
        )
        == 0
    )
    assert sanitize.error_count("killed\n") is None


def test_tune_time_space_is_100_distinct_kernels():
    import tune_time

    space = tune_time.v7_space(100)
    configs = space().configs
    assert len(configs) == 100
    assert len({tuple(sorted(c.items())) for c in configs}) == 100
    with pytest.raises(SystemExit):
        tune_time.main(["--configs", "0"])


def test_pinned_config_text_is_short():
    cfg = {"block_m": 128, "block_n": 256, "block_k": 64, "num_stages": 3, "split_k": 1,
           "swizzle": 8, "cluster_n": 2, "coop": 1}  # fmt: skip
    assert llm_shapes._config_text(cfg) == "m128 n256 st3 sk1 sw8 cl2 coop1"
    cfg.update(block_k=128, partials="store")
    assert llm_shapes._config_text(cfg) == "m128 n256 k128 st3 sk1 sw8 cl2 coop1 pstore"


def test_pinned_configs_file(tmp_path):
    # the committed candidates name known shapes and build as constructor arguments
    data = llm_shapes.load_configs(str(ROOT / "bench" / "configs" / "v7_small_m.json"))
    assert set(data) <= set(llm_shapes.SHAPES) and all(data.values())
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2]")
    with pytest.raises(SystemExit, match="expected"):
        llm_shapes.load_configs(str(bad))
