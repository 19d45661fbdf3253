"""``python -m tilus tune``: the dispatch tables: each tuned key, its winner, the timings and the
configs that failed or disagreed (and why)."""

from __future__ import annotations

import json
import warnings

HELP = "show the dispatch tables: tuned winners, timings and the configs that failed"


def add_arguments(p) -> None:
    """Options of ``tune``."""
    p.add_argument(
        "kernel",
        nargs="?",
        metavar="NAME",
        help="only this kernel (its class name, e.g. Matmul, or its table's name, matmul)",
    )
    p.add_argument("--json", action="store_true", help="the tables' entries as JSON")
    p.add_argument(
        "--full", action="store_true", help="the whole reason of each failure, not its first line"
    )


def tables(name: str | None = None):
    """``(DispatchTable, raw entries)`` of every table in the dispatch directory (or of the one
    kernel ``name``), in file-name order."""
    from tilus.tune.dispatch import DispatchTable, dispatch_dir
    from tilus.tune.keys import script_file_name

    d = dispatch_dir()
    if not d.is_dir():
        return []
    wanted = None if name is None else {name, script_file_name(name)}
    out = []
    for path in sorted(d.glob("*.json")):
        if wanted is not None and path.stem not in wanted:
            continue
        table = DispatchTable(path)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            raw = table._entries()
        out.append((table, raw, [str(w.message) for w in caught]))
    return out


def run(args) -> int:
    """Print the tables."""
    from tilus.tune.dispatch import dispatch_dir, render_report

    found = tables(args.kernel)
    if not found:
        what = f" for {args.kernel}" if args.kernel else ""
        print(f"no dispatch tables{what} in {dispatch_dir()}")
        return 0 if args.kernel is None else 1
    if args.json:
        print(json.dumps({t.path.stem: raw for t, raw, _ in found}, indent=1, default=str))
        return 0
    for table, raw, problems in found:
        print(f"# {table.path}")
        for p in problems:
            print(f"# unusable: {p}")
        print(render_report(raw, table.path.stem).rstrip())
        if args.full:
            for key, e in sorted(raw.items()):
                for f in e.get("failed", []):
                    print(f"\nkey {key}: {f.get('config')} failed:\n{f.get('reason', '')}")
        print()
    return 0
