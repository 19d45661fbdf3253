"""The fast path of a repeated CUDA call on CPU: real NVRTC builds; the driver either faked in
Python or reached through the real ctypes launch code with Python callbacks as libcuda."""

from __future__ import annotations

import ctypes
import threading

import numpy as np
import pytest

from tests.cuda.conftest import needs_nvrtc
from tests.helpers_fakegpu import Add1, FakeTensor
from tilus import option
from tilus.backends.cuda import launch as L
from tilus.backends.cuda import launcher as LR
from tilus.lang.script import InstantiatedScript

pytestmark = needs_nvrtc


def _tensors():
    return tuple(FakeTensor(np.ones(32, np.float32)) for _ in range(3))


def _ptrs(params) -> list[int]:
    slots = ctypes.cast(params, ctypes.POINTER(ctypes.c_void_p))
    return [ctypes.c_uint64.from_address(slots[i]).value for i in (1, 2, 3)]


@pytest.fixture
def kernel(monkeypatch, tmp_path):
    monkeypatch.setenv("TILUS_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("TILUS_INTERPRET", raising=False)
    return InstantiatedScript(Add1, (), {})


@pytest.fixture
def pyfakes(monkeypatch):
    """The driver seams faked in Python: each launch records (thread, pointers)."""
    launches = []

    def make_launch(k, threads, smem):
        def go(gx, gy, gz, stream, params):
            launches.append((threading.get_ident(), _ptrs(params)))

        return go

    monkeypatch.setattr(LR, "_load", lambda ck, index: "kernel")
    monkeypatch.setattr(LR, "_make_launch", make_launch)
    monkeypatch.setattr(LR, "_make_context", lambda index: lambda: None)
    monkeypatch.setattr(LR, "_stream_getter", lambda index: lambda: 0)
    return launches


def test_environment_is_read_again_after_an_option_change(kernel, pyfakes, monkeypatch):
    args = (32, *_tensors())
    kernel(*args)
    slow = []
    real_run = L.Dispatcher.run
    monkeypatch.setattr(L.Dispatcher, "run", lambda self, *a: slow.append(1) or real_run(self, *a))
    monkeypatch.setenv("TILUS_INTERPRET", "1")
    kernel(*args)  # the fast path does not read the environment per call
    assert len(pyfakes) == 2 and slow == []
    option.set_option("bench_repeat", option.get_option("bench_repeat"))  # any option change
    with pytest.raises(Exception):  # noqa: B017 - the interpreter: fakes are no tensors
        kernel(*args)
    assert len(pyfakes) == 2
    monkeypatch.delenv("TILUS_INTERPRET")
    kernel(*args)  # the checked path (it reads the environment), then the fast path again
    kernel(*args)
    assert len(pyfakes) == 4 and slow == [1]


def test_threads_never_launch_with_each_others_pointers(kernel, pyfakes):
    kernel(32, *_tensors())
    errors = []
    together = threading.Barrier(4)

    def work():
        mine = _tensors()
        want = [t.ptr for t in mine]
        together.wait()
        try:
            for _ in range(300):
                kernel(32, *mine)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)
        together.wait()  # every thread alive: their idents are distinct
        errors.extend(p for tid, p in pyfakes if tid == threading.get_ident() and p != want)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and len(pyfakes) == 1 + 4 * 300


