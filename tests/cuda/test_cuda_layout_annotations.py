"""User layouts (annotate_layout, register_tensor/shared_tensor(layout=)), clip and the repeats:
interpreter vs NumPy, the CUDA code on the CPU emulator, and the located refusals."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

import tilus
from tests.cuda.conftest import needs_gpu, needs_nvrtc
from tests.helpers_cpu_cuda import available, emulate
from tests.helpers_errors import err_line
from tilus import float16, float32
from tilus.backends.cuda.layout import infer_layouts
from tilus.ir.layout import (
    column_local,
    local,
    same_layout,
    shared_column_major,
    shared_row_major,
    shared_row_major_swizzle,
    spatial,
)

needs_gxx = pytest.mark.skipif(not available(), reason="needs g++ for the CPU emulator")

MMA_C = local(2, 1).spatial(8, 4).local(1, 2)  # the m16n8 accumulator fragment (spec 5.1)
COLS = column_local(2, 2).spatial(8, 4)  # an unusual layout nothing else would pick
ROW64, ROW8 = shared_row_major(64, 64), shared_row_major(8, 64)


@pytest.fixture(scope="module", autouse=True)
def _fresh_cache(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("TILUS_CACHE_DIR", str(tmp_path_factory.mktemp("tilus-cache")))
    yield
    mp.undo()


class Annotated(tilus.Script):
    """An annotated load, clip, repeat and repeat_interleave of it; a register_tensor with a
    layout, and a shared tile with a user layout round-tripped."""

    def __init__(self, layout, smem_layout):
        super().__init__()
        self.layout, self.smem_layout = layout, smem_layout

    def __call__(
        self,
        x_ptr: ~float32,
        y_ptr: ~float32,
        r_ptr: ~float32,
        ri_ptr: ~float32,
        z_ptr: ~float32,
        s_ptr: ~float16,
    ):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        gx = self.global_view(x_ptr, dtype=float32, shape=[13, 7])
        x = self.load_global(gx, offsets=[0, 0], shape=[16, 8])
        self.annotate_layout(x, self.layout)
        gy = self.global_view(y_ptr, dtype=float32, shape=[13, 7])
        self.store_global(gy, self.clip(x, -0.5, 0.5), offsets=[0, 0])
        gr = self.global_view(r_ptr, dtype=float32, shape=[2, 29, 8])
        self.store_global(gr, self.repeat(x, [2, 2, 1]), offsets=[0, 0, 0])
        gi = self.global_view(ri_ptr, dtype=float32, shape=[16, 23])
        self.store_global(gi, self.repeat_interleave(x, [1, 3]), offsets=[0, 0])
        z = self.register_tensor(
            dtype=float32, shape=[16, 8], init=lambda i, j: i * 8 + j, layout=self.layout
        )
        gz = self.global_view(z_ptr, dtype=float32, shape=[16, 8])
        self.store_global(gz, z + x, offsets=[0, 0])
        s = self.shared_tensor(dtype=float16, shape=[8, 32], layout=self.smem_layout)
        self.store_shared(s, self._tile(x))
        self.sync()
        gs = self.global_view(s_ptr, dtype=float16, shape=[8, 32])
        self.store_global(gs, self.load_shared(s), offsets=[0, 0])

    def _tile(self, x):
        return self.cast(self.reshape(self.repeat(x, [1, 2]), [8, 32]), float16)


def _reference(x):
    xp = np.zeros((16, 8), np.float32)
    xp[:13, :7] = x
    z = np.arange(128, dtype=np.float32).reshape(16, 8) + xp
    s = np.tile(xp, (1, 2)).reshape(8, 32).astype(np.float16)
    return (
        np.clip(x, -0.5, 0.5),
        np.tile(xp, (2, 2, 1))[:, :29],
        np.repeat(xp, 3, axis=1)[:, :23],
        z,
        s,
    )


def _outputs():
    return [
        np.full((13, 7), np.nan, np.float32),
        np.full((2, 29, 8), np.nan, np.float32),
        np.full((16, 23), np.nan, np.float32),
        np.full((16, 8), np.nan, np.float32),
        np.full((8, 32), np.nan, np.float16),
    ]


CASES = [
    (MMA_C, shared_row_major(8, 32)),
    (COLS, shared_row_major_swizzle((8, 32), 2)),
]


@pytest.mark.parametrize("layout, smem", CASES)
def test_interpreter_against_numpy(layout, smem):
    x = np.random.default_rng().standard_normal((13, 7)).astype(np.float32)
    outs = _outputs()
    with tilus.option.scoped(interpret=True):
        Annotated(layout, smem)(x, *outs)
    for got, want in zip(outs, _reference(x)):
        np.testing.assert_array_equal(got, want)


def _tile_named(plan, name):
    (hit,) = [lay for t, lay in plan.registers.items() if t.name == name]
    return hit


@needs_nvrtc
@needs_gxx
@pytest.mark.parametrize("layout, smem", CASES)
def test_cuda_honours_the_layouts_and_matches(layout, smem):
    k = Annotated(layout, smem)
    plan = infer_layouts(k.program(k.configs[0], {}).fn)
    assert same_layout(_tile_named(plan, "x"), layout)
    assert same_layout(_tile_named(plan, "z"), layout)
    (view,) = [v for t, v in plan.shared.items() if t.name == "s"]
    assert (view.layout.shape, view.layout.swizzle) == (
        smem.shape,
        smem.swizzle,
    )  # not replaced by the 64-byte swizzle the shape would get
    x = np.random.default_rng().standard_normal((13, 7)).astype(np.float32)
    outs = _outputs()
    emulate(k, [x, *outs], [1])
    for got, want in zip(outs, _reference(x)):
        np.testing.assert_array_equal(got, want)


# --- refusals ----------------------------------------------------------------------------------


class Disagree(tilus.Script):
    def __call__(self, x_ptr: ~float32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        g = self.global_view(x_ptr, dtype=float32, shape=[16, 8])
        a = self.load_global(g, offsets=[0, 0], shape=[16, 8])
        self.annotate_layout(a, MMA_C)  # FIRST
        b = self.load_global(g, offsets=[0, 0], shape=[16, 8])
        self.annotate_layout(b, COLS)  # ERR
        self.store_global(g, a + b, offsets=[0, 0])


class DotAcc(tilus.Script):
    def __call__(self, a_ptr: ~float16, c_ptr: ~float32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        ga = self.global_view(a_ptr, dtype=float16, shape=[16, 16])
        a = self.load_global(ga, offsets=[0, 0], shape=[16, 16])
        b = self.load_global(ga, offsets=[0, 0], shape=[16, 8])
        acc = self.register_tensor(dtype=float32, shape=[16, 8], init=0.0, layout=COLS)  # FIRST
        c = self.dot(a, b, acc)  # ERR
        self.store_global(self.global_view(c_ptr, dtype=float32, shape=[16, 8]), c, offsets=[0, 0])


class WgmmaRowMajor(tilus.Script):
    def __call__(self):
        self.attrs.blocks = 1
        self.attrs.warps = 4
        sa = self.shared_tensor(dtype=float16, shape=[64, 64], layout=ROW64)  # FIRST
        sb = self.shared_tensor(dtype=float16, shape=[64, 64])
        acc = self.register_tensor(dtype=float32, shape=[64, 64], init=0.0)
        self.wgmma.mma(sa, sb.transpose(), acc)  # ERR


class SharedTwice(tilus.Script):
    def __call__(self):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        s = self.shared_tensor(dtype=float16, shape=[8, 64], layout=ROW8)  # FIRST
        self.annotate_layout(s, shared_row_major_swizzle((8, 64), 2))  # ERR


class ColumnMajorShared(tilus.Script):
    def __call__(self, x_ptr: ~float32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        s = self.shared_tensor(dtype=float32, shape=[8, 4], layout=shared_column_major(8, 4))  # ERR
        g = self.global_view(x_ptr, dtype=float32, shape=[8, 4])
        self.store_shared(s, self.load_global(g, offsets=[0, 0], shape=[8, 4]))
        self.sync()
        self.store_global(g, self.load_shared(s) * 2.0, offsets=[0, 0])


def _line(cls, tag):
    lines, first = inspect.getsourcelines(cls)
    (hit,) = [first + i for i, text in enumerate(lines) if f"# {tag}" in text]
    return hit


def _compile_error(cls, *args):
    with pytest.raises(tilus.TilusCompileError) as info:
        tilus.compile(cls(), *args, target="sm_90a")
    return info.value


@pytest.mark.parametrize(
    "cls, args, fragment",
    [
        (Disagree, (None,), "differs from the one given at"),
        (DotAcc, (None, None), "differs from the one given at"),
        (WgmmaRowMajor, (), "was given at"),
        (SharedTwice, (), "two different layouts"),
        (ColumnMajorShared, (None,), "permuted"),
    ],
)
def test_conflicts_name_both_lines(cls, args, fragment):
    e = _compile_error(cls, *args)
    assert e.loc.line == err_line(cls), str(e)
    assert fragment in e.msg, str(e)
    if cls is not ColumnMajorShared:
        assert f"test_cuda_layout_annotations.py:{_line(cls, 'FIRST')}" in e.msg, str(e)


def test_column_major_shared_runs_on_the_interpreter():
    x = np.random.default_rng().standard_normal((8, 4)).astype(np.float32)
    y = x.copy()
    with tilus.option.scoped(interpret=True):
        ColumnMajorShared()(y)
    np.testing.assert_array_equal(y, x * 2)


class WrongThreads(tilus.Script):
    def __call__(self, x_ptr: ~float32):
        self.attrs.blocks = 1
        self.attrs.warps = 4
        g = self.global_view(x_ptr, dtype=float32, shape=[16, 8])
        a = self.load_global(g, offsets=[0, 0], shape=[16, 8])
        self.annotate_layout(a, MMA_C)  # ERR
        self.store_global(g, a, offsets=[0, 0])


class BadDivide(tilus.Script):
    def __call__(self, x_ptr: ~float32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        g = self.global_view(x_ptr, dtype=float32, shape=[16, 8])
        a = self.load_global(g, offsets=[0, 0], shape=[16, 8])
        self.annotate_layout(a, MMA_C / spatial(4, 8))  # ERR
        self.store_global(g, a, offsets=[0, 0])


class WrongShape(tilus.Script):
    def __call__(self):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        self.register_tensor(dtype=float32, shape=[8, 16], layout=MMA_C)  # ERR


class BadRepeat(tilus.Script):
    def __call__(self):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        x = self.register_tensor(dtype=float32, shape=[4, 4], init=1.0)
        self.repeat_interleave(x, [2])  # ERR


@pytest.mark.parametrize("interpret", [True, False])
@pytest.mark.parametrize(
    "cls, fragment",
    [
        (WrongThreads, "spans 32 threads but the current thread group has 128"),
        (BadDivide, "is not a composition"),
        (WrongShape, r"shape \[16, 8\] differs from the tile's \[8, 16\]"),
        (BadRepeat, "needs one per dim"),
    ],
)
def test_front_end_refusals(cls, fragment, interpret):
    import re

    args = [np.zeros(128, np.float32)] if cls in (WrongThreads, BadDivide) else []
    with pytest.raises(tilus.TilusProgramError) as info:
        with tilus.option.scoped(interpret=interpret):
            cls()(*args)
    e = info.value
    assert e.loc is not None and e.loc.line == err_line(cls), str(e)
    assert re.search(fragment, e.msg), str(e)


# --- GPU ---------------------------------------------------------------------------------------


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("layout, smem", CASES)
def test_gpu_matches_the_interpreter(layout, smem):
    import torch

    x = torch.randn(13, 7, device="cuda")
    outs = [torch.from_numpy(o).cuda() for o in _outputs()]
    Annotated(layout, smem)(x, *outs)
    torch.cuda.synchronize()
    ref = _outputs()
    with tilus.option.scoped(interpret=True):
        Annotated(layout, smem)(x.cpu().numpy(), *ref)
    for got, want in zip(outs, ref):
        np.testing.assert_array_equal(got.cpu().numpy(), want)
