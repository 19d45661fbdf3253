"""Source comments of the generated CUDA: scalar statements too, a call spanning lines whole."""

from __future__ import annotations

import inspect
import os
import textwrap

import tilus
from tilus import float32, int32
from tilus.backends.cuda.codegen.kernel import generate
from tilus.backends.cuda.codegen.source_text import _collapse, statement_text
from tilus.utils import cdiv


class Commented(tilus.Script):
    def __call__(self, n: int32, x_ptr: ~float32, y_ptr: ~float32):
        self.attrs.blocks = cdiv(n, 128)
        self.attrs.warps = 4
        offset: int32 = self.blockIdx.x * 128
        steps: int32 = 0
        while steps < 3:
            steps += 1
        if offset >= n:
            offset = 0
        gx = self.global_view(x_ptr, dtype=float32, shape=[n])
        gy = self.global_view(y_ptr, dtype=float32, shape=[n])
        x = self.load_global(
            gx,  # the input
            offsets=[offset],
            shape=[128],
        )
        self.store_global(gy, x, offsets=[offset])


def _comments():
    kernel = Commented()
    const, _ = kernel.bind((1000, None, None), {})
    src = generate(kernel.program(kernel.configs[0], const)).source
    return [line.strip() for line in src.splitlines() if line.strip().startswith("// ")]


def _line(text: str) -> int:
    lines, first = inspect.getsourcelines(Commented)
    return first + next(i for i, s in enumerate(lines) if s.strip().startswith(text))


def test_scalar_statements_have_source_comments():
    name = os.path.basename(__file__)
    comments = _comments()
    for text in ("offset: int32 = self.blockIdx.x * 128", "steps: int32 = 0", "while steps < 3:"):
        assert f"// {name}:{_line(text)}  {text}" in comments
    for text in ("steps += 1", "if offset >= n:", "offset = 0"):
        assert f"// {name}:{_line(text)}  {text}" in comments


def test_a_call_over_several_lines_is_shown_whole():
    name = os.path.basename(__file__)
    want = f"// {name}:{_line('x = self.load_global(')}  "
    want += "x = self.load_global(gx, offsets=[offset], shape=[128])"
    assert want in _comments()


def test_collapse():
    lines = [
        "    f(\n",
        "        a,  # why\n",
        "        b=[1,\n",
        "           2],\n",
        "    )  # done\n",
    ]
    assert _collapse(lines) == "f(a, b=[1, 2])  # done"
    assert _collapse(["x = 1 + \\\n", "    2\n"]) == "x = 1 + 2"


def test_statement_text_of_a_header_and_of_a_line_inside_a_call(tmp_path):
    path = tmp_path / "k.py"
    path.write_text(
        textwrap.dedent(
            """\
            def k(a, b):
                for i in range(
                    a, b
                ):  # loop
                    g(
                        i,
                        [i, 2],
                    )
            """
        )
    )
    assert statement_text(str(path), 2, 4) == (2, "for i in range(a, b):  # loop")
    assert statement_text(str(path), 6, 12) == (5, "g(i, [i, 2])")
    assert statement_text(str(path), 1, 0) == (1, "def k(a, b):")
    assert statement_text(str(path), 99, 0) == (99, "")
