"""Targets: tilus.target, per-instruction minimum targets, builds for sm_80..sm_90a (NVRTC)."""

from __future__ import annotations

import pytest

import tilus
from tests.cuda.conftest import needs_gpu, needs_nvrtc
from tests.cuda.test_codegen import TiledMatmul, VectorAdd
from tests.helpers_errors import err_line
from tilus import float16, float32, int32
from tilus.backends.cuda.tables import MIN_TARGET
from tilus.backends.cuda.targets import min_target
from tilus.ir import inst as I
from tilus.target import lookup
from tilus.utils import cdiv

#: SASS opcodes that exist only from Hopper on (wgmma, TMA, mbarrier sync units, elect).
HOPPER_OPCODES = ("HGMMA", "UTMALDG", "UTMASTG", "SYNCS", "ELECT", "USETMAXREG", "UBLKCP")


@pytest.fixture(autouse=True)
def _fresh_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TILUS_CACHE_DIR", str(tmp_path))


def test_predefined_targets_and_their_properties():
    t = tilus.target
    assert t.nvgpu_sm80.properties.shared_memory_per_block == 163 * 1024
    assert t.nvgpu_sm86.properties.shared_memory_per_block == 99 * 1024
    assert t.nvgpu_sm89.properties.shared_memory_per_block == 99 * 1024
    assert t.nvgpu_sm90a.properties.shared_memory_per_block == 232448
    assert t.nvgpu_sm70.properties.shared_memory_per_block == 96 * 1024
    assert t.nvgpu_sm90a.compute_capability == (9, 0) and t.nvgpu_sm90a.feature_suffix == "a"
    assert t.nvgpu_sm90a.properties.sm_count == 132
    for name in ("sm_80", "sm80", "nvgpu_sm80", "SM_80"):
        assert lookup(name) is t.nvgpu_sm80
    assert {"sm_100a", "sm_121f", "nvgpu_any", "amdgpu_any", "gfx1100"} <= set(t.TARGETS)
    with pytest.raises(tilus.TilusError, match="unknown target 'sm_99'"):
        lookup("sm_99")


def test_supports_follows_the_suffix_rules():
    t = tilus.target
    assert t.nvgpu_sm90a.supports(t.nvgpu_sm80) and t.nvgpu_sm90a.supports(t.nvgpu_sm90)
    assert t.nvgpu_sm90a.supports(t.nvgpu_sm90a) and not t.nvgpu_sm90.supports(t.nvgpu_sm90a)
    assert not t.nvgpu_sm80.supports(t.nvgpu_sm90) and t.nvgpu_sm89.supports(t.nvgpu_sm86)
    assert not t.nvgpu_sm100a.supports(t.nvgpu_sm90a)  # 'a' features: that exact GPU only
    assert t.nvgpu_sm103a.supports(t.nvgpu_sm100f) and t.nvgpu_sm103f.supports(t.nvgpu_sm100f)
    assert not t.nvgpu_sm103.supports(t.nvgpu_sm100f) and not t.nvgpu_sm120f.supports(
        t.nvgpu_sm100f
    )
    assert t.nvgpu_sm80.supports(t.nvgpu_any) and not t.nvgpu_sm80.supports(t.amdgpu_any)


def test_current_target_scope_and_no_gpu(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(tilus.TilusError, match=r"^No GPU is available\.$"):
        tilus.target.get_current_target()
    with tilus.target.scope("sm_86") as t:
        assert t is tilus.target.get_current_target() is tilus.target.nvgpu_sm86
        with tilus.target.scope(tilus.target.nvgpu_sm80):
            assert tilus.target.get_current_target().arch == "sm_80"
        assert tilus.target.get_current_target().arch == "sm_86"
    tilus.target.set_current_target("sm_89")
    try:
        assert tilus.target.get_current_target() is tilus.target.nvgpu_sm89
    finally:
        tilus.target.set_current_target(None)
    with pytest.raises(tilus.TilusError, match="No GPU"):
        tilus.target.get_current_target()


def test_gpu_target_is_the_most_capable_variant(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda i=None: (9, 0))
    assert tilus.target.get_current_target() is tilus.target.nvgpu_sm90a
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda i=None: (8, 6))
    assert tilus.target.get_current_target() is tilus.target.nvgpu_sm86


