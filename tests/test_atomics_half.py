"""f16/bf16 atomics: min/max (an atom.cas.b16 loop on the GPU) and paired f16x2/bf16x2 adds."""

from __future__ import annotations

import numpy as np
import pytest

import tilus
from tests.cuda.conftest import needs_gpu, needs_nvrtc
from tilus import bfloat16, float16, float32, int32
from tilus.ir.layout import spatial


class HalfOps(tilus.Script):
    """min, max and add (paired where a thread holds neighbours) of one value tile into a
    global tile [rows, cols] and a shared copy; every old value goes out."""

    def __init__(self, dtype, warps):
        super().__init__()
        self.dtype, self.warps = dtype, warps

    def __call__(
        self,
        d_ptr: tilus.void_p,
        v_ptr: ~float32,
        o_ptr: ~float32,
        s_ptr: ~float32,
        r: int32,
        c: int32,
    ):
        self.attrs.blocks = [1]
        self.attrs.warps = self.warps
        dt = self.dtype
        gv = self.global_view(v_ptr, dtype=float32, shape=[r, c])
        v = self.cast(self.load_global(gv, offsets=[0, 0], shape=[16, 16]), dt)
        # pairs of row neighbours per thread: the adds go two at a time
        self.annotate_layout(v, spatial(self.warps * 4, 8).local(16 // (self.warps * 4), 2))
        gd = self.global_view(d_ptr, dtype=dt, shape=[r, c])
        o1 = self.atomic.global_min(gd, v)
        o2 = self.atomic.global_max(gd, v)
        o3 = self.atomic.global_add(gd, v)
        self.atomic.global_sub(gd, self.cast(self.cast(v, float32) * 0.5, dt))
        go = self.global_view(o_ptr, dtype=float32, shape=[3, 16, 16])
        for k, o in enumerate((o1, o2, o3)):
            self.store_global(go, self.cast(o, float32), offsets=[k, 0, 0], dims=[1, 2])
        s = self.shared_tensor(dtype=dt, shape=[16, 16])
        self.store_shared(s, self.cast(self.cast(v, float32) * 0.0 + 0.25, dt))
        self.sync()
        self.atomic.shared_max(s, v)
        self.atomic.shared_add(s, v)
        self.sync()
        gs = self.global_view(s_ptr, dtype=float32, shape=[16, 16])
        self.store_global(gs, self.cast(self.load_shared(s), float32), offsets=[0, 0])


def _round(x, dtype):
    import torch

    t = torch.from_numpy(np.asarray(x, np.float32)).to(
        torch.float16 if dtype == float16 else torch.bfloat16
    )
    return t.float().numpy()


def _reference(d, v, dtype):
    """Row-major element order; each step rounded to ``dtype`` (f32 math, as the GPU)."""
    rr, cc = d.shape
    vin = np.zeros((16, 16), np.float32)
    vin[: min(rr, 16), : min(cc, 16)] = v[:16, :16]
    v = _round(vin, dtype)[:rr, :cc]
    d = _round(d, dtype)
    olds = []
    o = d.copy()
    olds.append(o[:16, :16].copy())
    o = np.minimum(o, v[:16, :16])
    olds.append(o.copy())
    o = np.maximum(o, v)
    olds.append(o.copy())
    o = _round(o + v, dtype)
    o = _round(o - _round(v * 0.5, dtype), dtype)
    s = np.maximum(np.full((16, 16), 0.25, np.float32), _round(vin, dtype))
    s = _round(s + _round(vin, dtype), dtype)
    return o, olds, s


def _run(dtype, rows, cols, warps, device=None):
    rng = np.random.default_rng()
    d = _round(rng.standard_normal((rows, cols)), dtype)
    v = rng.standard_normal((rows, cols)).astype(np.float32)
    o = np.full((3, 16, 16), np.nan, np.float32)
    s = np.full((16, 16), np.nan, np.float32)
    k = HalfOps(dtype, warps)
    if device is None:
        import torch

        td = torch.from_numpy(d).to(torch.float16 if dtype == float16 else torch.bfloat16)
        k(td, v, o, s, rows, cols)
        return td.float().numpy(), o, s, d, v
    import torch

    tdt = torch.float16 if dtype == float16 else torch.bfloat16
    args = [torch.from_numpy(d).to(tdt).cuda()] + [torch.from_numpy(a).cuda() for a in (v, o, s)]
    k(*args, rows, cols)
    torch.cuda.synchronize()
    return args[0].float().cpu().numpy(), args[2].cpu().numpy(), args[3].cpu().numpy(), d, v


@pytest.mark.parametrize("dtype", [float16, bfloat16])
def test_interpreter_against_numpy(dtype):
    dd, o, s, d, v = _run(dtype, 13, 15, 2)
    want_d, olds, want_s = _reference(d, v, dtype)
    np.testing.assert_array_equal(dd, want_d)
    for k in range(3):
        np.testing.assert_array_equal(o[k, :13, :15], olds[k][:13, :15])
    np.testing.assert_array_equal(s, want_s)


@needs_nvrtc
@pytest.mark.parametrize("dtype", [float16, bfloat16])
def test_cuda_builds_cas_loops_and_paired_adds(dtype):
    ck = tilus.compile(HalfOps(dtype, 2), None, None, None, None, 13, 15, target="sm_90a")
    src = ck.source
    ty = "f16x2" if dtype == float16 else "bf16x2"
    assert "cas.b16" in src and f"add.noftz.{ty}" in src, src[:2000]
    assert f"tl_atom2_global_add_{dtype.name}" in src  # old values returned in pairs
    assert f"tl_red2_shared_add_{dtype.name}" in src  # shared add, result unused


@needs_nvrtc
def test_f16_builds_for_sm80():
    ck = tilus.compile(HalfOps(float16, 1), None, None, None, None, 16, 16, target="sm_80")
    assert "cas.b16" in ck.source and "add.noftz.f16x2" in ck.source


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("dtype", [float16, bfloat16])
def test_gpu_matches_the_interpreter(dtype):
    # one warp per element: the order of the updates does not change these results
    dd, o, s, d, v = _run(dtype, 13, 15, 2, device="cuda")
    want_d, olds, want_s = _reference(d, v, dtype)
    np.testing.assert_array_equal(dd, want_d)
    for k in range(3):
        np.testing.assert_array_equal(o[k, :13, :15], olds[k][:13, :15])
    np.testing.assert_array_equal(s, want_s)
