"""``python -m tilus cache``: where the compile cache is, what it holds, clearing and checking
it."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

HELP = "the compile cache: path, list, size, clear, verify"


def add_arguments(p) -> None:
    """Subcommands of ``cache``."""
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    sub.add_parser("path", help="print the cache directory", description="Print the cache root.")
    ls = sub.add_parser(
        "list", help="the compiled kernels in the cache", description="One line per entry."
    )
    ls.add_argument("--json", action="store_true", help="one JSON object per line")
    sub.add_parser(
        "size",
        help="entries and bytes used",
        description="Compiled entries, dispatch tables, bytes.",
    )
    cl = sub.add_parser(
        "clear",
        help="delete the compiled kernels (and, with --dispatch, the tuning decisions)",
        description="Delete every compiled entry; the next call compiles again.",
    )
    cl.add_argument(
        "--dispatch", action="store_true", help="also delete the dispatch tables (tuned winners)"
    )
    vf = sub.add_parser(
        "verify",
        help="check every entry (and table) and drop the damaged ones",
        description="Check every cache entry and dispatch table; damaged ones are dropped.",
    )
    vf.add_argument("--keep", action="store_true", help="report only: delete nothing")


def _root() -> Path:
    from tilus.runtime.cache import cache_dir

    return cache_dir()


def _du(path: Path) -> int:
    total = 0
    for f in path.rglob("*") if path.is_dir() else []:
        try:
            if f.is_file() and not f.is_symlink():
                total += f.stat().st_size
        except OSError:
            continue
    return total


def _human(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def entries() -> list[dict]:
    """The complete entries of the artifact cache, oldest first: key, kernel, config, bytes,
    modification time (entries being written, whose names start with '.', are skipped)."""
    from tilus.runtime.cache import META_FILE

    programs = _root() / "programs"
    out = []
    for d in sorted(programs.iterdir()) if programs.is_dir() else []:
        if d.name.startswith(".") or not (d / META_FILE).is_file():
            continue
        try:
            meta = json.loads((d / META_FILE).read_text())
        except (OSError, ValueError):
            meta = {}
        res = meta.get("resources") if isinstance(meta.get("resources"), dict) else {}
        out.append(
            {
                "key": d.name,
                "kernel": meta.get("kernel", "?"),
                "config": meta.get("config", {}),
                "registers": res.get("registers"),
                "bytes": _du(d),
                "mtime": (d / META_FILE).stat().st_mtime,
            }
        )
    out.sort(key=lambda e: e["mtime"])
    return out


def run(args) -> int:
    """Run one ``cache`` action."""
    root = _root()
    if args.action == "path":
        print(root)
    elif args.action == "list":
        items = entries()
        for e in items:
            if args.json:
                print(json.dumps(e))
                continue
            when = time.strftime("%Y-%m-%d %H:%M", time.localtime(e["mtime"]))
            cfg = ", ".join(f"{k}={v}" for k, v in e["config"].items()) or "-"
            regs = f"{e['registers']} regs" if e["registers"] else ""
            print(f"{e['key']}  {when}  {_human(e['bytes']):>9}  {e['kernel']}  {cfg}  {regs}")
        if not items and not args.json:
            print(f"no compiled kernels in {root}")
    elif args.action == "size":
        items = entries()
        tables = sorted((root / "dispatch").glob("*.json")) if (root / "dispatch").is_dir() else []
        programs, dispatch = _du(root / "programs"), _du(root / "dispatch")
        print(f"{root}")
        print(f"  compiled kernels: {len(items)} entries, {_human(programs)}")
        print(f"  dispatch tables:  {len(tables)} tables, {_human(dispatch)}")
        print(f"  total:            {_human(_du(root))}")
    elif args.action == "clear":
        from tilus.runtime.cache import ArtifactCache

        n = len(entries())
        ArtifactCache(root).clear()
        print(f"removed {n} compiled entries from {root / 'programs'}")
        if args.dispatch:
            shutil.rmtree(root / "dispatch", ignore_errors=True)
            print(f"removed the dispatch tables in {root / 'dispatch'}")
    elif args.action == "verify":
        return _verify(root, drop=not args.keep)
    return 0


def _verify(root: Path, drop: bool) -> int:
    """``tilus.tune.dispatch.verify_cache``: every artifact entry and dispatch table checked;
    exit status 1 when something failed a check (dropped unless ``--keep``)."""
    from tilus.tune.dispatch import verify_cache

    report = verify_cache(root, drop=drop)
    print(report)
    return 0 if report.clean else 1
