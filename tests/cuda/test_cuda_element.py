"""CUDA backend element reads of register tiles spread over threads (a broadcast through a
shared word) and transposed register views as broadcast operands: compiled by NVRTC, run on
the CPU emulator against NumPy and the interpreter; refusals located."""

from __future__ import annotations

import numpy as np
import pytest

import tilus
from tests.cuda.conftest import needs_nvrtc
from tests.helpers_cpu_cuda import available, emulate
from tilus import float16, float32, int32

needs_gxx = pytest.mark.skipif(not available(), reason="needs g++ for the CPU emulator")


@pytest.fixture(scope="module", autouse=True)
def _fresh_cache(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("TILUS_CACHE_DIR", str(tmp_path_factory.mktemp("tilus-cache")))
    yield
    mp.undo()


class ElementRead(tilus.Script):
    """``y = x * x[1, 2] + x[i, j]`` (doubled when x[i, j] > 0), ``x[i, j]`` set to -1 first."""

    def __init__(self, bm, bn, warps):
        super().__init__()
        self.bm, self.bn, self.warps = bm, bn, warps

    def __call__(self, m: int32, n: int32, i: int32, j: int32, x_ptr: ~float32, y_ptr: ~float32):
        self.attrs.blocks = 1
        self.attrs.warps = self.warps
        bm, bn = self.bm, self.bn
        gx = self.global_view(x_ptr, dtype=float32, shape=[m, n])
        x = self.load_global(gx, offsets=[0, 0], shape=[bm, bn])
        a = x[1, 2]
        b = x[i, j]
        if b > 0.0:
            b = b * 2.0
        x[i, j] = -1.0
        y = x * a + b + (x[1, 2] - a) * x[0, 0]  # reads inside an elementwise instruction
        gy = self.global_view(y_ptr, dtype=float32, shape=[m, n])
        self.store_global(gy, y, offsets=[0, 0])


@needs_nvrtc
@needs_gxx
@pytest.mark.parametrize("bm, bn, warps, m, n", [(16, 64, 4, 13, 50), (8, 32, 1, 8, 29)])
def test_element_read_broadcast(bm, bn, warps, m, n):
    rng = np.random.default_rng()
    x = rng.standard_normal((m, n)).astype(np.float32)
    y = np.full((m, n), np.nan, np.float32)
    i, j = int(rng.integers(0, m)), int(rng.integers(0, n))
    emulate(ElementRead(bm, bn, warps), (m, n, i, j, x, y), [1])
    np.testing.assert_allclose(y, _reference(x, i, j), rtol=1e-6, atol=1e-6)
    yi = np.full_like(y, np.nan)
    with tilus.option.scoped(interpret=True):
        ElementRead(bm, bn, warps)(m, n, i, j, x, yi)
    np.testing.assert_allclose(y, yi, rtol=1e-6, atol=1e-6)


def _reference(x, i, j):
    b = x[i, j] * 2.0 if x[i, j] > 0 else x[i, j]
    w = x.copy()
    w[i, j] = -1.0
    return w * x[1, 2] + b + (w[1, 2] - x[1, 2]) * w[0, 0]


@pytest.mark.gpu
def test_element_read_broadcast_gpu():
    torch = pytest.importorskip("torch")
    m, n = 13, 50
    x = torch.randn(m, n, device="cuda")
    y = torch.full_like(x, float("nan"))
    ElementRead(16, 64, 4)(m, n, 11, 47, x, y)
    want = _reference(x.cpu().numpy(), 11, 47)
    np.testing.assert_allclose(y.cpu().numpy(), want, rtol=1e-6, atol=1e-6)


class ReadInWhile(tilus.Script):
    """Subtract 1 while ``x[i] > 0`` (at most 50 times): the condition reads an element of a
    tile spread over two warps, broadcast before each test."""

    def __call__(self, i: int32, x_ptr: ~float32):
        self.attrs.blocks = 1
        self.attrs.warps = 2
        g = self.global_view(x_ptr, dtype=float32, shape=[64])
        x = self.load_global(g, offsets=[0], shape=[64])
        k: int32 = 0
        while x[i] > 0.0 and k < 50:
            x = x - 1.0
            k = k + 1
        self.store_global(g, x, offsets=[0])


def _while_reference(x, i):
    y = x.copy()
    for _ in range(50):
        if not y[i] > 0:
            break
        y = y - np.float32(1)
    return y


@needs_nvrtc
@needs_gxx
def test_element_read_in_a_while_condition():
    rng = np.random.default_rng()
    x = rng.uniform(-3, 6, 64).astype(np.float32)
    i = int(np.argmax(x))  # a few iterations
    want = _while_reference(x, i)
    y = x.copy()
    emulate(ReadInWhile(), (i, y), [1])
    np.testing.assert_array_equal(y, want)
    yi = x.copy()
    with tilus.option.scoped(interpret=True):
        ReadInWhile()(i, yi)
    np.testing.assert_array_equal(yi, want)


@pytest.mark.gpu
def test_element_read_in_a_while_condition_gpu():
    torch = pytest.importorskip("torch")
    x = torch.rand(64, device="cuda") * 9 - 3
    i = int(torch.argmax(x))
    want = _while_reference(x.cpu().numpy(), i)
    ReadInWhile()(i, x)
    np.testing.assert_array_equal(x.cpu().numpy(), want)


class ReadInSubgroup(tilus.Script):
    def __call__(self, x_ptr: ~float32):
        self.attrs.blocks = 1
        self.attrs.warps = 2
        g = self.global_view(x_ptr, dtype=float32, shape=[64])
        x = self.load_global(g, offsets=[0], shape=[64])
        with self.single_thread():
            s = x[5]  # the element's owner is outside this thread's group
            self.printf("%f\n", s)


@needs_nvrtc
@pytest.mark.parametrize(
    "kernel, text",
    [
        (ReadInSubgroup, "s = x[5]"),
    ],
)
def test_element_read_refusals_name_the_users_line(kernel, text):
    with pytest.raises(tilus.TilusProgramError) as e:
        tilus.compile(kernel(), float32)
    msg = str(e.value)
    assert "test_cuda_element.py:" in msg and text in msg and "one element of %x" in msg, msg


class TransposedBroadcast(tilus.Script):
    """``y = x * transpose(c) + transpose(r)[0]``: ``c`` a [1, BM] row, seen as a [BM, 1]
    column; ``r`` a [BN, 1] column seen as a [1, BN] row."""

    def __init__(self, bm, bn, warps):
        super().__init__()
        self.bm, self.bn, self.warps = bm, bn, warps

    def __call__(self, m: int32, n: int32, x_ptr: ~float32, c_ptr: ~float32, r_ptr: ~float32,
                 y_ptr: ~float32):  # fmt: skip
        self.attrs.blocks = 1
        self.attrs.warps = self.warps
        bm, bn = self.bm, self.bn
        gx = self.global_view(x_ptr, dtype=float32, shape=[m, n])
        x = self.load_global(gx, offsets=[0, 0], shape=[bm, bn])
        c = self.load_global(self.global_view(c_ptr, dtype=float32, shape=[1, m]), offsets=[0, 0],
                             shape=[1, bm])  # fmt: skip
        r = self.load_global(self.global_view(r_ptr, dtype=float32, shape=[n, 1]), offsets=[0, 0],
                             shape=[bn, 1])  # fmt: skip
        y = x * self.transpose(c) + self.transpose(r)
        gy = self.global_view(y_ptr, dtype=float32, shape=[m, n])
        self.store_global(gy, y, offsets=[0, 0])


@needs_nvrtc
@needs_gxx
@pytest.mark.parametrize("bm, bn, warps, m, n", [(16, 64, 4, 13, 50), (32, 32, 2, 30, 17)])
def test_transposed_view_as_broadcast_operand(bm, bn, warps, m, n):
    rng = np.random.default_rng()
    x = rng.standard_normal((m, n)).astype(np.float32)
    c = rng.standard_normal(m).astype(np.float32)
    r = rng.standard_normal(n).astype(np.float32)
    y = np.full((m, n), np.nan, np.float32)
    emulate(TransposedBroadcast(bm, bn, warps), (m, n, x, c, r, y), [1])
    np.testing.assert_allclose(y, x * c[:, None] + r[None, :], rtol=1e-6, atol=1e-6)
    yi = np.full_like(y, np.nan)
    with tilus.option.scoped(interpret=True):
        TransposedBroadcast(bm, bn, warps)(m, n, x, c, r, yi)
    np.testing.assert_allclose(y, yi, rtol=1e-6, atol=1e-6)


class SquareDot(tilus.Script):
    """``y = x @ x``: the one tile is both mma operands, whose fixed layouts differ; the B
    operand is a copy converted through shared memory at the dot."""

    def __call__(self, n: int32, x_ptr: ~float16, y_ptr: ~float32):
        self.attrs.blocks = 1
        self.attrs.warps = 4
        gx = self.global_view(x_ptr, dtype=float16, shape=[n, n])
        x = self.load_global(gx, offsets=[0, 0], shape=[32, 32])
        y = self.dot(x, x, acc_dtype=float32)
        self.store_global(self.global_view(y_ptr, dtype=float32, shape=[n, n]), y, offsets=[0, 0])


@needs_nvrtc
def test_one_tile_in_two_fixed_layouts_compiles_with_a_conversion():
    ck = tilus.compile(SquareDot(), 30, float16, float32)
    assert "through shared memory" in ck.source and "x_cv" in ck.source, ck.source


@pytest.mark.gpu
def test_one_tile_in_two_fixed_layouts_gpu():
    torch = pytest.importorskip("torch")
    n = 30
    x = torch.randn(n, n, device="cuda").half()
    y = torch.full((n, n), float("nan"), device="cuda")
    SquareDot()(n, x, y)
    want = x.float() @ x.float()
    torch.testing.assert_close(y, want, rtol=2e-3, atol=2e-3)
