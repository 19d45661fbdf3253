"""A fake CUDA GPU for running autotuned calls on CPU: real NVRTC builds, the driver, tensors
and timing faked. Shared by the in-process tests (the ``gpu`` fixtures) and the child processes
of tests/tune/tuning_child.py, so both run exactly the same fakes."""

from __future__ import annotations

import ctypes

import numpy as np

import tilus
from tilus import float32, int32, option
from tilus.lang.script import InstantiatedScript
from tilus.tune import Timing
from tilus.utils import cdiv


@tilus.autotune("block", [32, 64, 128, 256])
class TunedAdd(tilus.Script):
    """c = a + b; block 256 needs 256 KB of shared memory and does not compile."""

    def __init__(self, block):
        super().__init__()
        self.block = block

    def __call__(self, n: int32, a: ~float32, b: ~float32, c: ~float32):
        self.attrs.blocks = [cdiv(n, self.block)]
        self.attrs.warps = 1
        scratch = self.shared_tensor(dtype=float32, shape=[self.block, self.block])
        self.free_shared(scratch)
        ga = self.global_view(a, dtype=float32, shape=[n])
        gb = self.global_view(b, dtype=float32, shape=[n])
        gc = self.global_view(c, dtype=float32, shape=[n])
        offset: int32 = self.blockIdx.x * self.block
        x = self.load_global(ga, offsets=[offset], shape=[self.block])
        y = self.load_global(gb, offsets=[offset], shape=[self.block])
        self.store_global(gc, x + y, offsets=[offset])


class Add1(tilus.Script):
    """z = x + y over one block of 32 threads: a launch with next to no GPU work."""

    def __call__(self, n: int32, x: ~float32, y: ~float32, z: ~float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 1
        gx = self.global_view(x, dtype=float32, shape=[n])
        gy = self.global_view(y, dtype=float32, shape=[n])
        gz = self.global_view(z, dtype=float32, shape=[n])
        a = self.load_global(gx, offsets=[0], shape=[32])
        b = self.load_global(gy, offsets=[0], shape=[32])
        self.store_global(gz, a + b, offsets=[0])


class _Device:
    type = "cuda"
    index = 0

    def __eq__(self, other):
        return getattr(other, "type", None) == "cuda" and getattr(other, "index", 0) == 0

    def __repr__(self):
        return "cuda:0"

    def __hash__(self):
        return 0


class _Host:
    def __init__(self, array):
        self.array = array

    def clone(self):
        return _Host(self.array.copy())

    def numpy(self):
        return self.array


class FakeTensor:
    """A 'CUDA tensor' backed by a NumPy array at a fake, 256-byte aligned address."""

    __module__ = "torch.fake"
    registry: dict = {}
    _next = [1 << 24]

    def __init__(self, array, dtype=np.float32):
        self.array = np.ascontiguousarray(array, dtype=dtype)
        self.ptr = FakeTensor._next[0]
        FakeTensor._next[0] += (self.array.nbytes + 255) // 256 * 256 + 256
        self.dtype = f"torch.{self.array.dtype.name}"
        self.device = _Device()
        self.shape = self.array.shape
        self.writes = 0
        FakeTensor.registry[self.ptr] = self

    def data_ptr(self):
        return self.ptr

    def get_device(self):
        return 0

    def is_contiguous(self):
        return True

    def numel(self):
        return self.array.size

    def clone(self):
        return FakeTensor(self.array.copy(), self.array.dtype)

    def detach(self):
        return self

    def cpu(self):
        return _Host(self.array)


class FakeGPU:
    """The driver seams of ``tilus.backends.cuda.launcher``: each launch computes c = a + b on
    the fake tensors (block 128 adds 1 more: its output disagrees) and advances a fake clock."""

    cost = {32: 3.0, 64: 2.0, 128: 1.0, 256: 0.5}

    def __init__(self, name: str | None = None):
        """A fake GPU; with ``name``, the device fingerprint reports a Hopper GPU of that name
        (else the fingerprint is the CPU machine's, as on a machine without a driver)."""
        self.name = name
        self.clock = 0.0
        self.launches: list[int] = []
        self.loads: list[int] = []
        self.benchmarks = 0
        self.pinned_block = 32

    def install(self, set_attr=setattr) -> None:
        """Put the fakes in place; ``set_attr`` is ``setattr`` or ``monkeypatch.setattr``."""
        from tilus.backends.cuda import launcher as LR
        from tilus.tune import keys, tuner

        set_attr(LR, "_load", self.load)
        set_attr(LR, "_make_launch", self.make_launch)
        set_attr(LR, "_make_context", lambda index: lambda: None)
        set_attr(LR, "_stream_getter", lambda index: lambda: 0)
        set_attr(tuner, "benchmark", self.benchmark)
        if self.name is not None:  # cached per process: only child processes ask for this
            set_attr(keys, "_driver_info", self.driver_info)
            keys._gpu_fingerprint.cache_clear()

    def driver_info(self, index):
        """What ``tilus.tune.keys._driver_info`` reads from a real driver."""
        return {
            "device": self.name,
            "compute_capability": "9.0",
            "sm_count": 132,
            "driver": "12.8",
            "nvrtc": "12.8",
        }

    def load(self, ck, index):
        block = ck.config.get("block", self.pinned_block)  # a pinned block is no config
        self.loads.append(block)
        return block  # the 'kernel handle' is the config's block

    def make_launch(self, block, threads, smem):
        def go(gx, gy, gz, stream, params):
            slots = ctypes.cast(params, ctypes.POINTER(ctypes.c_void_p))
            n = ctypes.c_int32.from_address(slots[0]).value
            a, b, c = (
                FakeTensor.registry[ctypes.c_uint64.from_address(slots[i]).value] for i in (1, 2, 3)
            )
            assert gx == -(-n // block) and (gy, gz) == (1, 1) and threads == 32
            c.array[:n] = a.array[:n] + b.array[:n] + (1.0 if block == 128 else 0.0)
            c.writes += 1
            self.launches.append(block)
            self.clock += self.cost[block]

        return go

    def benchmark(self, fn, *, warmup=None, repeat=None, flush_l2=True, cuda=None):
        from tilus.tune import timing

        self.benchmarks += 1
        t0 = self.clock
        timing.benchmark(fn, warmup=warmup, repeat=repeat, cuda=False)  # honours the options
        runs = (option.get_option("bench_warmup") if warmup is None else warmup) + (
            option.get_option("bench_repeat") if repeat is None else repeat
        )
        return Timing.of([(self.clock - t0) / runs])


#: The options the fake-GPU tests run under.
OPTIONS = dict(parallel_workers=4, bench_warmup=1, bench_repeat=3)


def make_args(n=1000, seed=0):
    """Fresh arguments of ``TunedAdd``: n, a, b and an output c full of NaN."""
    rng = np.random.default_rng(seed)
    a = FakeTensor(rng.standard_normal(n))
    b = FakeTensor(rng.standard_normal(n))
    return [n, a, b, FakeTensor(np.full(n, np.nan))]


def fresh(**kwargs) -> InstantiatedScript:
    """A new InstantiatedScript (as a new process would make), bypassing Script's cache."""
    return InstantiatedScript(TunedAdd, (), kwargs)
