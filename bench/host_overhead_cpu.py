"""Host overhead of calling an already-tuned kernel: the Python side of a fast-path call.

The kernel is the trivial one of ``bench/tune_and_overhead.py`` (1 block of 32 threads,
z = x + y on 1-element float32 tensors). Three modes:

* default (no GPU): fake CUDA tensors, the driver seams of ``tilus.backends.cuda.launcher``
  replaced by no-op launches: the Python cost of a call, driver excluded;
* ``--ctypes`` (no GPU): the real ctypes launch and context code, with a libm function that
  takes no arguments and returns 0 (``fegetround``) standing in for every libcuda symbol, so
  the ctypes argument conversion of the launch is measured too;
* ``--gpu``: real torch CUDA tensors and the real driver, beside ``torch.add``.

Each line is the median over ``--repeat`` batches of the mean microseconds per call in a batch
of ``--calls`` calls, beside (b) a bare Python function call with the same arguments.
Run: ``python bench/host_overhead_cpu.py [--ctypes | --gpu]``.
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
for _p in (REPO, REPO / "bench"):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

from tune_and_overhead import Add1  # noqa: E402 - the same trivial kernel as that bench

import tilus  # noqa: E402
from tilus.backends.cuda import launcher as LR  # noqa: E402


# --- fakes for the CPU modes -------------------------------------------------------------------
class _Device:
    type = "cuda"
    index = 0

    def __eq__(self, other):
        return getattr(other, "type", None) == "cuda" and getattr(other, "index", 0) == 0

    def __hash__(self):
        return 0


class FakeTensor:
    """A 1-element 'CUDA float32 tensor' at a fake address (methods as torch names them)."""

    __module__ = "torch.fake"
    _next = [1 << 24]

    def __init__(self):
        self.ptr = FakeTensor._next[0]
        FakeTensor._next[0] += 256
        self.dtype = "torch.float32"
        self.device = _Device()

    def data_ptr(self):
        return self.ptr

    def get_device(self):
        return 0

    def is_contiguous(self):
        return True

    def numel(self):
        return 1


class _FakeKernel:
    handle = 0  # what the stand-in ignores
    name = "add1"


class _StandInLib:
    """Every ``cu*`` symbol is a separate ctypes pointer to ``fegetround``: no arguments
    read, returns 0 (FE_TONEAREST), no system call. Extra arguments are harmless in the C ABI."""

    def __init__(self):
        libm = ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6")
        self._addr = ctypes.cast(libm.fegetround, ctypes.c_void_p).value
        assert libm.fegetround() == 0, "the rounding mode is not FE_TONEAREST"

    def __getattr__(self, name):
        if not name.startswith("cu"):
            raise AttributeError(name)
        fn = ctypes.CFUNCTYPE(ctypes.c_int)(self._addr)
        setattr(self, name, fn)
        return fn


def fake_driver(mode: str):
    """Replace the driver seams (``noop``: Python no-ops; ``ctypes``: the real launch code on a
    stand-in library); returns an undo function."""
    import functools

    from tilus.runtime import driver as D

    saved = {k: getattr(LR, k) for k in ("_load", "_make_launch", "_make_context")}
    saved["_stream_getter"] = LR._stream_getter
    saved_ensure = D.ensure_context
    LR._load = lambda ck, index: _FakeKernel()
    if mode == "noop":
        LR._make_launch = lambda kernel, threads, smem: lambda gx, gy, gz, stream, params: None
        LR._make_context = lambda index: lambda: None
    else:
        D.ensure_context = lambda index=0: 0
        real_cdll, stand_in = ctypes.CDLL, _StandInLib()
        ctypes.CDLL = lambda name, *a, **k: stand_in if "cuda" in name else real_cdll(name, *a, **k)
        LR._libcuda.cache_clear()
        try:
            assert LR._libcuda() is stand_in
        finally:
            ctypes.CDLL = real_cdll
    LR._stream_getter = lambda index: functools.partial(abs, 0)  # a C call, as torch's getter

    def undo():
        for k, v in saved.items():
            setattr(LR, k, v)
        D.ensure_context = saved_ensure
        LR._libcuda.cache_clear()

    return undo


# --- timing ------------------------------------------------------------------------------------
def per_call_us(fn, args, calls: int, repeat: int, sync=None) -> float:
    """Median over ``repeat`` batches of the mean microseconds of ``fn(*args)`` in a batch."""
    for _ in range(min(calls, 1000)):
        fn(*args)
    if sync:
        sync()
    means = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn(*args)
        means.append((time.perf_counter() - t0) / calls * 1e6)
        if sync:
            sync()
    return statistics.median(means)


def single_calls_us(fn, args, sync, calls: int = 10_000) -> float:
    """Median microseconds of single timed calls (as bench/tune_and_overhead.py measures)."""
    times = []
    for i in range(calls):
        if i % 200 == 0:
            sync()
        t0 = time.perf_counter()
        fn(*args)
        times.append(time.perf_counter() - t0)
    sync()
    return statistics.median(times) * 1e6


def bare(n, x, y, z):
    """(b) the baseline: a Python function of the same arguments that does nothing."""
    return None


def main(argv=None) -> int:
    """Build the kernel, call it once (the checked path), then time the fast path."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--gpu", action="store_true", help="real torch CUDA tensors and driver")
    mode.add_argument("--ctypes", action="store_true", help="real ctypes launch, stand-in lib")
    ap.add_argument("--calls", type=int, default=20_000, help="calls per batch")
    ap.add_argument("--repeat", type=int, default=15, help="batches")
    opts = ap.parse_args(argv)
    tilus.option.cache_dir(tempfile.mkdtemp(prefix="tilus-overhead-"))
    kernel = Add1()
    rows = {}
    if opts.gpu:
        import torch

        x, y, z = (torch.ones(1, device="cuda") for _ in range(3))
        kernel(1, x, y, z)
        torch.cuda.synchronize()
        assert float(z[0]) == 2.0, float(z[0])
        # batches of 200 with a sync between: the launch queue never fills (a full queue
        # blocks cuLaunchKernel, which would time the GPU instead of the host)
        sync, calls = torch.cuda.synchronize, min(opts.calls, 200)
        repeat = max(opts.repeat, 300)
        add = lambda a, b, c: torch.add(a, b, out=c)  # noqa: E731
        rows["(a) tilus fast path"] = per_call_us(kernel, (1, x, y, z), calls, repeat, sync)
        rows["torch.add(x, y, out=z)"] = per_call_us(add, (x, y, z), calls, repeat, sync)
        rows["(a) single calls, median"] = single_calls_us(kernel, (1, x, y, z), sync)
        rows["torch.add single, median"] = single_calls_us(add, (x, y, z), sync)
        opts.calls, opts.repeat = calls, repeat
        torch.cuda.synchronize()
        assert float(z[0]) == 2.0, float(z[0])
        label = "GPU " + torch.cuda.get_device_name(0)
    else:
        undo = fake_driver("ctypes" if opts.ctypes else "noop")
        try:
            x, y, z = FakeTensor(), FakeTensor(), FakeTensor()
            kernel(1, x, y, z)  # the checked path; later calls take the fast path
            from tilus.backends.cuda.launch import dispatcher

            assert dispatcher(kernel).entries, "the call was not remembered for the fast path"
            rows["(a) tilus fast path"] = per_call_us(kernel, (1, x, y, z), opts.calls, opts.repeat)
        finally:
            undo()
        label = "CPU, " + ("ctypes launch on a stand-in library" if opts.ctypes else "no-op launch")
    rows["(b) bare Python call"] = per_call_us(bare, (1, 0, 0, 0), opts.calls, opts.repeat)
    print(f"host overhead per call ({label}; median of {opts.repeat} x {opts.calls} calls):")
    for k, v in rows.items():
        print(f"  {k:28s} {v:7.3f} us")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
