"""Autotuned CUDA calls on CPU: real NVRTC builds, the driver, tensors and timing faked
(the fakes live in tests/helpers_fakegpu.py)."""

from __future__ import annotations

import ctypes
import json
import os
import shutil

import numpy as np
import pytest

import tilus
from tests.cuda.conftest import needs_nvrtc
from tests.helpers_fakegpu import OPTIONS, FakeGPU, FakeTensor, fresh, make_args
from tilus import option
from tilus.backends.cuda import launch as L
from tilus.backends.cuda import launcher as LR
from tilus.lang.script import InstantiatedScript
from tilus.tune import TuneWarning

pytestmark = needs_nvrtc


@pytest.fixture
def gpu(monkeypatch, tmp_path):
    fake = FakeGPU()
    monkeypatch.setenv("TILUS_CACHE_DIR", str(tmp_path))
    fake.install(monkeypatch.setattr)
    with option.scoped(**OPTIONS):
        yield fake


_args, _fresh = make_args, fresh


def _builds(monkeypatch):
    from tilus.backends.cuda.codegen import build as B

    built, real = [], B.build_steps

    def counting(program, config, **kw):  # build() and the tuner's builds both come here
        built.append(dict(config))
        return (yield from real(program, config, **kw))

    monkeypatch.setattr(B, "build_steps", counting)
    return built


# --- tests -------------------------------------------------------------------------------------
def test_tuning_compiles_in_parallel_skips_failures_and_wrong_outputs(gpu, tmp_path):
    kernel = _fresh()
    args = _args()
    with pytest.warns(TuneWarning, match='"block":128.*never picked'):
        kernel(*args)
    n, a, b, c = args
    np.testing.assert_array_equal(c.array, a.array + b.array)
    assert c.writes == 1  # tuning ran on clones: the caller's output was written once
    disp = L.dispatcher(kernel)
    stats = disp.last_tuning
    assert stats["winner"] == {"block": 64} and stats["configs"] == 4
    assert stats["failed"] == 1 and stats["disagreed"] == 1 and stats["timed"] == 2
    assert stats["workers"] >= 2 and os.getpid() not in stats["build_pids"]  # NVRTC in workers
    (reason,) = kernel.failed_configs.values()
    assert list(kernel.failed_configs) == [(("block", 256),)]
    assert "shared memory" in reason
    # each timed config: one cross-check run, then bench_warmup + bench_repeat runs
    assert gpu.launches.count(32) == gpu.launches.count(64) - 1 == 1 + 1 + 3
    assert gpu.launches.count(128) == 1
    table = json.loads((tmp_path / "dispatch" / "tuned_add.json").read_text())
    (entry,) = table["entries"].values()
    assert entry["winner"] == {"block": 64}
    assert [f["config"] for f in entry["failed"]] == [{"block": 256}]
    assert "shared memory" in entry["failed"][0]["reason"]
    assert [d["config"] for d in entry["disagreed"]] == [{"block": 128}]


def test_repeated_calls_take_the_fast_path(gpu, monkeypatch):
    kernel = _fresh()
    with pytest.warns(TuneWarning):
        kernel(*_args())
    assert kernel._fast is not None
    slow = []
    real_run = L.Dispatcher.run
    monkeypatch.setattr(L.Dispatcher, "run", lambda self, *a: slow.append(1) or real_run(self, *a))
    gpu.launches.clear()
    for seed in range(3):  # new tensors each time: pointers are rewritten
        args = _args(seed=seed)
        kernel(*args)
        np.testing.assert_array_equal(args[3].array, args[1].array + args[2].array)
    assert gpu.launches == [64, 64, 64] and slow == []
    # a call the fast path cannot vouch for goes through the checked path and its errors
    bad = _args()
    bad[2] = FakeTensor(np.zeros(10))
    with pytest.raises(tilus.TilusArgumentError, match="'b' has 10 elements"):
        kernel(*bad)
    assert slow == [1]
    kernel(np.int64(1000), *_args()[1:])  # a NumPy int: checked path, same decision
    kernel(1020, *_args(1020)[1:])  # same bucket (1024): no tuning again
    assert len(slow) == 3 and gpu.launches[-2:] == [64, 64]


def test_dispatch_table_reused_by_a_new_instance(gpu, tmp_path, monkeypatch):
    with pytest.warns(TuneWarning):
        _fresh()(*_args())
    shutil.rmtree(tmp_path / "programs")  # as on a machine that has only the table
    built = _builds(monkeypatch)
    gpu.loads.clear()
    kernel = _fresh()
    args = _args()
    kernel(*args)
    assert built == [{"block": 64}] and gpu.loads == [64]  # only the stored winner
    assert len(list((tmp_path / "programs").iterdir())) == 1
    assert L.dispatcher(kernel).last_tuning is None
    np.testing.assert_array_equal(args[3].array, args[1].array + args[2].array)