# --- the real ctypes launch code, Python callbacks standing in for libcuda -----------------------
class FakeLibCuda:
    """cuLaunchKernelEx, cuLaunchKernel and cuCtxSetCurrent as C function pointers to Python
    callbacks; ``fail`` holds the results of the next cuLaunchKernelEx calls (0 when empty)."""

    def __init__(self):
        self.ex, self.plain, self.ctx, self.fail = [], [], [], []
        ex_t = ctypes.CFUNCTYPE(ctypes.c_int, *[ctypes.c_void_p] * 4)
        plain_t = ctypes.CFUNCTYPE(
            ctypes.c_int, ctypes.c_void_p, *[ctypes.c_uint] * 7, *[ctypes.c_void_p] * 3
        )
        ctx_t = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)
        self._callbacks = [ex_t(self._ex), plain_t(self._plain), ctx_t(self._ctx)]
        for name, cb in zip(
            ("cuLaunchKernelEx", "cuLaunchKernel", "cuCtxSetCurrent"), self._callbacks
        ):
            setattr(
                self, name, ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.cast(cb, ctypes.c_void_p).value)
            )

    def _ex(self, cfg, f, params, extra):
        c = LR._LaunchConfig.from_address(cfg)
        assert extra is None and c.attrs is None and c.num_attrs == 0
        self.ex.append(
            (
                tuple(c.grid),
                tuple(c.block),
                c.smem,
                c.stream,
                f,
                _ptrs(params),
                threading.get_ident(),
            )
        )
        return self.fail.pop(0) if self.fail else 0

    def _plain(self, f, gx, gy, gz, tx, ty, tz, smem, stream, params, extra):
        self.plain.append(((gx, gy, gz), (tx, ty, tz), smem, stream, f, _ptrs(params)))
        return 0

    def _ctx(self, handle):
        self.ctx.append((handle, threading.get_ident()))
        return 0


class _Kernel:
    handle = 0x5000
    name = "add1"


@pytest.fixture
def libcuda(monkeypatch):
    from tilus.runtime import driver as D

    lib = FakeLibCuda()
    real = ctypes.CDLL
    monkeypatch.setattr(
        ctypes, "CDLL", lambda name, *a, **k: lib if "libcuda" in name else real(name, *a, **k)
    )
    monkeypatch.delenv("TILUS_LAUNCH_BINDINGS", raising=False)
    monkeypatch.setattr(D, "ensure_context", lambda index=0: 0x7000)
    monkeypatch.setattr(LR, "_load", lambda ck, index: _Kernel())
    monkeypatch.setattr(LR, "_stream_getter", lambda index: lambda: 0x9000)
    LR._libcuda.cache_clear()
    assert LR._libcuda() is lib
    yield lib
    LR._libcuda.cache_clear()


def test_ctypes_launch_sets_the_context_once_per_thread_and_retries(kernel, libcuda):
    x, y, z = _tensors()
    ptrs = [x.ptr, y.ptr, z.ptr]
    kernel(32, x, y, z)
    kernel(32, x, y, z)
    main = threading.get_ident()
    smem = L.dispatcher(kernel).entries[((32,), (int,))].launcher.plan.smem
    launch = ((1, 1, 1), (32, 1, 1), smem, 0x9000, 0x5000, ptrs, main)
    assert libcuda.ex == [launch, launch] and libcuda.plain == []
    assert libcuda.ctx == []  # loading made the context current on this thread
    t = threading.Thread(target=lambda: [kernel(32, x, y, z) for _ in range(3)])
    t.start()
    t.join()
    assert [c[0] for c in libcuda.ctx] == [0x7000] and libcuda.ctx[0][1] != main
    assert len(libcuda.ex) == 5
    # another context current on this thread: the launch fails, tilus makes its context
    # current and launches again (through cuLaunchKernel, whose errors are raised)
    libcuda.fail.append(201)  # CUDA_ERROR_INVALID_CONTEXT
    kernel(32, x, y, z)
    assert libcuda.ctx[1:] == [(0x7000, main)]
    assert libcuda.plain == [((1, 1, 1), (32, 1, 1), smem, 0x9000, 0x5000, ptrs)]
    kernel(32, x, y, z)
    assert len(libcuda.ex) == 7 and len(libcuda.ctx) == 2 and len(libcuda.plain) == 1


@pytest.mark.parametrize("positions", [(), (2,), (0, 3), (1, 2, 4)])
def test_entry_key_is_the_values_and_types_at_the_positions(positions):
    # True == 1 and 1.0 == 1: the types keep such calls apart
    args = (7, True, 2.5, "s", 9)
    vals = tuple(args[i] for i in positions)
    assert L._entry_key(positions)(args) == (vals, tuple(type(v) for v in vals))
    other = (7, 1, 2.5, "s", 9.0)
    if any(i in (1, 4) for i in positions):
        assert L._entry_key(positions)(other) != L._entry_key(positions)(args)
