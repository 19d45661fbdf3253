"""Every instruction has one definition and a rule (or a stated reason) in every rule table."""

from __future__ import annotations

import dataclasses

import pytest

from tilus.backends.cuda import tables as cuda_tables
from tilus.backends.cuda.codegen import CODEGEN_RULES  # noqa: F401 - registers codegen rules
from tilus.backends.cuda.layout import LayoutPlan  # noqa: F401 - registers layout rules
from tilus.backends.interp.launch import INTERP_RULES
from tilus.ir import inst as I
from tilus.ir.effects import EFFECTS, Out
from tilus.ir.inst import INSTRUCTIONS
from tilus.ir.rules import NotLowered, RuleTable

CLASSES = list(INSTRUCTIONS.values())
TABLES = [
    INTERP_RULES,
    EFFECTS,
    cuda_tables.LAYOUT_RULES,
    cuda_tables.CODEGEN_RULES,
    cuda_tables.MIN_TARGET,
]


@pytest.mark.parametrize("table", TABLES, ids=lambda t: t.name)
def test_every_instruction_has_a_rule_or_a_reason(table):
    assert not table.missing(CLASSES), f"{table.name}: no rule for {table.missing(CLASSES)}"
    assert not table.stray(CLASSES), (
        f"{table.name}: rules for non-instructions {table.stray(CLASSES)}"
    )


def test_the_interpreter_and_the_effects_cover_everything():
    # the interpreter is the reference semantics: it may not skip an instruction
    assert not INTERP_RULES.not_lowered and not EFFECTS.not_lowered
    for cls in CLASSES:
        assert cls in INTERP_RULES and cls in EFFECTS, cls.__name__


def test_cuda_tables_share_one_not_lowered_set_with_reasons():
    nl = cuda_tables.NOT_LOWERED
    assert cuda_tables.LAYOUT_RULES.not_lowered is nl is cuda_tables.CODEGEN_RULES.not_lowered
    assert cuda_tables.MIN_TARGET.not_lowered is nl
    for cls, reason in nl.items():
        assert cls in CLASSES and reason.strip() and "\n" not in reason, cls
        assert cls not in cuda_tables.LAYOUT_RULES and cls not in cuda_tables.CODEGEN_RULES
    lowered = [c for c in CLASSES if c not in nl]
    for cls in lowered:  # lowered means both a layout rule and a code generation rule
        assert cls in cuda_tables.LAYOUT_RULES and cls in cuda_tables.CODEGEN_RULES, cls


def test_effects_agree_with_the_fields():
    for cls in CLASSES:
        fx = EFFECTS.lookup(cls)
        names = {f.name for f in dataclasses.fields(cls)}
        assert (fx.out is Out.NONE) == ("out" not in names), cls.__name__
        for f in fx.updates + fx.binders + ((fx.scoped,) if fx.scoped else ()):
            assert f in names, (cls.__name__, f)


def test_instructions_are_frozen_documented_and_uniquely_named():
    for name, cls in INSTRUCTIONS.items():
        assert dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen, name
        assert cls.__doc__, name
        assert cls.NAME == name
    assert len({c.NAME for c in CLASSES}) == len(CLASSES)


def test_the_coverage_check_can_fail():
    # a table that lacks a rule names the class; a rule for a non-instruction is stray
    t = RuleTable("probe", {I.Reduce: "not yet"})
    t.rule(I.Sync)(lambda *a: None)
    assert "Dot" in t.missing(CLASSES) and "Reduce" not in t.missing(CLASSES)

    class NotAnInstruction:
        pass

    t.add(NotAnInstruction, None)
    assert t.stray(CLASSES) == ["NotAnInstruction"]
    with pytest.raises(RuntimeError, match="two rules"):
        t.rule(I.Sync)(lambda *a: None)
    with pytest.raises(RuntimeError, match="not-lowered"):
        t.add(I.Reduce, None)
    with pytest.raises(NotLowered, match="not yet"):
        t.lookup(I.Reduce)
    with pytest.raises(TypeError):
        t.add("sync", None)  # rules are keyed by classes, never names
