"""Generate docs/coverage.md: every instruction x front end / interpreter / CUDA / min target."""

from __future__ import annotations

import argparse
import ast
import inspect
import pathlib
import sys
import textwrap

HEADER = """\
# Instruction coverage

Generated from the rule tables by `python -m tilus.tools.coverage` (do not edit by hand;
`tests/test_coverage_doc.py` fails when it is out of date). One row per IR instruction class
(`tilus/ir/inst.py`): the front-end methods that emit it, whether the interpreter runs it
(`INTERP_RULES`), whether the CUDA backend lowers it (`LAYOUT_RULES` and `CODEGEN_RULES`, or the
`NOT_LOWERED` reason) and the oldest target its lowering needs (`MIN_TARGET`).
"""


#: The front-end names of the spec for Hopper and earlier (spec 1.5, 2.1-2.3, 2.5, 2.6, 2.8; the
#: atomics by family, each also in scatter forms), checked against ``tilus.Script``.
SPEC_NAMES = (
    "thread_group single_thread single_warp warp_group range sync assume static_assert "
    "fast_divmod register_tensor shared_tensor free_shared global_view global_tensor reshape "
    "reshape_shared load_global store_global store_global_scatter store_shared_scatter "
    "load_shared store_shared copy_async copy_async_commit_group copy_async_wait_group "
    "copy_async_wait_all dot cast view abs exp exp2 log sin cos round square sqrt rsqrt clip add "
    "maximum where sum max min any all scan cumsum cumprod squeeze unsqueeze transpose repeat "
    "repeat_interleave assign randint4x randint rand randn lock_semaphore release_semaphore "
    "annotate_layout printf print_tensor "
    "mbarrier.alloc mbarrier.arrive mbarrier.arrive_and_expect_tx mbarrier.wait "
    "mbarrier.arrive_and_expect_tx_multicast mbarrier.arrive_and_expect_tx_remote "
    "tma.global_to_shared tma.shared_to_global tma.commit_group tma.wait_group "
    "wgmma.fence wgmma.commit_group wgmma.wait_group wgmma.mma "
    "cluster.sync cluster.blockIdx cluster.clusterDim cluster.blockRank cluster.map_shared_addr "
    "fence.proxy_async fence.proxy_async_release "
    "atomic.shared_add atomic.shared_cas atomic.global_add atomic.global_cas "
    "atomic.shared_scatter_add atomic.global_scatter_add"
).split()


#: The names the front end imports the IR instruction modules as (inst, inst_memory,
#: inst_cluster, inst_lowbit, inst_layout, inst_sync, inst_prefetch, inst_random).
IR_MODULES = ("I", "M", "C", "L", "LY", "SY", "PF", "RN")


def missing_spec_names() -> list[str]:
    """The names of :data:`SPEC_NAMES` that ``tilus.Script`` does not have."""
    from tilus.lang.script import Script

    out = []
    for name in SPEC_NAMES:
        obj = Script
        for part in name.split("."):
            # static lookups: a property (``self.cluster.blockRank``) would run outside a kernel
            obj = inspect.getattr_static(obj, part, None)
            if obj is None:
                out.append(name)
                break
    return out


def _refs(fn) -> tuple[set[str], set[str]]:
    """(IR classes ``I.X`` that ``fn``'s source names, simple names of what it calls)."""
    try:
        src = textwrap.dedent(inspect.getsource(fn))
    except (OSError, TypeError):
        return set(), set()
    insts, calls = set(), set()
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            # the IR modules' aliases (IR_MODULES)
            if node.value.id in IR_MODULES and node.attr[:1].isupper():
                insts.add(node.attr)
        if isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Name):
                calls.add(f.id)
            elif isinstance(f, ast.Attribute):
                calls.add(f.attr)
    return insts, calls


def _helpers() -> dict:
    """Module-level functions of the front end that methods call (by name)."""
    import tilus.lang.instructions as pkg

    out = {}
    for path in sorted(pathlib.Path(pkg.__file__).parent.glob("*.py")):
        mod = __import__(f"tilus.lang.instructions.{path.stem}", fromlist=["_"])
        for name, obj in vars(mod).items():
            if inspect.isfunction(obj) and obj.__module__ == mod.__name__:
                out[name] = obj
    return out


def _reach(fn, owner, helpers, seen=None) -> set[str]:
    """IR classes ``fn`` emits, directly or through helpers and ``self._x`` methods."""
    seen = set() if seen is None else seen
    if fn in seen:
        return set()
    seen.add(fn)
    insts, calls = _refs(fn)
    for name in calls:
        target = helpers.get(name)
        if target is None and owner is not None and name.startswith("_"):
            target = getattr(owner, name, None)
            target = getattr(target, "__func__", target)
        if inspect.isfunction(target):
            insts |= _reach(target, owner, helpers, seen)
    return insts


