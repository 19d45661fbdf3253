"""Kernels built for 16-byte aligned pointers, the build for any alignment, and the launch
checks that choose between them (CPU: real NVRTC builds, the driver faked)."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

import tilus
from tests.cuda.conftest import needs_nvrtc
from tests.helpers_fakegpu import Add1, FakeTensor
from tilus import float16, int32
from tilus.backends.cuda import launcher as LR
from tilus.errors import TilusArgumentError
from tilus.ir.function import POINTER_ALIGN, UNALIGNED_ARG
from tilus.lang.script import InstantiatedScript

pytestmark = needs_nvrtc


class RowCopy(tilus.Script):
    """y = x * 2 over rows of 256 fp16: 8 elements a thread, one 16-byte access each run."""

    def __call__(self, m: int32, x: ~float16, y: ~float16):
        self.attrs.blocks = [m]
        self.attrs.warps = 1
        gx = self.global_view(x, dtype=float16, shape=[m, 256])
        gy = self.global_view(y, dtype=float16, shape=[m, 256])
        row = self.load_global(gx, offsets=[self.blockIdx.x, 0], shape=[1, 256])
        self.store_global(gy, row * 2.0, offsets=[self.blockIdx.x, 0])


def _source(const_args: dict) -> str:
    from tilus.backends.cuda.codegen.kernel import generate

    kernel = InstantiatedScript(RowCopy, (), {})
    return generate(kernel.program({}, const_args)).source


def test_the_usual_build_has_no_misaligned_path_and_the_other_one_has():
    aligned, any_alignment = _source({}), _source({UNALIGNED_ARG: True})
    assert "uint4" in aligned and "& 15" not in aligned  # vector accesses, no address test
    assert any_alignment.count("& 15) == 0") == 2  # one test a view: the load and the store
    kernel = InstantiatedScript(RowCopy, (), {})
    assert "pointer_align" not in kernel.program({}, {}).text
    assert "pointer_align 1" in kernel.program({}, {UNALIGNED_ARG: True}).text
    assert kernel.program({}, {}).fn.pointer_align == POINTER_ALIGN == 16


def test_compile_builds_for_the_alignment_of_the_tensors_given():
    torch = pytest.importorskip("torch")
    whole = torch.empty(4 * 256 + 8, dtype=torch.float16)
    ok = whole[: 4 * 256]
    off = whole[1 : 4 * 256 + 1]  # 2 bytes past an aligned address
    kernel = InstantiatedScript(RowCopy, (), {})
    assert "& 15" not in tilus.compile(kernel, 4, ok, ok).source
    assert "& 15) == 0" in tilus.compile(kernel, 4, off, ok).source


def _misaligned(n: int) -> FakeTensor:
    t = FakeTensor(np.ones(n, np.float32))
    del FakeTensor.registry[t.ptr]
    t.ptr += 4  # float32-aligned, not 16-byte aligned
    FakeTensor.registry[t.ptr] = t
    return t


@pytest.fixture
def fakes(monkeypatch, tmp_path):
    """The driver faked: each launch computes z = x + y and records its build's alignment."""
    monkeypatch.setenv("TILUS_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("TILUS_INTERPRET", raising=False)
    launches: list[int] = []

    def make_launch(align, threads, smem):
        def go(gx, gy, gz, stream, params):
            slots = ctypes.cast(params, ctypes.POINTER(ctypes.c_void_p))
            n = ctypes.c_int32.from_address(slots[0]).value
            x, y, z = (
                FakeTensor.registry[ctypes.c_uint64.from_address(slots[i]).value] for i in (1, 2, 3)
            )
            z.array[:n] = x.array[:n] + y.array[:n]
            launches.append(align)

        return go

    monkeypatch.setattr(LR, "_load", lambda ck, index: ck.kernel.program.fn.pointer_align)
    monkeypatch.setattr(LR, "_make_launch", make_launch)
    monkeypatch.setattr(LR, "_make_context", lambda index: lambda: None)
    monkeypatch.setattr(LR, "_stream_getter", lambda index: lambda: 0)
    return launches


def test_a_misaligned_call_runs_the_build_for_any_alignment_and_aligned_calls_do_not(fakes):
    kernel = InstantiatedScript(Add1, (), {})
    rng = np.random.default_rng(0)

    def aligned():
        return [FakeTensor(rng.standard_normal(32)) for _ in range(3)]

    a = aligned()
    kernel(32, *a)
    bad = _misaligned(32)
    bad.array[:] = rng.standard_normal(32)
    out = FakeTensor(np.full(32, np.nan))
    kernel(32, bad, a[1], out)  # the checked path: a new build, assuming nothing
    np.testing.assert_allclose(out.array, bad.array + a[1].array)
    kernel(32, bad, a[1], out)  # the fast path of the misaligned call
    kernel(32, *a)  # and of the aligned one: each keeps its own build
    kernel(32, *aligned())
    assert fakes == [16, 1, 1, 16, 16]


def test_a_launcher_of_the_aligned_build_refuses_a_misaligned_pointer(fakes):
    kernel = InstantiatedScript(Add1, (), {})
    ck = tilus.compile(kernel, 32, None, None, None)
    launcher = LR.Launcher(LR.LaunchPlan("Add1", ck.kernel), ck, 0, ["n", "x", "y", "z"])
    good = [FakeTensor(np.ones(32, np.float32)) for _ in range(2)]
    launcher(32, *good, FakeTensor(np.zeros(32, np.float32)))
    bad = _misaligned(32)
    with pytest.raises(TilusArgumentError) as e:
        launcher(32, good[0], bad, good[1])
    msg = str(e.value)
    assert "argument 'y'" in msg and "not a multiple of 16 bytes" in msg, msg
    assert fakes == [16]
