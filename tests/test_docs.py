"""The user guide's ```python blocks run, in order per page, on the interpreter.

Each page's blocks are written to one module (so the transpiler can read their source) and run
with ``TILUS_INTERPRET=1``; a block fenced as ```python no-run is skipped. The generated
reference must match the code (``python docs/build.py`` rewrites it), and every relative link of
the docs must point at a file that exists.
"""

from __future__ import annotations

import importlib.util
import pathlib
import runpy
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
GUIDE = sorted((ROOT / "docs" / "guide").glob("*.md"))


def _build():
    spec = importlib.util.spec_from_file_location("docs_build", ROOT / "docs" / "build.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_guide_has_its_pages():
    names = [p.name for p in GUIDE]
    assert names[0].startswith("01-") and len(names) >= 8, names


@pytest.mark.parametrize("page", GUIDE, ids=lambda p: p.stem)
def test_guide_code_blocks_run(page, tmp_path, monkeypatch):
    blocks = _build().python_blocks(page.read_text())
    if not blocks:
        pytest.skip("no python blocks")
    src = "\n\n".join(f"# --- block {i} ---\n{b}" for i, b in enumerate(blocks))
    script = tmp_path / f"{page.stem.replace('-', '_')}.py"
    script.write_text(src)
    monkeypatch.setenv("TILUS_INTERPRET", "1")
    monkeypatch.setenv("TILUS_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(sys, "path", [str(ROOT / "examples"), *sys.path])
    runpy.run_path(str(script), run_name="__guide__")


def test_reference_is_up_to_date():
    build = _build()
    committed = (ROOT / "docs" / "reference.md").read_text()
    assert committed == build.reference(), "run `python docs/build.py` and commit docs/reference.md"


def test_doc_links_resolve():
    assert _build().broken_links() == []