def front_end() -> dict[str, list[str]]:
    """IR class name -> the ``self.*`` names that emit it (and the transpiler's statements)."""
    from tilus.lang.frontend import transpiler
    from tilus.lang.script import Script

    helpers = _helpers()
    out: dict[str, list[str]] = {}

    def note(insts, label):
        for cls in insts:
            if label not in out.setdefault(cls, []):
                out[cls].append(label)

    script = Script
    for name in sorted(dir(script)):
        if name.startswith("_"):
            continue
        attr = inspect.getattr_static(script, name)
        if inspect.isfunction(attr):
            note(_reach(attr, script, helpers), f"self.{name}")
        elif not isinstance(attr, (property, staticmethod, classmethod, type, dict, type(None))):
            group = type(attr)
            if group.__module__.startswith("tilus.lang.instructions"):
                members = {k: v for c in reversed(group.__mro__) for k, v in vars(c).items()}
                for m in sorted(members):
                    fn = members[m]
                    if not m.startswith("_") and inspect.isfunction(fn):
                        note(_reach(fn, group, helpers), f"self.{name}.{m}")
    syntax = "operators, subscripts, assignment"  # what the transpiler emits for Python syntax
    for _, fn in inspect.getmembers(transpiler, inspect.isfunction):
        note(_reach(fn, None, helpers), syntax)
    for _, cls in inspect.getmembers(transpiler, inspect.isclass):
        if cls.__module__ == transpiler.__name__:
            for _, fn in inspect.getmembers(cls, inspect.isfunction):
                note(_reach(fn, cls, helpers), syntax)
    return out


def rows() -> list[dict]:
    """One dict per instruction: name, cls, front_end, interp, cuda, min_target."""
    from tilus.backends.cuda import tables
    from tilus.backends.cuda.codegen import CODEGEN_RULES  # noqa: F401 - registers rules
    from tilus.backends.cuda.layout import LayoutPlan  # noqa: F401 - registers rules
    from tilus.backends.interp.launch import INTERP_RULES
    from tilus.ir.inst import INSTRUCTIONS

    fe = front_end()
    out = []
    for name, cls in INSTRUCTIONS.items():
        lowered = cls in tables.LAYOUT_RULES and cls in tables.CODEGEN_RULES
        reason = tables.NOT_LOWERED.get(cls)
        out.append(
            {
                "name": name,
                "cls": cls.__name__,
                "front_end": fe.get(cls.__name__, []),
                "interp": cls in INTERP_RULES,
                "cuda": "yes" if lowered else f"no: {reason or 'no rule'}",
                "min_target": tables.MIN_TARGET.rules.get(cls, "-") if lowered else "-",
            }
        )
    return out


def render() -> str:
    """The text of docs/coverage.md."""
    rs = rows()
    n = len(rs)
    fe = sum(1 for r in rs if r["front_end"])
    it = sum(1 for r in rs if r["interp"])
    cu = sum(1 for r in rs if r["cuda"] == "yes")
    allthree = sum(1 for r in rs if r["front_end"] and r["interp"] and r["cuda"] == "yes")
    by_target: dict[str, int] = {}
    for r in rs:
        if r["cuda"] == "yes":
            by_target[r["min_target"]] = by_target.get(r["min_target"], 0) + 1
    lines = [HEADER]
    lines.append(
        f"**{n} instructions**: {fe} reachable from the front end, {it} run by the "
        f"interpreter, {cu} lowered to CUDA, {allthree} in all three. Lowered instructions by "
        "minimum target: " + ", ".join(f"{t} {c}" for t, c in sorted(by_target.items())) + ".\n"
    )
    lines.append("| instruction | IR class | front end | interpreter | CUDA | min target |")
    lines.append("|---|---|---|---|---|---|")
    for r in rs:
        names = ", ".join(x if " " in x else f"`{x}`" for x in r["front_end"]) or "-"
        lines.append(
            f"| `{r['name']}` | `{r['cls']}` | {names} | {'yes' if r['interp'] else 'no'} | "
            f"{r['cuda']} | {r['min_target']} |"
        )
    missing = missing_spec_names()
    lines.append("")
    lines.append("## Front-end names of the spec not in tilus yet")
    lines.append("")
    lines.append(
        f"Of the spec's {len(SPEC_NAMES)} front-end names for Hopper and earlier (sections 1.5, "
        f"2.1-2.3, 2.5, 2.6, 2.8; `tilus.tools.coverage.SPEC_NAMES`), {len(missing)} are "
        "missing from `tilus.Script`:"
    )
    lines.append("")
    lines.append(", ".join(f"`self.{n}`" for n in missing) if missing else "none")
    return "\n".join(lines) + "\n"


def doc_path() -> pathlib.Path:
    """docs/coverage.md of the checkout tilus is imported from."""
    return pathlib.Path(__file__).resolve().parents[2] / "docs" / "coverage.md"


def main(argv=None) -> int:
    """Write docs/coverage.md (``--check``: exit 1 when it differs instead)."""
    ap = argparse.ArgumentParser(prog="python -m tilus.tools.coverage", description=__doc__)
    ap.add_argument("--check", action="store_true", help="fail if docs/coverage.md is stale")
    ap.add_argument("--output", type=pathlib.Path, default=None)
    args = ap.parse_args(argv)
    path = args.output or doc_path()
    text = render()
    if args.check:
        if not path.exists() or path.read_text() != text:
            print(f"{path} is out of date: run python -m tilus.tools.coverage", file=sys.stderr)
            return 1
        return 0
    path.write_text(text)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
