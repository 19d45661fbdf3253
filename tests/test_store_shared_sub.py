"""``store_shared(offsets=, dims=)``: a register tile into part of a shared tile (elements
outside it skipped) on the interpreter and, through the CPU emulator, in the CUDA backend's
code; disjoint parts stored by two groups do not race; bad arguments refused at their line;
and the ``out=`` forms of ``load_global``, ``squeeze``/``unsqueeze`` and ``flatten``."""

from __future__ import annotations

import numpy as np
import pytest

import tilus
from tests.cuda.conftest import needs_gpu, needs_nvrtc
from tests.helpers_cpu_cuda import available, emulate
from tilus import float32, int32
from tilus.testing import marker_line

needs_gxx = pytest.mark.skipif(not available(), reason="needs g++ for the CPU emulator")


class SubTiles(tilus.Script):
    """Shared s [16, 32] filled with -1, then x's rows 0-7 stored at rows r0.. (the part
    outside s skipped), x's row 9 into row r1 (dims=[1]) and x's rows 8-9 at the constant
    offset [14, 16] columns 16-31 of rows 14-15 (dims of both); y = s."""

    def __init__(self, warps=4):
        super().__init__()
        self.warps = warps

    def __call__(self, r0: int32, r1: int32, x_ptr: ~float32, y_ptr: ~float32):
        self.attrs.blocks = 1
        self.attrs.warps = self.warps
        gx = self.global_view(x_ptr, dtype=float32, shape=[16, 32])
        gy = self.global_view(y_ptr, dtype=float32, shape=[16, 32])
        s = self.shared_tensor(dtype=float32, shape=[16, 32])
        self.store_shared(s, self.register_tensor(dtype=float32, shape=[16, 32], init=-1.0))
        self.sync()  # a group's stores spread over its threads: sync() between overlapping ones
        top = self.load_global(gx, offsets=[0, 0], shape=[8, 32])
        self.store_shared(s, top, offsets=[r0, 0])
        self.sync()  # the parts may overlap: each store's elements by other threads
        row = self.load_global(gx, offsets=[9, 0], shape=[32], dims=[1])
        self.store_shared(s, row, offsets=[r1, 0], dims=[1])
        self.sync()
        corner = self.load_global(gx, offsets=[8, 0], shape=[2, 16])
        self.store_shared(s, corner, offsets=[14, 16])
        self.sync()
        self.store_global(gy, self.load_shared(s), offsets=[0, 0])


def _reference(x, r0, r1):
    y = np.full((16, 32), -1.0, np.float32)
    for i in range(8):
        if 0 <= r0 + i < 16:
            y[r0 + i] = x[i]
    if 0 <= r1 < 16:
        y[r1] = x[9]
    y[14:16, 16:32] = x[8:10, 0:16]
    return y


CASES = [(4, 13), (12, 2), (-3, 20), (0, -1)]


@pytest.mark.parametrize("r0, r1", CASES)
def test_interpreter(r0, r1):
    x = np.random.default_rng().standard_normal((16, 32)).astype(np.float32)
    y = np.full((16, 32), np.nan, np.float32)
    with tilus.option.scoped(interpret=True):
        SubTiles()(r0, r1, x, y)
    np.testing.assert_array_equal(y, _reference(x, r0, r1))


@needs_nvrtc
@needs_gxx
@pytest.mark.parametrize("r0, r1", CASES)
def test_cuda_code_on_the_cpu_emulator(r0, r1):
    x = np.random.default_rng().standard_normal((16, 32)).astype(np.float32)
    y = np.full((16, 32), np.nan, np.float32)
    ck = emulate(SubTiles(), (r0, r1, x, y), [1])
    np.testing.assert_array_equal(y, _reference(x, r0, r1))
    # the constant offsets keep their tile inside: no bounds check for that store alone
    assert "if (" not in _statement_code(ck.source, "corner, offsets=[14, 16]")
    assert "if (" in _statement_code(ck.source, "top, offsets=[r0, 0]")


def _statement_code(source: str, marker: str) -> str:
    """The generated code of the statement whose source comment holds ``marker``."""
    start = source.index(marker)
    return source[start : source.index("// test_store_shared_sub.py:", start)]


