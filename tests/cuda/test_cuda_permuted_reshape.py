"""A reshape of a permuted register view: the CUDA backend reshapes the view (the source's
registers, dims permuted) in place; interpreter and CPU-emulated CUDA code against NumPy."""

from __future__ import annotations

import numpy as np
import pytest

import tilus
from tests.cuda.conftest import needs_nvrtc
from tests.helpers_cpu_cuda import available, emulate
from tilus import float32
from tilus.backends.cuda.layout import infer_layouts
from tilus.ir.layout import spatial

needs_gxx = pytest.mark.skipif(not available(), reason="needs g++ for the CPU emulator")

#: lane t holds x[t // 4, t % 4, 0:4]
SRC = spatial(8, 4, 1).local(1, 1, 4)


@pytest.fixture(scope="module", autouse=True)
def _fresh_cache(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("TILUS_CACHE_DIR", str(tmp_path_factory.mktemp("tilus-cache")))
    yield
    mp.undo()


class PermuteReshape(tilus.Script):
    """x [8, 4, 4] loaded one 16-byte row a lane, seen as [4, 8 * 4] (dims (2, 0, 1)), times 2
    (an elementwise use of the reshaped view), stored."""

    def __call__(self, x_ptr: ~float32, y_ptr: ~float32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        gx = self.global_view(x_ptr, dtype=float32, shape=[8, 4, 4])
        gy = self.global_view(y_ptr, dtype=float32, shape=[4, 32])
        x = self.load_global(gx, offsets=[0, 0, 0], shape=[8, 4, 4])
        self.annotate_layout(x, SRC)
        y = self.reshape(x.permute(2, 0, 1), [4, 32])
        self.store_global(gy, y * 2.0, offsets=[0, 0])


def _case():
    x = np.random.default_rng().standard_normal((8, 4, 4)).astype(np.float32)
    return x, np.full((4, 32), np.nan, np.float32), 2 * np.transpose(x, (2, 0, 1)).reshape(4, 32)


def test_interpreter_against_numpy():
    x, y, want = _case()
    with tilus.option.scoped(interpret=True):
        PermuteReshape()(x, y)
    np.testing.assert_array_equal(y, want)


def test_the_reshape_keeps_every_register():
    from tilus.backends.cuda.codegen.kernel import generate

    k = PermuteReshape()
    prog = k.program(k.configs[0], {})
    (got,) = [lay for t, lay in infer_layouts(prog.fn).registers.items() if t.name == "y"]
    assert got.local_size == 4 and got.num_threads == 32
    assert "tl_smem_ptr +" not in generate(prog).source  # no register goes through shared


@needs_nvrtc
@needs_gxx
def test_cuda_code_matches_on_the_emulator():
    x, y, want = _case()
    emulate(PermuteReshape(), [x, y], [1, 1])
    np.testing.assert_array_equal(y, want)


def _permuted(perm, annotate):
    """x [8, 4, 4] permuted by ``perm`` and reshaped to 2-D, times 2: in place where the
    layout allows it, else through the backend's conversion."""
    shape = [[8, 4, 4][d] for d in perm]
    out = [shape[0], shape[1] * shape[2]]

    class Permuted(tilus.Script):
        def __call__(self, x_ptr: ~float32, y_ptr: ~float32):
            self.attrs.blocks = 1
            self.attrs.warps = 1
            gx = self.global_view(x_ptr, dtype=float32, shape=[8, 4, 4])
            gy = self.global_view(y_ptr, dtype=float32, shape=out)
            x = self.load_global(gx, offsets=[0, 0, 0], shape=[8, 4, 4])
            if annotate:
                self.annotate_layout(x, SRC)
            self.store_global(gy, self.reshape(x.permute(*perm), out) * 2.0, offsets=[0, 0])

    return Permuted(), out


@needs_nvrtc
@needs_gxx
@pytest.mark.parametrize("perm", [(1, 0, 2), (0, 2, 1), (2, 1, 0)])
@pytest.mark.parametrize("annotate", [True, False])
def test_every_permutation_on_the_emulator(perm, annotate):
    kernel, out = _permuted(perm, annotate)
    x = np.random.default_rng().standard_normal((8, 4, 4)).astype(np.float32)
    y = np.full(out, np.nan, np.float32)
    emulate(kernel, [x, y], [1, 1])
    np.testing.assert_array_equal(y, 2 * np.transpose(x, perm).reshape(out))


class RenamedRegisters(tilus.Script):
    """x [32, 2, 2] a lane's four elements, permuted to [32, b, a] and reshaped to [32, 4] in
    the standard lane-a-row layout: every element stays in its lane, in another register."""

    def __call__(self, x_ptr: ~float32, y_ptr: ~float32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        gx = self.global_view(x_ptr, dtype=float32, shape=[32, 2, 2])
        gy = self.global_view(y_ptr, dtype=float32, shape=[32, 4])
        x = self.load_global(gx, offsets=[0, 0, 0], shape=[32, 2, 2])
        self.annotate_layout(x, spatial(32, 1, 1).local(1, 2, 2))
        y = self.reshape(x.permute(0, 2, 1), [32, 4])
        self.annotate_layout(y, spatial(32, 1).local(1, 4))  # register j: y[lane, j]
        self.store_global(gy, y * 2.0, offsets=[0, 0])


def test_a_reshape_that_keeps_each_element_in_its_thread_renames_registers():
    from tilus.backends.cuda.codegen.kernel import generate

    k = RenamedRegisters()
    src = generate(k.program(k.configs[0], {})).source
    assert "tl_smem_ptr +" not in src  # no register goes through shared memory
    i = src.index("the same registers in another order")
    # y[lane, 2 b + a] = x[lane, a, b]: registers 1 and 2 trade places
    assert src[i:].split("\n")[1:5] == [f"  y_1[{j}] = x[{p}];" for j, p in enumerate((0, 2, 1, 3))]


@needs_nvrtc
@needs_gxx
def test_renamed_registers_on_the_emulator():
    x = np.random.default_rng().standard_normal((32, 2, 2)).astype(np.float32)
    y = np.full((32, 4), np.nan, np.float32)
    emulate(RenamedRegisters(), [x, y], [1, 1])
    np.testing.assert_array_equal(y, 2 * np.transpose(x, (0, 2, 1)).reshape(32, 4))
    y2 = np.full((32, 4), np.nan, np.float32)
    with tilus.option.scoped(interpret=True):
        RenamedRegisters()(x, y2)
    np.testing.assert_array_equal(y2, y)
