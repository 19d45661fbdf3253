"""Small helpers usable on the host and inside kernels."""

from __future__ import annotations


def cdiv(a, b):
    """Ceiling division ``(a + b - 1) // b``; works on ints and on kernel scalars."""
    return (a + b - 1) // b


def benchmark_func(run_func, warmup: int = 5, repeat: int = 20, flush_l2: bool = True) -> float:
    """Median time of ``run_func()`` in milliseconds, timed on the GPU with CUDA events.

    ``warmup`` untimed calls come first; each of the ``repeat`` timed calls is preceded by a
    write of a 256 MB buffer so that it starts with a cold L2 (``flush_l2``), which is not part
    of the measured span (``tilus.tune.timing.benchmark``).

    Raises:
        TilusError: no GPU is available (or the ``interpret`` option is on), or bad counts.
    """
    from tilus.errors import TilusError
    from tilus.tune.timing import benchmark, cuda_available

    if isinstance(warmup, bool) or isinstance(repeat, bool) or warmup < 0 or repeat < 1:
        raise TilusError(
            f"benchmark_func needs warmup >= 0 and repeat >= 1, got {warmup}, {repeat}"
        )
    if not cuda_available():
        raise TilusError("benchmark_func times GPU work with CUDA events: No GPU is available.")
    return benchmark(run_func, warmup=warmup, repeat=repeat, flush_l2=flush_l2, cuda=True).median
