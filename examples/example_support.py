"""What the examples share: where to run (CPU interpreter or CUDA GPU), GPU timing, the table."""

from __future__ import annotations

import numpy as np

import tilus


def cuda_torch():
    """The torch module when kernels should run on a CUDA GPU, else None (no torch, no CUDA,
    or the ``interpret`` option / ``TILUS_INTERPRET=1``)."""
    if tilus.option.get_option("interpret"):
        return None
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


def gpu_time(torch, fn, warmup: int = 3, repeat: int = 20) -> float:
    """Median seconds of ``fn()`` on the current CUDA stream (CUDA events)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeat):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return float(np.median(times))


def print_table(header: list[str], rows: list[list[str]]) -> None:
    """Print ``rows`` under ``header`` in left-aligned columns."""
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    for r in [header, ["-" * w for w in widths], *rows]:
        print("  ".join(str(x).ljust(w) for x, w in zip(r, widths)).rstrip())
