"""The backend seam: the front end reaches backends only through ``tilus.backends`` at call time,
keeps each backend's per-kernel state without looking inside, and the layers import downwards."""

from __future__ import annotations

import ast
import functools
import subprocess
import sys
from pathlib import Path

import numpy as np

import tilus
from tilus import float32, int32
from tilus.backends.base import MISS
from tilus.lang.script import InstantiatedScript

PKG = Path(tilus.__file__).resolve().parent


@functools.cache
def _parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), str(path))


def _imports(path: Path, deferred: bool):
    """(line, imported module names) of each import in ``path``; with ``deferred`` False only
    those that run when the module is imported (function bodies skipped)."""
    stack = list(_parse(path).body)
    while stack:
        node = stack.pop()
        if not deferred and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        if isinstance(node, ast.Import):
            yield node.lineno, [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            yield node.lineno, [f"{node.module}.{a.name}" for a in node.names]
        stack.extend(ast.iter_child_nodes(node))


def _where(folder: str, deferred: bool, bad) -> list[str]:
    out = []
    for path in sorted((PKG / folder).rglob("*.py")):
        for line, names in _imports(path, deferred):
            out += [f"{path.relative_to(PKG.parent)}:{line} {n}" for n in names if bad(n)]
    return out


def test_the_front_end_imports_no_backend_when_loaded():
    assert _where("lang", False, lambda n: n.startswith("tilus.backends")) == []


def test_backends_and_tuning_import_nothing_of_the_front_end():
    for folder in ("backends", "tune", "ir", "passes", "runtime"):
        assert _where(folder, True, lambda n: n.startswith("tilus.lang")) == [], folder


def test_nothing_inside_the_package_imports_the_package_itself():
    def top(name):  # `import tilus` or `from tilus import <a name that is not a module>`
        if name == "tilus":
            return True
        parts = name.split(".")
        if len(parts) != 2 or parts[0] != "tilus":
            return False
        return not ((PKG / f"{parts[1]}.py").exists() or (PKG / parts[1]).is_dir())

    assert _where(".", True, top) == []


def test_importing_tilus_loads_no_backend():
    code = "import sys, tilus; print(*sorted(m for m in sys.modules if m.startswith('tilus.back')))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=PKG.parent
    )
    # tilus.compile's module only (it imports the CUDA backend when called)
    assert out.stdout.split() == [
        "tilus.backends",
        "tilus.backends.cuda",
        "tilus.backends.cuda.api",
    ]


class Scale(tilus.Script):
    def __call__(self, n: int32, x: ~float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 1
        g = self.global_view(x, dtype=float32, shape=[n])
        t = self.load_global(g, offsets=[0], shape=[32])
        self.store_global(g, t * 2.0, offsets=[0])


class FakeBackend:
    """Records what the front end hands over; its fast path takes calls with a known ``n``."""

    name = "fake"

    def __init__(self):
        self.states, self.runs, self.fast_calls = [], [], []

    def new_state(self, kernel):
        state = {"kernel": kernel, "seen": set()}
        self.states.append(state)
        return state

    def fast_path(self, state):
        def fast(args):
            if args[0] not in state["seen"]:
                return MISS
            self.fast_calls.append(args[0])
            return "fast"

        return fast

    def run(self, kernel, state, const_args, runtime, raw_args):
        self.runs.append((kernel, [n for n, _, _ in runtime], raw_args is not None))
        state["seen"].add(runtime[0][2])
        return "checked"


def test_a_call_goes_to_the_chosen_backend_which_keeps_its_state(monkeypatch):
    import tilus.backends

    fake = FakeBackend()
    monkeypatch.setattr(tilus.backends, "backend_for", lambda runtime: fake)
    kernel = InstantiatedScript(Scale, (), {})  # not the cached instance: no state leaks out
    x = np.random.default_rng(1).standard_normal(40).astype(np.float32)
    assert kernel(40, x) == "checked"  # first call: the checked path, the state made
    assert kernel(40, x) == "fast"  # then the backend's fast path takes it
    assert kernel(41, x) == "checked"  # one the fast path does not know
    assert kernel(n=40, x=x) == "checked"  # keywords always take the checked path
    assert len(fake.states) == 1 and fake.states[0]["kernel"] is kernel
    assert kernel.backend_state(fake) is fake.states[0]
    assert fake.fast_calls == [40]
    assert [r[1:] for r in fake.runs] == [(["n", "x"], True)] * 2 + [(["n", "x"], False)]
    assert np.all(np.isfinite(x))  # nothing ran on the array


def test_the_interpreter_runs_through_the_same_seam():
    x = np.random.default_rng(2).standard_normal(37).astype(np.float32)
    want = x.copy()
    want[:32] *= 2
    kernel = InstantiatedScript(Scale, (), {})
    kernel(37, x)
    np.testing.assert_allclose(x, want, rtol=1e-6)
    assert list(kernel._backend_states) == ["interp"]