def test_every_lowered_instruction_has_a_minimum_target():
    lowered = [c for c in I.INSTRUCTIONS.values() if c not in MIN_TARGET.not_lowered]
    for cls in lowered:
        assert min_target(cls).buildable, cls.__name__
    hopper = {c.__name__ for c in lowered if min_target(c).compute_capability >= (9, 0)}
    assert {"WgmmaMma", "TmaGlobalToShared", "MBarrierArriveExpectTx", "MBarrierWait"} <= hopper
    assert {"SetMaxNReg", "FenceProxyAsync", "TmaCommitGroup"} <= hopper
    assert min_target(I.Dot).arch == "sm_80" and min_target(I.LoadGlobal).arch == "sm_80"
    assert min_target(I.WgmmaMma).arch == "sm_90a"


def _sass_is_pre_hopper(ck):
    from tilus.runtime.sass import sass_opcodes

    ops = sass_opcodes(ck.sass())
    assert not [o for o in ops if o.startswith(HOPPER_OPCODES)], sorted(ops)
    return ops


@needs_nvrtc
@pytest.mark.parametrize(
    "arch, matmul", [("sm_80", True), ("sm_86", False), ("sm_89", False), ("sm_90", True)]
)
def test_sm80_kernels_build_for_older_targets(arch, matmul):
    if matmul:  # mma.sync and ldmatrix: sm_80 instructions
        ck = tilus.compile(TiledMatmul(), 200, 136, 72, float16, float16, float32, target=arch)
        assert _sass_is_pre_hopper(ck)["HMMA"] > 0
    else:
        ck = tilus.compile(VectorAdd(), 1000, float32, float32, float32, target=lookup(arch))
        assert _sass_is_pre_hopper(ck)["STG"] > 0
    assert ck.arch == arch and ck.ptx and f".target sm_{arch[3:]}" in ck.ptx


@needs_nvrtc
def test_sm90a_build_is_unchanged_by_targets():
    a = tilus.compile(VectorAdd(), 1000, float32, float32, float32)
    b = tilus.compile(VectorAdd(), 1000, float32, float32, float32, target="sm_90a")
    with tilus.target.scope("sm_90a"):
        c = tilus.compile(VectorAdd(), 1000, float32, float32, float32)
    assert a.source == b.source == c.source and a.arch == "sm_90a" and a.ptx is None
    with tilus.target.scope("sm_80"):
        d = tilus.compile(VectorAdd(), 1000, float32, float32, float32)
    assert d.arch == "sm_80" and d.source == a.source


def test_unbuildable_targets_are_refused():
    for name in ("sm_70", "sm_100a", "nvgpu_any"):
        with pytest.raises(tilus.TilusError, match="not supported by the CUDA backend"):
            tilus.compile(VectorAdd(), 1000, float32, float32, float32, target=name)


class ProxyFenceKernel(tilus.Script):
    def __call__(self, n: int32, x_ptr: ~float32):
        self.attrs.blocks = cdiv(n, 128)
        self.attrs.warps = 4
        gx = self.global_view(x_ptr, dtype=float32, shape=[n])
        x = self.load_global(gx, offsets=[self.blockIdx.x * 128], shape=[128])
        self.fence.proxy_async("global")  # ERR
        self.store_global(gx, x + 1.0, offsets=[self.blockIdx.x * 128])


class SetMaxNRegKernel(tilus.Script):
    def __call__(self, n: int32, x_ptr: ~float32):
        self.attrs.blocks = 1
        self.attrs.warps = 4
        self.setmaxnreg(40)  # ERR


