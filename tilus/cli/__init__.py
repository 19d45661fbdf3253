"""The ``python -m tilus`` command line: one module per subcommand, argparse only."""

from __future__ import annotations

import argparse
import sys

from tilus.cli import cache_cmd, info, inspect_cmd, tune_cmd
from tilus.errors import TilusError

#: (name, module): each module has ``HELP``, ``add_arguments(parser)`` and ``run(args) -> int``
COMMANDS = (
    ("info", info),
    ("inspect", inspect_cmd),
    ("cache", cache_cmd),
    ("tune", tune_cmd),
)


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``python -m tilus`` with its subcommands."""
    parser = argparse.ArgumentParser(
        prog="python -m tilus",
        description="tilus: inspect kernels, the compile cache and the dispatch table.",
    )
    parser.add_argument(
        "--cache-dir",
        metavar="DIR",
        help="the cache directory to use (default: $TILUS_CACHE_DIR, else ~/.cache/tilus)",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, mod in COMMANDS:
        p = sub.add_parser(name, help=mod.HELP, description=mod.__doc__.strip())
        mod.add_arguments(p)
        p.set_defaults(run=mod.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run ``python -m tilus`` with ``argv`` (default: ``sys.argv[1:]``); returns the exit
    status (0 done, 1 a tilus error, 2 bad usage)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    from tilus import option

    scope = {"cache_dir": args.cache_dir} if args.cache_dir else {}
    try:
        with option.scoped(**scope):  # scoped: main() may run inside a longer process
            return int(args.run(args) or 0)
    except TilusError as e:
        print(f"error: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
