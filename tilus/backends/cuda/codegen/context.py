"""Code generation state: output lines, indentation, deterministic names, the group stack."""

from __future__ import annotations

import os
import re

from tilus.backends.cuda.codegen.source_text import statement_text
from tilus.backends.cuda.layout import Group, LayoutPlan
from tilus.errors import TilusCompileError

C_RESERVED = {
    "auto", "break", "case", "char", "const", "continue", "default", "do", "double", "else",
    "enum", "extern", "float", "for", "goto", "if", "int", "long", "register", "return",
    "short", "signed", "sizeof", "static", "struct", "switch", "typedef", "union", "unsigned",
    "void", "volatile", "while", "bool", "true", "false", "class", "new", "delete", "this",
    "template", "typename", "namespace", "using", "operator", "private", "public", "friend",
    "virtual", "inline", "min", "max", "abs", "threadIdx", "blockIdx", "gridDim", "blockDim",
    "warpSize", "half", "asm", "not", "and", "or", "xor",
}  # fmt: skip


class Context:
    """Everything the emitters share while one kernel is generated."""

    def __init__(self, program, plan: LayoutPlan):
        self.program = program
        self.fn = program.fn
        self.divisors: dict | None = None  # assume() facts (codegen.vector), made on first use
        self.smem = program.smem
        self.plan = plan
        self.lines: list[str] = []
        self.indent = 1
        self.names: dict[int, str] = {}
        self.used: set[str] = set()
        self.groups: list[Group] = [Group(0, self.fn.num_threads)]
        self.named_barriers: dict = {}  # (begin, size) -> named barrier id
        self.fragments: list = []  # extra prelude fragments (wgmma shapes)
        self.tmp = 0
        self.stmt = None  # the statement being emitted (for errors)
        self.declared: set = set()  # ids of register tiles already declared
        self.last_loc = None  # (file, line) of the last source comment
        self.broadcasts: dict = {}  # element read of a tile spread over threads -> C name
        self.gview_info: dict = {}  # global TensorVar -> (C name, shape codes, stride codes)
        self.aligned_bases: dict = {}  # C name of a view on a pointer argument -> its alignment
        self.shared_names: dict = {}  # shared view TensorVar -> C name of its byte offset
        self.shared_align: dict = {}  # shared view TensorVar -> a power of two dividing it
        self.blocks: list[int] = [0]  # ids of the open C blocks (for scope checks)
        self.block_seq = 0
        self.decl_scope: dict = {}  # id(register tile) -> open blocks at its declaration
        self.wgmma_accs: dict = {}  # id(tile) -> tile, every wgmma accumulator so far
        # id(Reduce) -> (a, b): a 16-bit sum of the product a * b, emitted as FMA chains
        # (codegen.stmts fuses the product into the sum)
        self.fused_products: dict = {}
        # the kernel has ``tl_warp``, its warp index made warp-uniform (codegen.kernel)
        self.warp_uniform = False

    # --- output ------------------------------------------------------------------------------
    def emit(self, line: str = ""):
        """Append one line at the current indentation."""
        if line.startswith("#"):
            self.lines.append(line)
        else:
            self.lines.append("  " * self.indent + line if line else "")

    def open(self, head: str):
        """Emit ``head {`` (a bare block when ``head`` is empty) and indent."""
        self.emit(f"{head} {{" if head else "{")
        self.indent += 1
        self.block_seq += 1
        self.blocks.append(self.block_seq)

    def close(self, tail: str = "}"):
        """Dedent and emit the closing brace."""
        self.indent -= 1
        self.blocks.pop()
        self.emit(tail)

    def reopen(self, text: str = "} else {"):
        """Close the current block and open its sibling on one line (``} else {``)."""
        self.close(text)
        self.indent += 1
        self.block_seq += 1
        self.blocks.append(self.block_seq)

    def error(self, msg: str) -> TilusCompileError:
        """A compile error at the statement being emitted."""
        loc = self.stmt.loc if self.stmt is not None else None
        return TilusCompileError(f"CUDA backend: {msg}", loc)

    def source_comment(self, stmt):
        """``// file.py:LINE  <source>`` above a statement's code: the user's whole statement
        (a compound statement's header) on one line, once per run of code from it."""
        loc = stmt.loc
        if loc is None:
            return
        line, text = statement_text(loc.file, loc.line, loc.col)
        if (loc.file, line) == self.last_loc:
            return
        self.last_loc = (loc.file, line)
        text = text.replace("*/", "* /")
        self.emit(f"// {os.path.basename(loc.file)}:{line}  {text}".rstrip())

    def in_scope(self, t) -> bool:
        """Whether register tile ``t`` was declared in a C block that is still open."""
        scope = self.decl_scope.get(id(t))
        return scope is not None and tuple(self.blocks[: len(scope)]) == scope

    # --- names -------------------------------------------------------------------------------
    def name(self, v) -> str:
        """A stable, unique C identifier for a variable or tile."""
        key = id(v)
        if key not in self.names:
            base = re.sub(r"[^A-Za-z0-9_]", "_", v.name) or "v"
            if base[0].isdigit() or base in C_RESERVED or base.startswith("tl_"):
                base = "v_" + base
            name, i = base, 0
            while name in self.used:
                i += 1
                name = f"{base}_{i}"
            self.used.add(name)
            self.names[key] = name
        return self.names[key]

    def fresh(self, hint: str = "t") -> str:
        """A new temporary name."""
        self.tmp += 1
        return f"tl_{hint}{self.tmp}"

    # --- thread groups -----------------------------------------------------------------------
    @property
    def group(self) -> Group:
        """The innermost thread group."""
        return self.groups[-1]

    def tid(self, g: Group) -> str:
        """The thread index relative to group ``g``."""
        return "(int)threadIdx.x" if g.begin == 0 else f"((int)threadIdx.x - {g.begin})"
