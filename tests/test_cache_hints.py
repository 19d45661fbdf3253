"""``load_global`` / ``store_global`` ``cache=``: validated, ignored by the interpreter, lowered."""

from __future__ import annotations

import numpy as np
import pytest

import tilus
from tests.cuda.conftest import needs_nvrtc
from tests.helpers_errors import expect_error
from tilus import float16, int32, uint8
from tilus.utils import cdiv


class Scale(tilus.Script):
    """``y = 2 x`` over [m, n] fp16, [8, 64] tiles a block, with the given cache hints."""

    def __init__(self, load=None, store=None):
        super().__init__()
        self.load, self.store = load, store

    def __call__(self, m: int32, n: int32, x_ptr: ~float16, y_ptr: ~float16):
        self.attrs.blocks = [cdiv(m, 8), cdiv(n, 64)]
        self.attrs.warps = 2
        gx = self.global_view(x_ptr, dtype=float16, shape=[m, n])
        gy = self.global_view(y_ptr, dtype=float16, shape=[m, n])
        r, c = self.blockIdx.x * 8, self.blockIdx.y * 64
        x = self.load_global(gx, offsets=[r, c], shape=[8, 64], cache=self.load)
        self.store_global(gy, x + x, offsets=[r, c], cache=self.store)


PAIRS = [
    ("evict_first", "evict_first"),
    ("evict_last", "evict_last"),
    ("no_allocate", "stream"),
    (None, "stream"),
    ("evict_first", None),
]


def _xy(m, n, device=None):
    x = np.random.default_rng().standard_normal((m, n)).astype(np.float16)
    y = np.full((m, n), np.nan, np.float16)
    if device is None:
        return x, y
    import torch

    return torch.from_numpy(x).to(device), torch.from_numpy(y).to(device)


def test_the_interpreter_ignores_the_hints():
    m, n = 13, 100  # ragged: tails on both dims
    for load, store in PAIRS:
        x, y = _xy(m, n)
        Scale(load, store)(m, n, x, y)
        np.testing.assert_array_equal(y, x + x)


def _ir(kernel) -> str:
    from tilus.ir.printer import print_ir

    (_, prog), *_ = kernel.runnable_programs({}, False)
    return print_ir(prog.fn)


def test_printed_only_when_set():
    plain, hinted = _ir(Scale()), _ir(Scale("evict_last", "stream"))
    assert "cache" not in plain
    assert "cache='evict_last'" in hinted and "cache='stream'" in hinted


class BadLoad(tilus.Script):
    def __call__(self, x_ptr: ~float16):
        self.attrs.blocks = [1]
        self.attrs.warps = 1
        gx = self.global_view(x_ptr, dtype=float16, shape=[64])
        self.load_global(gx, offsets=[0], shape=[64], cache="stream")  # ERR


class BadStore(tilus.Script):
    def __call__(self, x_ptr: ~float16):
        self.attrs.blocks = [1]
        self.attrs.warps = 1
        gx = self.global_view(x_ptr, dtype=float16, shape=[64])
        x = self.load_global(gx, offsets=[0], shape=[64])
        self.store_global(gx, x, offsets=[0], cache="no_allocate")  # ERR


class SubByte(tilus.Script):
    def __call__(self, x_ptr: ~uint8):
        self.attrs.blocks = [1]
        self.attrs.warps = 1
        gx = self.global_view(x_ptr, dtype=tilus.uint4b, shape=[64])
        self.load_global(gx, offsets=[0], shape=[64], cache="evict_first")  # ERR


def test_bad_hints_name_the_line():
    expect_error(BadLoad, fragment="cache must be one of 'evict_first', 'evict_last'")
    expect_error(BadStore, fragment="cache must be one of .*'stream'")
    expect_error(SubByte, fragment="whole bytes")


@needs_nvrtc
@pytest.mark.parametrize("load, store", PAIRS)
def test_lowered_to_the_ptx_forms(load, store):
    ck = tilus.compile(Scale(load, store), 13, 100, None, None, target="sm_90a")
    src = ck.source
    if load is not None:
        assert f"tl_ld_{load}_v" in src
    if store is not None:
        assert f"tl_st_{store}_v" in src
    assert ("createpolicy" in src) == ("evict" in f"{load}{store}")
    assert "LDG" in ck.sass() and "STG" in ck.sass()


@pytest.mark.gpu
def test_gpu_hints_change_no_result():
    from tests.cuda.conftest import _gpu_available

    if not _gpu_available():
        pytest.skip("needs torch with a Hopper GPU")
    for load, store in PAIRS:
        for m, n in ((13, 100), (64, 256), (7, 1)):
            x, y = _xy(m, n, "cuda")
            Scale(load, store)(m, n, x, y)
            assert not y.isnan().any()
            assert (y.float() == 2 * x.float()).all(), (load, store, m, n)
