"""Layout conversions at wgmma: an mma.sync result as the register A operand (converted to the
A fragment just before the wgmma, then fenced), and a wgmma accumulator combined with a tile of
another fixed layout (the operand converted at the elementwise op). Interpreter against NumPy,
NVRTC compile-only and the layout dump on CPU; the GPU tests compare with the interpreter."""

from __future__ import annotations

import numpy as np
import pytest

import tilus
from tests.cuda.conftest import needs_nvrtc
from tests.helpers_errors import err_line
from tilus import float16, float32
from tilus.backends.cuda.layout import infer_layouts
from tilus.backends.cuda.layout.report import layout_report


@pytest.fixture(scope="module", autouse=True)
def _fresh_cache(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("TILUS_CACHE_DIR", str(tmp_path_factory.mktemp("tilus-cache")))
    yield
    mp.undo()


def _smem(self, g, shape):
    s = self.shared_tensor(dtype=float16, shape=shape)
    self.store_shared(s, self.load_global(g, offsets=[0, 0], shape=shape))
    return s


class DotIntoWgmma(tilus.Script):
    """c = (x @ y) @ b^T: the float16 mma.sync result [64, 32] is the wgmma's A operand."""

    def __call__(self, x_ptr: ~float16, y_ptr: ~float16, b_ptr: ~float16, c_ptr: ~float32):
        self.attrs.blocks = 1
        self.attrs.warps = 4
        gx = self.global_view(x_ptr, dtype=float16, shape=[64, 16])
        gy = self.global_view(y_ptr, dtype=float16, shape=[16, 32])
        x = self.load_global(gx, offsets=[0, 0], shape=[64, 16])
        y = self.load_global(gy, offsets=[0, 0], shape=[16, 32])
        a = self.dot(x, y, self.register_tensor(dtype=float16, shape=[64, 32], init=0.0))
        sb = _smem(self, self.global_view(b_ptr, dtype=float16, shape=[48, 32]), [48, 32])
        self.fence.proxy_async()
        self.sync()
        acc = self.register_tensor(dtype=float32, shape=[64, 48], init=0.0)
        self.wgmma.fence()
        self.wgmma.mma(a, sb.transpose(), acc)  # CONVERT
        self.wgmma.commit_group()
        self.wgmma.wait_group(0)
        self.store_global(
            self.global_view(c_ptr, dtype=float32, shape=[64, 48]), acc, offsets=[0, 0]
        )


class AccPlusDot(tilus.Script):
    """c = sa @ sb^T + x @ y: a wgmma accumulator plus an mma.sync result (each in its fixed
    layout; the mma result is converted at the addition)."""

    def __call__(self, x_ptr: ~float16, y_ptr: ~float16, b_ptr: ~float16, c_ptr: ~float32):
        self.attrs.blocks = 1
        self.attrs.warps = 4
        gx = self.global_view(x_ptr, dtype=float16, shape=[64, 16])
        gy = self.global_view(y_ptr, dtype=float16, shape=[16, 32])
        x = self.load_global(gx, offsets=[0, 0], shape=[64, 16])
        y = self.load_global(gy, offsets=[0, 0], shape=[16, 32])
        d = self.dot(x, y, acc_dtype=float32)
        sa = _smem(self, gx, [64, 16])
        sb = _smem(self, self.global_view(b_ptr, dtype=float16, shape=[32, 16]), [32, 16])
        self.fence.proxy_async()
        self.sync()
        acc = self.register_tensor(dtype=float32, shape=[64, 32], init=0.0)
        self.wgmma.fence()
        self.wgmma.mma(sa, sb.transpose(), acc)
        self.wgmma.commit_group()
        self.wgmma.wait_group(0)
        c = acc + d * 0.5  # CONVERT
        self.store_global(self.global_view(c_ptr, dtype=float32, shape=[64, 32]), c, offsets=[0, 0])


class InPlaceTwice(tilus.Script):
    """One tile as an mma.sync accumulator and then a wgmma accumulator: refused."""

    def __call__(self, x_ptr: ~float16, c_ptr: ~float32):
        self.attrs.blocks = 1
        self.attrs.warps = 4
        gx = self.global_view(x_ptr, dtype=float16, shape=[64, 16])
        x = self.load_global(gx, offsets=[0, 0], shape=[64, 16])
        y = self.load_global(gx, offsets=[0, 0], shape=[16, 32])
        acc = self.dot(x, y, acc_dtype=float32)
        sa = _smem(self, gx, [64, 16])
        sb = _smem(self, gx, [32, 16])
        self.fence.proxy_async()
        self.sync()
        self.wgmma.fence()
        self.wgmma.mma(sa, sb.transpose(), acc)  # ERR
        self.wgmma.commit_group()
        self.wgmma.wait_group(0)
        self.store_global(
            self.global_view(c_ptr, dtype=float32, shape=[64, 32]), acc, offsets=[0, 0]
        )


def _inputs(bn):
    rng = np.random.default_rng()
    x = rng.standard_normal((64, 16)).astype(np.float16)
    y = rng.standard_normal((16, 32)).astype(np.float16)
    b = rng.standard_normal((bn, 32 if bn == 48 else 16)).astype(np.float16)
    return x, y, b, np.full((64, bn), np.nan, np.float32)


def _f32(a):
    return a.astype(np.float32)


def _want(kernel, x, y, b):
    if kernel is DotIntoWgmma:
        return _f32(_f32(_f32(x) @ _f32(y)).astype(np.float16)) @ _f32(b).T
    return _f32(x) @ _f32(b).T + (_f32(x) @ _f32(y)) * 0.5


def _line(cls, mark: str) -> int:
    import inspect

    lines, first = inspect.getsourcelines(cls)
    return first + next(i for i, t in enumerate(lines) if f"# {mark}" in t)


@pytest.mark.parametrize("kernel, bn", [(DotIntoWgmma, 48), (AccPlusDot, 32)])
def test_interpreter_reference(kernel, bn):
    x, y, b, c = _inputs(bn)
    with tilus.option.scoped(interpret=True):
        kernel()(x, y, b, c)
    np.testing.assert_allclose(c, _want(kernel, x, y, b), rtol=2e-3, atol=2e-2)


@needs_nvrtc
@pytest.mark.parametrize("kernel, bn", [(DotIntoWgmma, 48), (AccPlusDot, 32)])
def test_the_conversion_compiles_and_the_dump_says_where(kernel, bn):
    args = _inputs(bn)
    ck = tilus.compile(kernel(), *args)
    src = ck.source
    line = _line(kernel, "CONVERT")
    assert "(mma_c) -> %" in src and "(wgmma_acc) through shared memory" in src
    if kernel is DotIntoWgmma:  # the A registers are written after the user's fence: fence
        body = src[src.index("wgmma.mma(a, sb.transpose(), acc)") :]
        assert body.index("tl_wgmma_fence();") < body.index("_rs(")
    const_args, _ = kernel().bind(args, {})
    fn = kernel().program(kernel().configs[0] if kernel().configs else None, const_args).fn
    report = layout_report(fn, infer_layouts(fn))
    assert f"line {line}: %" in report and "(mma_c) copied into wgmma_acc" in report, report


@needs_nvrtc
def test_a_tile_written_in_place_in_two_layouts_is_refused_at_the_line():
    with pytest.raises(tilus.TilusCompileError) as e:
        tilus.compile(
            InPlaceTwice(), np.zeros((64, 16), np.float16), np.zeros((64, 32), np.float32)
        )
    msg = str(e.value)
    assert "two different register layouts" in msg and "the wgmma accumulator of [64, 32]" in msg
    assert "mma.sync accumulator" in msg and "give each its own tile" in msg, msg
    assert e.value.loc.line == err_line(InPlaceTwice), msg


@pytest.mark.gpu
@pytest.mark.parametrize("kernel, bn", [(DotIntoWgmma, 48), (AccPlusDot, 32)])
def test_conversions_at_wgmma_on_the_gpu(kernel, bn):
    torch = pytest.importorskip("torch")
    x, y, b, c = _inputs(bn)
    with tilus.option.scoped(interpret=True):
        kernel()(x, y, b, c)
    dev = [torch.from_numpy(a).cuda() for a in (x, y, b)]
    out = torch.full((64, bn), float("nan"), device="cuda")
    kernel()(*dev, out)
    diff = np.abs(out.cpu().numpy() - c)
    tol = _gpu_tolerance(kernel, x, y, b, c)
    assert np.all(diff <= tol), f"max excess {np.max(diff - tol):.3g} over the tolerance"


def _gpu_tolerance(kernel, x, y, b, c):
    """The GPU's result against the interpreter's, element by element. DotIntoWgmma's
    intermediate ``x @ y`` is an fp16 tile accumulated in fp16, so the tensor cores (another
    order of the sums) may round an element of it one fp16 ulp away from the interpreter, and
    that ulp reaches ``c`` through ``b``: allow it on top of the float32 tolerance."""
    tol = 1e-3 + 1e-3 * np.abs(c)
    if kernel is DotIntoWgmma:
        a = (x.astype(np.float64) @ y.astype(np.float64)).astype(np.float16)
        ulp = np.spacing(np.abs(a)).astype(np.float64)
        tol = tol + ulp @ np.abs(b.astype(np.float64)).T
    return tol
