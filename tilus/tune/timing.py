"""Benchmarking one callable: CUDA events with an L2 flush on a GPU, perf_counter elsewhere."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

L2_FLUSH_BYTES = 256 * 1024 * 1024

_flush_buffers: dict = {}


@dataclass(frozen=True)
class Timing:
    """Statistics of the timed runs of one callable, in milliseconds."""

    median: float
    min: float
    samples: list[float] = field(default_factory=list, repr=False)

    @classmethod
    def of(cls, samples: list[float]) -> Timing:
        """Summarise a list of per-run times (milliseconds)."""
        if not samples:
            raise ValueError("a Timing needs at least one sample")
        return cls(statistics.median(samples), min(samples), list(samples))


def cuda_available() -> bool:
    """Whether benchmarks run on a GPU: torch is importable, sees a CUDA device, and the
    ``interpret`` option is off."""
    from tilus.option import get_option

    if get_option("interpret"):
        return False
    try:
        import torch
    except Exception:
        return False
    try:
        return bool(torch.cuda.is_available())
    except Exception:
        return False


def l2_flush(torch, protocol: str = "dirty"):
    """The callable that flushes the L2 before a timed run under ``protocol`` (``tune_flush``):
    a 256 MiB write (``dirty``), or that write and then a read of another 256 MiB (``clean``:
    the read evicts the written lines, whose write-back then falls outside the timed span).
    An int64 ``max`` reads its buffer in place (no widened copy to write)."""
    dev = torch.cuda.current_device()
    key = (dev, protocol)
    flush = _flush_buffers.get(key)
    if flush is None:
        buf = _flush_buffers.get((dev, "buffer"))  # the write's buffer, one a device
        if buf is None:
            buf = torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.int32, device=f"cuda:{dev}")
            _flush_buffers[(dev, "buffer")] = buf
        if protocol == "clean":
            other = torch.ones(L2_FLUSH_BYTES // 8, dtype=torch.int64, device=f"cuda:{dev}")

            def flush():
                buf.zero_()
                other.max()

        else:
            flush = buf.zero_
        _flush_buffers[key] = flush
    return flush


def flush_protocol() -> str:
    """The ``tune_flush`` option, checked (an unknown value, e.g. from ``TILUS_TUNE_FLUSH``, is
    refused rather than timed some other way)."""
    from tilus.option import TUNE_FLUSHES, get_option

    protocol = get_option("tune_flush")
    if protocol not in TUNE_FLUSHES:
        raise ValueError(
            f"tune_flush (TILUS_TUNE_FLUSH) must be one of {TUNE_FLUSHES}, got {protocol!r}"
        )
    return protocol


def _bench_cuda(fn, warmup: int, repeat: int, flush_l2: bool) -> list[float]:
    import torch

    # Host time of one call (launches are asynchronous): how far the GPU must be kept busy
    # ahead of each timed call so that the start event does not wait for the host's launch.
    host = []
    for _ in range(max(warmup, 1)):
        t0 = time.perf_counter()
        fn()
        host.append(time.perf_counter() - t0)
    spin = getattr(torch.cuda, "_sleep", None)
    # ~2 GHz SM clock; twice the host time (a lower clock only lengthens the spin)
    spin_cycles = int(min(statistics.median(host), 0.01) * 2e9 * 2) + 20_000
    flush = l2_flush(torch, flush_protocol()) if flush_l2 else None
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(repeat)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(repeat)]
    torch.cuda.synchronize()
    for start, end in zip(starts, ends):
        if flush is not None:
            flush()  # evict the kernel's working set from L2 (outside the timed span)
        if spin is not None:
            spin(spin_cycles)  # keeps the GPU busy while the host enqueues the timed call
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) for s, e in zip(starts, ends)]


def _bench_host(fn, warmup: int, repeat: int) -> list[float]:
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1e3)
    return samples


def benchmark(
    fn: Callable[[], object],
    *,
    warmup: int | None = None,
    repeat: int | None = None,
    flush_l2: bool = True,
    cuda: bool | None = None,
) -> Timing:
    """Time ``fn()`` and return the median and minimum over ``repeat`` runs, in milliseconds.

    On a GPU (see ``cuda_available``) each run is bracketed by CUDA events on the current
    stream, and a 256 MB buffer is written before each run so that it starts with a cold L2;
    the flush is not part of the measured span. A short spin kernel is queued before each
    start event, sized from the host time of a call, so that the measured span holds the GPU
    work and not the host's launch overhead. Elsewhere (the CPU interpreter, tests) each run
    is timed with ``time.perf_counter``; ``flush_l2`` is then ignored.

    Args:
        fn: A callable taking no arguments (e.g. a lambda launching one config).
        warmup: Untimed runs first; default the ``bench_warmup`` option.
        repeat: Timed runs; default the ``bench_repeat`` option.
        flush_l2: Flush the L2 cache before each timed run (GPU only).
        cuda: Force (True) or forbid (False) CUDA-event timing; None = ``cuda_available()``.

    Returns:
        A ``Timing(median, min, samples)``.
    """
    from tilus.option import get_option

    warmup = int(get_option("bench_warmup") if warmup is None else warmup)
    repeat = int(get_option("bench_repeat") if repeat is None else repeat)
    if warmup < 0 or repeat < 1:
        raise ValueError(f"benchmark needs warmup >= 0 and repeat >= 1, got {warmup}, {repeat}")
    use_cuda = cuda_available() if cuda is None else cuda
    if use_cuda:
        samples = _bench_cuda(fn, warmup, repeat, flush_l2)
    else:
        samples = _bench_host(fn, warmup, repeat)
    return Timing.of(samples)


def synchronize() -> None:
    """Wait for queued GPU work (a no-op without torch or a GPU)."""
    if cuda_available():
        import torch

        torch.cuda.synchronize()
