"""Golden generated code: each example config's CUDA source matches tests/golden/<case>.cu."""

from __future__ import annotations

import difflib

import pytest

from tests.golden.cases import CASES, REGEN, REPO, SEED_KERNELS, Case, SeedsMissing, render

MAX_DIFF_LINES = 400


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_generated_code_matches_golden(case: Case):
    try:
        text = render(case)
    except SeedsMissing as e:
        pytest.skip(str(e))
    assert str(REPO) not in text and str(SEED_KERNELS) not in text, "a path of this machine"
    assert case.path.is_file(), f"{case.path.name} is missing: run {REGEN}"
    golden = case.path.read_text()
    if text == golden:
        return
    diff = list(
        difflib.unified_diff(
            golden.splitlines(),
            text.splitlines(),
            f"tests/golden/{case.path.name}",
            "generated",
            n=2,
            lineterm="",
        )
    )
    shown = diff[:MAX_DIFF_LINES]
    if len(diff) > MAX_DIFF_LINES:
        shown.append(f"... {len(diff) - MAX_DIFF_LINES} more diff lines")
    pytest.fail(
        f"the generated code of {case.cls} differs from its golden file; if the change is "
        f"intended, run {REGEN} and commit the diff:\n" + "\n".join(shown),
        pytrace=False,
    )