def test_pinned_config_skips_tuning(gpu, monkeypatch):
    built = _builds(monkeypatch)
    kernel = _fresh(block=32)
    args = _args()
    kernel(*args)
    assert built == [{}] and gpu.launches == [32]  # the one config is {} (block is pinned)
    assert L.dispatcher(kernel).last_tuning is None


def test_autotune_off_uses_the_first_compiling_config(gpu, monkeypatch):
    built = _builds(monkeypatch)
    with option.scoped(autotune=False):
        kernel = _fresh()
        kernel(*_args())
    assert built == [{"block": 32}] and gpu.launches == [32]
    monkeypatch.setenv("TILUS_AUTOTUNE", "0")
    kernel = _fresh()
    kernel(*_args())
    assert gpu.launches == [32, 32] and len(built) == 2


def test_option_change_is_seen_by_the_fast_path(gpu):
    kernel = _fresh(block=32)
    kernel(*_args())
    kernel(*_args())
    assert gpu.launches == [32, 32]
    with option.scoped(interpret=True):  # the interpreter takes over (fakes are no tensors)
        with pytest.raises(Exception):  # noqa: B017
            kernel(*_args())
    kernel(*_args())
    assert gpu.launches == [32, 32, 32]


def test_fast_path_refreshes_tensor_maps_when_pointers_change(gpu, monkeypatch):
    from tests.cuda.test_codegen import seed

    encoded = []

    def encode(**kw):
        from tilus.runtime.tensormap import validate_tiled

        validate_tiled(**kw)
        encoded.append(kw["address"])
        return kw["address"].to_bytes(8, "little") + bytes(120)

    monkeypatch.setattr(LR, "_TMAPS", LR.TensorMapCache(encoder=encode))
    seen = []

    def make_launch(kernel, threads, smem):
        def go(gx, gy, gz, stream, params):
            slots = ctypes.cast(params, ctypes.POINTER(ctypes.c_void_p))
            m = ctypes.c_int32.from_address(slots[0]).value
            ptrs = [ctypes.c_uint64.from_address(slots[i]).value for i in (1, 2, 3)]
            maps = [ctypes.c_uint64.from_address(slots[i]).value for i in (4, 5)]
            assert slots[4] % 64 == 0 and slots[5] % 64 == 0  # __grid_constant__ alignment
            seen.append((m, (gx, gy, gz), ptrs, maps))

        return go

    monkeypatch.setattr(LR, "_make_launch", make_launch)
    V2 = seed("matmul_v2").MatmulWGMMAV2
    kernel = InstantiatedScript(V2, (), dict(num_stages=3, block_m=128, block_n=128, block_k=64))
    m, n, k = 1000, 512, 256

    def tensors():
        f16 = np.float16
        return (
            FakeTensor(np.zeros((m, k)), f16),
            FakeTensor(np.zeros((n, k)), f16),
            FakeTensor(np.zeros((m, n)), f16),
        )

    a, b, c = tensors()
    kernel(m, n, k, a, b, c)
    kernel(m, n, k, a, b, c)  # the fast path: nothing encoded again
    assert encoded == [a.ptr, b.ptr]
    a2, _, c2 = tensors()
    kernel(m, n, k, a2, b, c2)
    assert encoded == [a.ptr, b.ptr, a2.ptr]
    assert seen[0] == (m, (8, 4, 1), [a.ptr, b.ptr, c.ptr], [a.ptr, b.ptr]) == seen[1]
    assert seen[2] == (m, (8, 4, 1), [a2.ptr, b.ptr, c2.ptr], [a2.ptr, b.ptr])
    big_a, big_c = (FakeTensor(np.zeros((2000, x)), np.float16) for x in (k, n))
    kernel(2000, n, k, big_a, b, big_c)  # a new M: new storage, grid and tensor maps
    assert seen[3][:2] == (2000, (16, 4, 1))
    misaligned = FakeTensor(np.zeros((m, k)), np.float16)
    misaligned.ptr += 8
    FakeTensor.registry[misaligned.ptr] = misaligned
    with pytest.raises(tilus.TilusArgumentError, match="a_ptr.*TMA"):
        kernel(m, n, k, misaligned, b, c)
    assert len(seen) == 4
