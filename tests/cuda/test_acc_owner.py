"""A register tile belongs to the thread group that uses it (accumulator made before the group)."""

from __future__ import annotations

import numpy as np
import pytest

import tilus
from tests.cuda.conftest import needs_gpu, needs_nvrtc
from tilus import float16, float32
from tilus.backends.cuda.codegen import generate
from tilus.backends.cuda.layout import infer_layouts
from tilus.testing import marker_line


class AccOutside(tilus.Script):
    """The tutorial style: ``acc`` is created by all 160 threads, used by warps 0-3 only;
    ``two`` also uses it from a second warp group (refused)."""

    def __init__(self, two: bool = False):
        super().__init__()
        self.two = two

    def __call__(self, a_ptr: ~float16, c_ptr: ~float16):
        self.attrs.blocks = 1
        self.attrs.warps = 8 if self.two else 5
        ga = self.global_view(a_ptr, dtype=float16, shape=[64, 64])
        gc = self.global_view(c_ptr, dtype=float16, shape=[64, 64])
        sa = self.shared_tensor(dtype=float16, shape=[64, 64])
        acc = self.register_tensor(dtype=float32, shape=[64, 64], init=1.0)  # ACC LINE
        self.store_shared(sa, self.load_global(ga, offsets=[0, 0], shape=[64, 64]))
        self.fence.proxy_async()
        self.sync()
        with self.thread_group(0, 128):
            self.wgmma.fence()
            self.wgmma.mma(sa, sa.transpose(), acc)  # FIRST USE
            self.wgmma.commit_group()
            self.wgmma.wait_group(0)
            self.store_global(gc, self.cast(acc, dtype=float16), offsets=[0, 0])
        if self.two:
            with self.thread_group(128, 128):
                self.wgmma.fence()
                self.wgmma.mma(sa, sa.transpose(), acc)  # SECOND USE
                self.wgmma.commit_group()
                self.wgmma.wait_group(0)


def _program(**kw):
    k = AccOutside(**kw)
    return k.program(k.configs[0], {})


def test_the_group_that_uses_a_tile_owns_it():
    prog = _program()
    plan = infer_layouts(prog.fn)
    (acc,) = [t for t in plan.registers if t.name == "acc"]
    assert plan.registers[acc].kind == "wgmma_acc"
    assert (plan.owner[acc].begin, plan.owner[acc].size) == (0, 128)
    src = generate(prog).source
    assert "float acc[1][32];" in src and "over threads [0, 128)" in src


def test_a_tile_used_by_two_groups_names_both_lines():
    with pytest.raises(tilus.TilusCompileError) as info:
        generate(_program(two=True))
    msg = str(info.value)
    assert info.value.loc.line == marker_line(AccOutside, "SECOND USE")
    assert f"at line {marker_line(AccOutside, 'FIRST USE')}" in msg
    assert "[0, 128)" in msg and "[128, 256)" in msg and "two thread groups" in msg


def _inputs():
    rng = np.random.default_rng()
    a = rng.uniform(-1.0, 1.0, size=(64, 64)).astype(np.float16)
    ref = a.astype(np.float64) @ a.astype(np.float64).T + 1.0
    return a, ref


def test_the_interpreter_runs_it_the_same_way():
    a, ref = _inputs()
    c = np.full((64, 64), np.nan, dtype=np.float16)
    AccOutside()(a, c)  # NumPy arrays: the CPU interpreter
    assert np.abs(c.astype(np.float64) - ref).max() < 2e-2


@needs_nvrtc
def test_it_compiles_with_nvrtc():
    ck = tilus.compile(AccOutside(), float16, float16)
    ck = ck[0] if isinstance(ck, list) else ck
    assert ck.resources["spill_store_bytes"] == 0, ck.log


@pytest.mark.gpu
@needs_gpu
def test_it_runs_on_the_gpu():
    import torch

    a, ref = _inputs()
    c = torch.full((64, 64), float("nan"), dtype=torch.float16, device="cuda")
    AccOutside()(torch.from_numpy(a).cuda(), c)
    assert np.abs(c.cpu().numpy().astype(np.float64) - ref).max() < 2e-2
