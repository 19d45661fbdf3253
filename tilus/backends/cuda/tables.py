"""The CUDA backend's rule tables (layouts, code) and what it does not lower, by IR class."""

from __future__ import annotations

from tilus.ir.rules import RuleTable

#: Instructions the CUDA backend refuses, each with the reason given at the user's line (the
#: interpreter runs them). Shared by both tables: an instruction is lowered by both or neither.
NOT_LOWERED: dict[type, str] = {}

#: Layout inference: ``fn(inference, stmt, inst, group)`` records the layout facts of one
#: instruction (``tilus.backends.cuda.layout.rules``).
LAYOUT_RULES = RuleTable("CUDA layout inference", NOT_LOWERED)

#: Code generation: ``fn(ctx, inst, expr)`` emits the C++ of one instruction
#: (``tilus.backends.cuda.codegen``).
CODEGEN_RULES = RuleTable("CUDA code generation", NOT_LOWERED)
