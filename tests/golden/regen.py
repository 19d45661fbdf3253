"""Regenerate the golden CUDA sources: ``python -m tests.golden.regen`` from the repository root."""

from __future__ import annotations

import sys

from tests.golden.cases import CASES, GOLDEN, SeedsMissing, render


def main() -> int:
    """Write ``tests/golden/<case>.cu`` for every case; report what changed."""
    changed = 0
    for case in CASES:
        try:
            text = render(case)
        except SeedsMissing as e:
            print(f"error: {e} (set TILUS_SEED_KERNELS to the seed-kernel folder)")
            return 1
        old = case.path.read_text() if case.path.is_file() else None
        if old != text:
            case.path.write_text(text)
            changed += 1
            print(f"updated {case.path.relative_to(GOLDEN.parents[1])}")
    known = {c.path.name for c in CASES}
    for stale in sorted(GOLDEN.glob("*.cu")):
        if stale.name not in known:
            stale.unlink()
            print(f"removed {stale.name}")
    print(f"{changed} of {len(CASES)} golden files changed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
