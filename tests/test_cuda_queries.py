"""self.cuda: device and configuration queries answered for the compile target (no GPU)."""

from __future__ import annotations

import numpy as np
import pytest

import tilus
from tests.cuda.conftest import needs_nvrtc
from tilus import bfloat16, float16, float32, int8, int32
from tilus.lang.instructions.cuda_queries import SMALL_TILE, CudaQueries
from tilus.target import lookup


@pytest.fixture(autouse=True)
def _no_gpu(monkeypatch, tmp_path):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setenv("TILUS_CACHE_DIR", str(tmp_path))


class TargetStamp(tilus.Script):
    """One block per SM; each writes 10 * major + minor and the shared memory per block."""

    def __init__(self):
        super().__init__()
        self.per_block = self.cuda.shared_memory_per_block // 1024  # host side, in __init__

    def __call__(self, n: int32, out_ptr: ~int32):
        self.attrs.blocks = self.cuda.sm_count
        self.attrs.warps = 1
        g = self.global_view(out_ptr, dtype=int32, shape=[n, 2])
        cc = self.cuda.compute_capability
        v = self.register_tensor(dtype=int32, shape=[1, 2], init=0)
        v = v + (cc[0] * 10 + cc[1])
        self.store_global(g, v, offsets=[self.blockIdx.x, 0], dims=[0, 1])
        w = self.register_tensor(dtype=int32, shape=[1, 1], init=self.per_block)
        self.store_global(g, w, offsets=[self.blockIdx.x, 1], dims=[0, 1])


def _stamps(target=None):
    out = np.full((200, 2), -1, dtype=np.int32)
    if target is None:
        TargetStamp()(200, out)
    else:
        with tilus.target.scope(target):
            TargetStamp()(200, out)
    return out


def test_queries_answer_for_the_current_target_on_the_interpreter():
    out = _stamps()  # no GPU, no target set: sm_90a
    assert (out[:132] == [90, 227]).all() and (out[132:] == -1).all()
    out = _stamps("sm_80")
    assert (out[:108] == [80, 163]).all() and (out[108:] == -1).all()
    out = _stamps("sm_86")
    assert (out[:72] == [86, 99]).all() and (out[72:] == -1).all()


@needs_nvrtc
def test_queries_answer_for_the_compile_target_with_no_gpu():
    a = tilus.compile(TargetStamp(), 200, int32, target="sm_90a")
    b = tilus.compile(TargetStamp(), 200, int32, target="sm_80")
    assert "132" in a.kernel.program.text and "108" in b.kernel.program.text
    assert a.source != b.source


def test_target_properties_and_mma_configs():
    q = CudaQueries(lookup("sm_90a"))
    assert q.arch == "sm_90a" and q.compute_capability == (9, 0) and q.sm_count == 132
    assert q.shared_memory_per_block == 232448
    m = q.atomic_mma_configs
    assert (m.m16n8k16_f16_f32.m, m.m16n8k16_f16_f32.n, m.m16n8k16_f16_f32.k) == (16, 8, 16)
    assert m.from_dtypes(bfloat16, float32) is m.m16n8k16_bf16_f32
    assert m.from_dtypes(int8, int32) is m.m8n8k16_i8_i32 and m.m16n8k32_i8_i32.k == 32
    with pytest.raises(tilus.TilusError, match="no mma.sync configuration takes float32"):
        m.from_dtypes(float32, float32)
    with pytest.raises(tilus.TilusError, match=r"^No GPU is available\.$"):
        q.runtime.get_device_properties()


def test_dot_configs_are_the_backends_layouts():
    from tilus.ir.layout import register as rl

    q = CudaQueries(lookup("sm_80"))
    d = q.resolve_dot_config(float16, float32, m=64, n=64, k=32, num_warps=4)
    assert (d.warps_m, d.warps_n) == rl.mma_warps(4, 64, 64) == (2, 2)
    assert d.c_layout == rl.mma_c(64, 64, 2, 2, 4) and d.a_layout == rl.mma_a(64, 32, 2, 2, 4)
    assert d.b_layout.shape == (32, 64) and d.c_layout.num_threads == 128
    small = q.mma_dot_config(float16, float32, 4)
    assert small.c_layout.num_threads == 128 and small.mma.name == "m16n8k16_f16_f32"
    i8 = q.resolve_dot_config(int8, int32, m=64, n=64, k=64, num_warps=4)
    assert i8.mma.name == "m16n8k32_i8_i32" and i8.a_layout.local_size == 64 * 64 // 64
    assert q.mma_dot_config(int8, int32, 4).mma.k == 32
    with pytest.raises(tilus.TilusError, match="no CUDA lowering"):
        q.resolve_dot_config(float32, float32, m=64, n=64, k=32, num_warps=4)
    with pytest.raises(tilus.TilusError, match="does not tile into mma.sync m16n8k16 over 4"):
        q.resolve_dot_config(float16, float32, m=8, n=64, k=32, num_warps=4)


def test_default_layouts_match_the_backend():
    from tilus.backends.cuda.layout import inference
    from tilus.ir.layout import register as rl

    assert SMALL_TILE == inference.SMALL_TILE
    q = CudaQueries(lookup("sm_90a"))
    assert q.default_register_layout([8, 8], 128) == rl.replicated((8, 8), 128)
    assert q.default_register_layout([64, 64], 128) == rl.blocked((64, 64), 128)
    assert q.shared_layout([64, 64]).swizzle == 128  # 128-byte rows of float16
    assert q.shared_layout([64, 16]).swizzle == 32 and q.shared_layout([4, 64]).swizzle == 0
    assert q.shared_layout([64, 48], float32).swizzle == 0


def test_sm_count_without_a_driver_does_not_import_torch():
    # A compile-only process (no CUDA driver, torch not imported) asks for sm_count: the answer
    # is the target's, without the seconds of importing torch to learn there is no GPU.
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from tilus.lang.instructions import cuda_queries as q\n"
        "from tilus.target import lookup\n"
        "import tilus.target as t\n"
        "t._driver_present = lambda: False\n"
        "assert t.sm_count() == 132 and t.sm_count('sm_80') == 108\n"
        "assert q.CudaQueries(lookup('sm_90a')).sm_count == 132\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
