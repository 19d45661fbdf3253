"""Every instruction has one definition and an interpreter rule (and a CUDA rule once built)."""

from __future__ import annotations

import dataclasses

import pytest

from tilus.backends.interp.launch import INTERP_RULES
from tilus.ir.inst import INSTRUCTIONS


def test_every_instruction_has_an_interpreter_rule():
    missing = sorted(set(INSTRUCTIONS) - set(INTERP_RULES))
    assert not missing, f"instructions without an interpreter rule: {missing}"
    stray = sorted(set(INTERP_RULES) - set(INSTRUCTIONS))
    assert not stray, f"interpreter rules for unknown instructions: {stray}"


def test_every_instruction_has_a_cuda_rule():
    try:
        from tilus.backends.cuda.codegen import CUDA_RULES
    except ImportError:
        pytest.skip("the CUDA code generator is not part of this build")
    missing = sorted(set(INSTRUCTIONS) - set(CUDA_RULES))
    assert not missing, f"instructions without a CUDA rule: {missing}"


def test_instructions_are_frozen_and_documented():
    for name, cls in INSTRUCTIONS.items():
        assert dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen, name
        assert cls.__doc__, name