class SingleThreadKernel(tilus.Script):
    def __call__(self, n: int32, x_ptr: ~float32):
        self.attrs.blocks = 1
        self.attrs.warps = 4
        gx = self.global_view(x_ptr, dtype=float32, shape=[n])
        with self.single_thread():  # ERR
            self.store_global(
                gx, self.register_tensor(dtype=float32, shape=[1], init=1.0), offsets=[0]
            )


class BigSmemKernel(tilus.Script):
    def __call__(self, n: int32, x_ptr: ~float32):
        self.attrs.blocks = 1
        self.attrs.warps = 4
        a = self.shared_tensor(dtype=float32, shape=[64, 256])
        b = self.shared_tensor(dtype=float32, shape=[64, 256])  # ERR
        self.free_shared(a)
        self.free_shared(b)


def _refused(kernel_cls, target, fragment):
    with pytest.raises(tilus.TilusCompileError) as e:
        tilus.compile(kernel_cls(), 256, float32, target=target)
    err = e.value
    assert err.loc is not None and err.loc.line == err_line(kernel_cls), str(err)
    assert fragment in err.msg, err.msg
    return err


@needs_nvrtc
def test_hopper_instructions_on_an_older_target_are_located_errors():
    _refused(
        ProxyFenceKernel,
        "sm_80",
        "fence_proxy_async needs target sm_90 or newer, but the kernel is built for sm_80",
    )
    _refused(ProxyFenceKernel, "sm_89", "built for sm_89")
    tilus.compile(ProxyFenceKernel(), 256, float32, target="sm_90")
    _refused(SetMaxNRegKernel, "sm_90", "setmaxnreg needs target sm_90a or newer")
    _refused(SingleThreadKernel, "sm_86", "single_thread (elect.sync) needs target sm_90")


@needs_nvrtc
def test_shared_memory_limit_of_the_target():
    # 2 x 64 KB: fits sm_80 (163 KB) and sm_90a, not sm_86 (99 KB)
    tilus.compile(BigSmemKernel(), 256, float32, target="sm_80")
    err = _refused(BigSmemKernel, "sm_86", "over the sm_86 per-block limit of 101376 bytes")
    assert "131072 bytes" in err.msg


@pytest.mark.gpu
@needs_gpu
def test_sm80_build_runs_on_hopper_through_ptx_jit():
    import numpy as np
    import torch

    m, n, k = 200, 136, 72
    a = torch.randn(m, k, dtype=torch.float16)
    b = torch.randn(k, n, dtype=torch.float16)
    want = np.zeros((m, n), dtype=np.float32)
    kern = TiledMatmul()
    kern(m, n, k, a.numpy(), b.numpy(), want)  # the interpreter
    c = torch.full((m, n), float("nan"), device="cuda")
    with tilus.target.scope("sm_80"):
        kern(m, n, k, a.cuda(), b.cuda(), c)
    torch.cuda.synchronize()
    np.testing.assert_allclose(c.cpu().numpy(), want, rtol=1e-3, atol=1e-3)
    ck = tilus.compile(kern, m, n, k, float16, float16, float32, target="sm_80")
    assert ck.arch == "sm_80"
    from tilus.backends.cuda.launch import CUDA

    disp = kern.backend_state(CUDA).by_arch["sm_80"]
    loaded = [ck2.loaded_from for ck2 in _kernels(disp)]
    assert loaded and all(v == {torch.cuda.current_device(): "ptx"} for v in loaded), loaded


def _kernels(disp):
    """The CompiledKernels a dispatcher launched."""
    return [launcher.ck for _, launcher in disp._launchers.values()]


@pytest.mark.gpu
@needs_gpu
def test_queries_on_the_gpu_report_its_own_sm_count():
    from tilus.lang.instructions.cuda_queries import CudaQueries
    from tilus.runtime.driver import device_properties

    props = device_properties(0)
    assert tilus.target.get_current_target().arch == "sm_90a"
    q = CudaQueries(lookup("sm_90a"))
    assert q.sm_count == props["sm_count"] and q.runtime.get_device_properties() == props
