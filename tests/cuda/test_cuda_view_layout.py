"""``self.view(x, dtype=, layout=)``: the given layout pins the view's output, the source's
follows; interpreter vs NumPy, the CUDA code (NVRTC and the CPU emulator), located refusals."""

from __future__ import annotations

import numpy as np
import pytest

import tilus
from tests.cuda.conftest import needs_nvrtc
from tests.helpers_cpu_cuda import available, emulate
from tests.helpers_errors import err_line
from tilus import float16, float32, uint8
from tilus.backends.cuda.layout import infer_layouts
from tilus.ir.layout import local, same_layout, spatial
from tilus.tensor import decode, pack

needs_gxx = pytest.mark.skipif(not available(), reason="needs g++ for the CPU emulator")

#: rows i and i + 8 per thread, 8 int4 (one 32-bit word) of a row each: nothing else picks it
INT4 = local(2, 1).spatial(8, 4).local(1, 8)
#: the uint8 layout the view's source must then take (4 bytes = the same 32 bits)
BYTES = local(2, 1).spatial(8, 4).local(1, 4)
rng = np.random.default_rng()


@pytest.fixture(scope="module", autouse=True)
def _fresh_cache(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("TILUS_CACHE_DIR", str(tmp_path_factory.mktemp("tilus-cache")))
    yield
    mp.undo()


class ViewLayout(tilus.Script):
    """uint8 [m, n / 2] seen as int4b [m, n] in a given layout and cast to f16 (16 x 32 tiles)."""

    def __init__(self, layout):
        super().__init__()
        self.layout = layout

    def __call__(self, m: tilus.int32, n: tilus.int32, w_ptr: ~uint8, out_ptr: ~float16):
        self.attrs.blocks = [(m + 15) // 16, (n + 31) // 32]
        self.attrs.warps = 1
        gw = self.global_view(w_ptr, dtype=uint8, shape=[m, n // 2])
        go = self.global_view(out_ptr, dtype=float16, shape=[m, n])
        om, on = self.blockIdx.x * 16, self.blockIdx.y * 32
        raw = self.load_global(gw, offsets=[om, on // 2], shape=[16, 16])
        q = self.view(raw, dtype=tilus.int4b, layout=self.layout)
        self.store_global(go, self.cast(q, float16), offsets=[om, on])


def _case():
    m, n = 37, 70  # not multiples of the tile
    c = rng.integers(-8, 8, (m, n)).astype(np.int64)
    raw = pack(c & 0xF, 4).reshape(m, -1)
    want = decode(c & 0xF, tilus.int4b).astype(np.float16)
    return m, n, raw, np.full((m, n), np.nan, np.float16), want


def test_interpreter_against_numpy():
    m, n, raw, out, want = _case()
    with tilus.option.scoped(interpret=True):
        ViewLayout(INT4)(m, n, raw, out)
    np.testing.assert_array_equal(out, want)


def _plan(k):
    return infer_layouts(k.program(k.configs[0], {}).fn)


def _named(plan, name):
    (hit,) = [lay for t, lay in plan.registers.items() if t.name == name]
    return hit


def test_inference_takes_the_given_layout_and_derives_the_source():
    plan = _plan(ViewLayout(INT4))
    assert same_layout(_named(plan, "q"), INT4)
    assert same_layout(_named(plan, "raw"), BYTES)


@needs_nvrtc
def test_nvrtc_compiles_it():
    tilus.compile(ViewLayout(INT4), 37, 70, None, None, target="sm_90a")


@needs_nvrtc
@needs_gxx
def test_cuda_code_matches_on_the_emulator():
    m, n, raw, out, want = _case()
    emulate(ViewLayout(INT4), [m, n, raw, out], [3, 3])
    np.testing.assert_array_equal(out, want)


# --- refusals ----------------------------------------------------------------------------------


class SplitsBits(tilus.Script):
    """Each thread would hold one uint16 (16 bits): not a whole float32 of the source."""

    def __call__(self, x_ptr: ~float32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        g = self.global_view(x_ptr, dtype=float32, shape=[2, 8])
        a = self.load_global(g, offsets=[0, 0], shape=[2, 8])
        self.view(a, dtype=tilus.uint16, layout=spatial(2, 16))  # ERR


class ConflictsWithAUse(tilus.Script):
    """The source's layout is pinned to one the given view layout does not follow from."""

    def __call__(self, w_ptr: ~uint8, out_ptr: ~float16):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        gw = self.global_view(w_ptr, dtype=uint8, shape=[16, 16])
        go = self.global_view(out_ptr, dtype=float16, shape=[16, 32])
        raw = self.load_global(gw, offsets=[0, 0], shape=[16, 16])
        self.annotate_layout(raw, spatial(8, 4).local(2, 4))
        q = self.view(raw, dtype=tilus.int4b, layout=INT4)  # ERR
        self.store_global(go, self.cast(q, float16), offsets=[0, 0])


@pytest.mark.parametrize(
    "cls, args, fragment",
    [
        (ConflictsWithAUse, (None, None), "was given at"),
    ],
)
def test_cuda_refusals_at_the_view(cls, args, fragment):
    with pytest.raises(tilus.TilusCompileError) as info:
        tilus.compile(cls(), *args, target="sm_90a")
    assert info.value.loc.line == err_line(cls), str(info.value)
    assert fragment in info.value.msg, str(info.value)


class WrongShape(tilus.Script):
    def __call__(self, w_ptr: ~uint8):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        gw = self.global_view(w_ptr, dtype=uint8, shape=[16, 16])
        raw = self.load_global(gw, offsets=[0, 0], shape=[16, 16])
        self.view(raw, dtype=tilus.int4b, layout=BYTES)  # ERR


class WrongThreads(tilus.Script):
    def __call__(self, w_ptr: ~uint8):
        self.attrs.blocks = 1
        self.attrs.warps = 2
        gw = self.global_view(w_ptr, dtype=uint8, shape=[16, 16])
        raw = self.load_global(gw, offsets=[0, 0], shape=[16, 16])
        self.view(raw, dtype=tilus.int4b, layout=INT4)  # ERR


@pytest.mark.parametrize(
    "cls, fragment",
    [
        (WrongShape, "differs from the view's"),
        (WrongThreads, "spans 32 threads"),
        (SplitsBits, "does not keep each thread's bits"),
    ],
)
def test_front_end_refusals(cls, fragment):
    with pytest.raises(tilus.TilusProgramError, match=fragment) as info:
        with tilus.option.scoped(interpret=True):
            cls()(np.zeros((16, 16), np.float32 if cls is SplitsBits else np.uint8))
    assert info.value.loc.line == err_line(cls)
