"""Host side of the CUDA backend on CPU: argument checks, grid, tensor maps (driver faked)."""

from __future__ import annotations

import math

import pytest

import tilus
from tests.cuda.conftest import needs_nvrtc
from tests.cuda.test_codegen import seed
from tilus.backends.cuda import launch as L
from tilus.backends.cuda import launcher as LR


class _Device:
    type = "cuda"
    index = 0

    def __eq__(self, other):
        return getattr(other, "type", None) == "cuda"

    def __repr__(self):
        return "cuda:0"


class FakeTensor:
    """Just enough of a torch tensor for the launch path."""

    __module__ = "torch.fake"

    def __init__(self, shape, ptr, dtype="torch.float16", contiguous=True, device=None):
        self.shape, self.ptr, self.dtype = shape, ptr, dtype
        self.contiguous, self.device = contiguous, device or _Device()

    def data_ptr(self):
        return self.ptr

    def is_contiguous(self):
        return self.contiguous

    def numel(self):
        return math.prod(self.shape)


@pytest.fixture
def encoded(monkeypatch, tmp_path):
    monkeypatch.setenv("TILUS_CACHE_DIR", str(tmp_path))
    calls = []

    def fake(**kw):
        from tilus.runtime.tensormap import validate_tiled

        validate_tiled(**kw)  # the real limits, without the driver
        calls.append(kw)
        return bytes(128)

    monkeypatch.setattr(LR, "_TMAPS", LR.TensorMapCache(encoder=fake))
    return calls


def _prepare(kernel, *args):
    # the launcher's own plan: arguments checked, grid and tensor maps for these integers
    from tilus.backends.cuda.launcher import LaunchPlan

    const, rt = kernel.bind(args, {})
    ck = L.select_kernel(kernel, const)
    fn = ck.kernel.program.fn
    env, tensors, _ = L._check_values("K", fn.params, rt)
    names = [p.name for p in fn.params]
    scalars = {p.name: v for p, v in env.items() if p not in tensors}
    bound = LaunchPlan("K", ck.kernel).bind(scalars, {n: i for i, n in enumerate(names)})
    bound.check([tensors.get(p, env.get(p)) for p in fn.params])
    return list(bound.grid), bound


@needs_nvrtc
def test_grid_and_tensor_maps(encoded):
    V2 = seed("matmul_v2").MatmulWGMMAV2
    kernel = V2(num_stages=3, block_m=128, block_n=128, block_k=64)
    m, n, k = 1000, 512, 256
    a, b, c = FakeTensor((m, k), 1 << 20), FakeTensor((n, k), 2 << 20), FakeTensor((m, n), 3 << 20)
    grid, bound = _prepare(kernel, m, n, k, a, b, c)
    assert grid == [8, 4, 1]
    assert [name for _, name, _, _ in bound.tensors] == ["a_ptr", "b_ptr", "c_ptr"]
    # (argument position, name, dtype, shape, byte strides, box, swizzle) of each tensor map
    assert bound.maps == [
        (1, "a_ptr", "float16", (1000, 256), (512, 2), (128, 64), "128B"),
        (2, "b_ptr", "float16", (512, 256), (512, 2), (128, 64), "128B"),
    ]


@needs_nvrtc
def test_argument_errors_name_the_parameter(encoded):
    V2 = seed("matmul_v2").MatmulWGMMAV2
    kernel = V2(num_stages=3, block_m=128, block_n=128, block_k=64)
    a, c = FakeTensor((128, 64), 1 << 20), FakeTensor((128, 128), 3 << 20)
    cases = [
        (FakeTensor((128, 64), 2 << 20, dtype="torch.float32"), "b_ptr.*float32"),
        (FakeTensor((128, 64), 2 << 20, contiguous=False), "b_ptr.*non-contiguous"),
        (FakeTensor((64, 64), 2 << 20), "b_ptr.*4096 elements"),
        (FakeTensor((128, 64), (2 << 20) + 8), "b_ptr.*TMA"),  # not 16-byte aligned
        ("not a tensor", "b_ptr.*torch tensor"),
    ]
    for b, match in cases:
        with pytest.raises(tilus.TilusArgumentError, match=match):
            _prepare(kernel, 128, 128, 64, a, b, c)
    with pytest.raises(tilus.TilusArgumentError, match="m_size"):
        _prepare(kernel, 2**31, 128, 64, a, a, c)