class Halves(tilus.Script):
    """Two warps each store their own half of a shared tile (disjoint: no race), or with
    ``overlap`` the second one's rows 7-14 (one row shared with the first's)."""

    def __init__(self, overlap=False):
        super().__init__()
        self.overlap = overlap

    def __call__(self, x_ptr: ~float32, y_ptr: ~float32):
        self.attrs.blocks = 1
        self.attrs.warps = 2
        gx = self.global_view(x_ptr, dtype=float32, shape=[16, 32])
        gy = self.global_view(y_ptr, dtype=float32, shape=[16, 32])
        s = self.shared_tensor(dtype=float32, shape=[16, 32])
        with self.thread_group(0, 32):
            a = self.load_global(gx, offsets=[0, 0], shape=[8, 32])
            self.store_shared(s, a, offsets=[0, 0])
        with self.thread_group(32, 32):
            b = self.load_global(gx, offsets=[8, 0], shape=[8, 32])
            self.store_shared(s, b, offsets=[7 if self.overlap else 8, 0])  # CHECK:race
        self.sync()
        self.store_global(gy, self.load_shared(s), offsets=[0, 0])


def test_disjoint_parts_by_two_groups_do_not_race_and_overlapping_ones_do():
    x = np.random.default_rng().standard_normal((16, 32)).astype(np.float32)
    y = np.full((16, 32), np.nan, np.float32)
    with tilus.option.scoped(interpret=True):
        Halves()(x, y)
    np.testing.assert_array_equal(y, x)
    with tilus.option.scoped(interpret=True), pytest.raises(tilus.TilusRuntimeError) as info:
        Halves(overlap=True)(x, y)
    assert "race" in str(info.value)
    assert info.value.loc.line == marker_line(Halves, "CHECK:race")


class Bad(tilus.Script):
    def __init__(self, case):
        super().__init__()
        self.case = case

    def __call__(self, x_ptr: ~float32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        s = self.shared_tensor(dtype=float32, shape=[16, 32])
        t = self.register_tensor(dtype=float32, shape=[32], init=1.0)
        if self.case == "rank":
            self.store_shared(s, t, offsets=[0, 0])  # CHECK:rank
        elif self.case == "order":
            u = self.register_tensor(dtype=float32, shape=[4, 8], init=1.0)
            self.store_shared(s, u, offsets=[0, 0], dims=[1, 0])  # CHECK:order
        elif self.case == "big":
            u = self.register_tensor(dtype=float32, shape=[4, 64], init=1.0)
            self.store_shared(s, u, offsets=[0, 0])  # CHECK:big
        else:
            u = self.register_tensor(dtype=float32, shape=[4, 8], init=1.0)
            self.store_shared(s, u, offsets=[0])  # CHECK:offsets


@pytest.mark.parametrize(
    "case, what",
    [("rank", "needs dims="), ("order", "increasing order"), ("big", "is larger than"),
     ("offsets", "has 1 entries")],
)  # fmt: skip
def test_bad_arguments_are_refused_at_their_line(case, what):
    x = np.zeros(4, np.float32)
    with tilus.option.scoped(interpret=True), pytest.raises(tilus.TilusProgramError) as info:
        Bad(case)(x)
    assert what in str(info.value)
    assert info.value.loc.line == marker_line(Bad, f"CHECK:{case}")


class OutForms(tilus.Script):
    """``out=`` of load_global, squeeze, unsqueeze and flatten: y = [x row 0, x row 0, x]."""

    def __call__(self, x_ptr: ~float32, y_ptr: ~float32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        gx = self.global_view(x_ptr, dtype=float32, shape=[2, 16])
        gy = self.global_view(y_ptr, dtype=float32, shape=[64])
        a = self.register_tensor(dtype=float32, shape=[1, 16])
        self.load_global(gx, offsets=[0, 0], shape=[1, 16], out=a)
        b = self.register_tensor(dtype=float32, shape=[16])
        self.squeeze(a, dim=0, out=b)
        c = self.register_tensor(dtype=float32, shape=[1, 16])
        self.unsqueeze(b, dim=0, out=c)
        d = self.register_tensor(dtype=float32, shape=[32])
        self.flatten(self.load_global(gx, offsets=[0, 0], shape=[2, 16]), out=d)
        self.store_global(gy, b, offsets=[0])
        self.store_global(gy, self.flatten(c), offsets=[16])
        self.store_global(gy, d, offsets=[32])


def test_out_forms():
    x = np.random.default_rng().standard_normal((2, 16)).astype(np.float32)
    y = np.full(64, np.nan, np.float32)
    with tilus.option.scoped(interpret=True):
        OutForms()(x, y)
    np.testing.assert_array_equal(y, np.concatenate([x[0], x[0], x.reshape(-1)]))


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("r0, r1", CASES)
def test_on_the_gpu(r0, r1):
    import torch

    x = torch.randn(16, 32, device="cuda")
    y = torch.full((16, 32), float("nan"), device="cuda")
    SubTiles()(r0, r1, x, y)
    np.testing.assert_array_equal(y.cpu().numpy(), _reference(x.cpu().numpy(), r0, r1))
