"""Kernel source as Python imported it: editing a kernel's file after the import changes
nothing until the module is reloaded, and a helper whose file moved is refused by name."""

from __future__ import annotations

import importlib
import sys
import textwrap

import numpy as np
import pytest

import tilus
from tilus import source_cache

KERNEL = """
import tilus
from tilus import float32, int32
from mixin_{tag} import Scale


class Add_{tag}(Scale, tilus.Script):
    def __call__(self, n: int32, x_ptr: ~float32, y_ptr: ~float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 1
        gx = self.global_view(x_ptr, dtype=float32, shape=[n])
        gy = self.global_view(y_ptr, dtype=float32, shape=[n])
        x = self.load_global(gx, offsets=[0], shape=[32])
        self.store_global(gy, self.scaled(x) + {add}, offsets=[0])
"""

MIXIN = """
class Scale:
    def scaled(self, x):
        return x * {mul}
"""


def _write(tmp_path, tag, add, mul):
    (tmp_path / f"kern_{tag}.py").write_text(textwrap.dedent(KERNEL.format(tag=tag, add=add)))
    (tmp_path / f"mixin_{tag}.py").write_text(textwrap.dedent(MIXIN.format(mul=mul)))


def _run(kernel_cls):
    x = np.arange(32, dtype=np.float32)
    y = np.full(32, np.nan, np.float32)
    with tilus.option.scoped(interpret=True):
        kernel_cls()(32, x, y)
    return y


@pytest.fixture
def modules(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for name in [m for m in sys.modules if m.startswith(("kern_", "mixin_"))]:
        del sys.modules[name]


def test_edits_after_import_are_not_transpiled_until_a_reload(modules):
    _write(modules, "a", add=1.0, mul=2.0)
    mod = importlib.import_module("kern_a")
    # the file is edited before the kernel's first call: lines move, the body changes, and so
    # does the plain (non-tilus) mixin that the kernel inherits a helper from
    _write(modules, "a", add=5.0, mul=3.0)
    (modules / "kern_a.py").write_text("# a new first line\n" + (modules / "kern_a.py").read_text())
    x = np.arange(32, dtype=np.float32)
    assert np.array_equal(_run(mod.Add_a), x * 2 + 1)  # what Python imported
    importlib.reload(sys.modules["mixin_a"])
    mod = importlib.reload(mod)
    assert np.array_equal(_run(mod.Add_a), x * 3 + 5)  # the reloaded source


def test_a_class_defined_in_a_function_keeps_its_files_first_snapshot(modules):
    _write(modules, "b", add=1.0, mul=2.0)
    (modules / "kern_b.py").write_text(
        (modules / "kern_b.py").read_text()
        + "\n\ndef make():\n    class Local(tilus.Script):\n        pass\n\n    return Local\n"
    )
    mod = importlib.import_module("kern_b")
    first = list(source_cache.lines(mod.__file__))
    (modules / "kern_b.py").write_text("# edited\n" + (modules / "kern_b.py").read_text())
    mod.make()  # a Script class of kern_b created now, inside a function: no new snapshot
    assert source_cache.lines(mod.__file__) == first
    x = np.arange(32, dtype=np.float32)
    assert np.array_equal(_run(mod.Add_b), x * 2 + 1)  # still the lines Python imported


def test_a_helper_whose_file_changed_is_refused_by_name(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    # no kernel class in this file: it is read as it is now, and must still define the helper
    (tmp_path / "helper_c.py").write_text("def scaled(self, x):\n    return x * 2.0\n")
    helper = importlib.import_module("helper_c")
    try:
        (tmp_path / "helper_c.py").write_text("def other(self, x):\n    return x\n")
        from tilus.lang.frontend.source import parse_function

        with pytest.raises(tilus.TilusProgramError, match="no longer defines scaled") as info:
            parse_function(helper.scaled)
        assert info.value.loc is not None and info.value.loc.line == 1
        assert info.value.loc.file.endswith("helper_c.py")
    finally:
        del sys.modules["helper_c"]
