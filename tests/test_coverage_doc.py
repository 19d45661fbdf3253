"""docs/coverage.md is generated from the rule tables and must be up to date."""

from __future__ import annotations

from tilus.tools import coverage


def test_committed_coverage_table_is_up_to_date():
    path = coverage.doc_path()
    assert path.read_text() == coverage.render(), (
        "docs/coverage.md is out of date: run python -m tilus.tools.coverage"
    )


def test_rows_follow_the_tables():
    from tilus.backends.cuda.tables import NOT_LOWERED
    from tilus.ir.inst import INSTRUCTIONS

    rows = {r["cls"]: r for r in coverage.rows()}
    assert set(rows) == {c.__name__ for c in INSTRUCTIONS.values()}
    for cls, reason in NOT_LOWERED.items():
        assert rows[cls.__name__]["cuda"] == f"no: {reason}"
    assert rows["Dot"]["front_end"] == ["self.dot"] and rows["Dot"]["min_target"] == "sm_80"
    assert "self.mbarrier.wait" in rows["MBarrierWait"]["front_end"]
    assert rows["WgmmaMma"]["min_target"] == "sm_90a"
    assert "self.load_global" not in coverage.missing_spec_names()


def test_check_mode(tmp_path, capsys):
    out = tmp_path / "coverage.md"
    assert coverage.main(["--output", str(out)]) == 0
    assert coverage.main(["--check", "--output", str(out)]) == 0
    out.write_text("stale\n")
    assert coverage.main(["--check", "--output", str(out)]) == 1
    assert "out of date" in capsys.readouterr().err
