"""16-bit float elementwise ``* + -`` two at a time (f16x2 / bf16x2) and fp16-accumulating sums
on the CUDA backend without a GPU: bit-identical to the interpreter on the CPU emulator (odd
register counts, broadcast and scalar operands, in place), and HMUL2/HADD2 on pairs in SASS."""

from __future__ import annotations

import numpy as np
import pytest

import tilus
from tests.cuda.conftest import needs_nvrtc
from tests.helpers_cpu_cuda import available, emulate
from tilus import bfloat16, float16, void_p
from tilus.ir.layout import spatial
from tilus.testing import marker_line

needs_gxx = pytest.mark.skipif(not available(), reason="needs g++ for the CPU emulator")


class HalfArith(tilus.Script):
    """``y = (a * b + c[row]) - 0.75`` on an [rows, cols] tile (``c`` broadcast along the row),
    then ``y = y * y`` in place, in ``dtype``."""

    def __init__(self, dtype, rows, cols, threads=32):
        super().__init__()
        self.dtype, self.rows, self.cols, self.threads = dtype, rows, cols, threads

    def __call__(self, a_ptr: void_p, b_ptr: void_p, c_ptr: void_p, y_ptr: void_p):
        dt, r, c = self.dtype, self.rows, self.cols
        self.attrs.blocks = [1]
        self.attrs.warps = self.threads // 32
        ga = self.global_view(a_ptr, dtype=dt, shape=[r, c])
        gb = self.global_view(b_ptr, dtype=dt, shape=[r, c])
        gc = self.global_view(c_ptr, dtype=dt, shape=[r, 1])
        gy = self.global_view(y_ptr, dtype=dt, shape=[r, c])
        a = self.load_global(ga, offsets=[0, 0], shape=[r, c])
        b = self.load_global(gb, offsets=[0, 0], shape=[r, c])
        cc = self.load_global(gc, offsets=[0, 0], shape=[r, 1])
        y = a * b + cc - 0.75
        self.assign(y, y * y)
        self.store_global(gy, y, offsets=[0, 0])


def _inputs(rng, dt, r, c):
    """Random 16-bit words of ``dt`` values (a, b, c) and a NaN-poisoned output."""

    def rand(*shape):
        v = (rng.standard_normal(shape) * 3).astype(np.float32)
        if dt == float16:
            return v.astype(np.float16).view(np.uint16)
        return (v.view(np.uint32) >> 16).astype(np.uint16)

    nan = 0x7E00 if dt == float16 else 0x7FC0
    return rand(r, c), rand(r, c), rand(r, 1), np.full((r, c), nan, np.uint16)


@needs_nvrtc
@needs_gxx
@pytest.mark.parametrize(
    "dt, rows, cols",  # 3, 35/32 (an odd count), 64 a thread
    [(float16, 8, 12), (float16, 5, 7), (bfloat16, 5, 7), (bfloat16, 32, 64)],
    ids=str,
)
def test_pairs_match_the_interpreter_bit_for_bit(dt, rows, cols):
    rng = np.random.default_rng()
    a, b, c, y = _inputs(rng, dt, rows, cols)
    kernel = HalfArith(dt, rows, cols)
    ck = emulate(kernel, (a, b, c, y), [1])
    want = np.full_like(y, 0x7E00)
    import torch

    tdt = torch.float16 if dt == float16 else torch.bfloat16
    with tilus.option.scoped(interpret=True):  # torch views of the words: typed for it
        kernel(*(torch.from_numpy(v).view(tdt) for v in (a, b, c, want)))
    assert not (y == y[0, 0] * 0 + 0x7E00).all()
    np.testing.assert_array_equal(y, want)
    assert ("tl_bmul_pair" if dt == bfloat16 else "tl_hmul_pair") in ck.source


@needs_nvrtc
def test_fp16_products_are_hmul2_on_pairs():
    from tilus.runtime.sass import sass_opcodes

    a = np.ones((32, 64), np.uint16)
    ck = tilus.compile(HalfArith(float16, 32, 64), a, a, a[:, :1].copy(), a)
    ops = sass_opcodes(ck.sass())
    # 64 elements a thread: (a * b, + c, - 0.75, y * y) = 4 ops of 32 pairs, none one at a time
    f16 = ops.get("HMUL2", 0) + ops.get("HADD2", 0) + ops.get("HFMA2", 0)
    assert f16 <= 4 * 32 + 8, ops


class HalfSum(tilus.Script):
    """``y[r] = sum(x[r, :])`` of a [32, cols] tile accumulated in ``dtype``: each thread's
    row in its registers (``local``) or a row spread over the lanes and warps."""

    def __init__(self, dtype, cols, local_rows):
        super().__init__()
        self.dtype, self.cols, self.local_rows = dtype, cols, local_rows

    def __call__(self, x_ptr: void_p, y_ptr: void_p):
        dt, c = self.dtype, self.cols
        self.attrs.blocks = [1]
        self.attrs.warps = 1 if self.local_rows else 4
        gx = self.global_view(x_ptr, dtype=dt, shape=[32, c])
        gy = self.global_view(y_ptr, dtype=dt, shape=[32, 1])
        x = self.load_global(gx, offsets=[0, 0], shape=[32, c])
        if self.local_rows:  # a row a lane, in its registers
            self.annotate_layout(x, spatial(32, 1).local(1, c))
        y = self.sum(x, dim=1, keepdim=True, acc_dtype=dt)
        self.store_global(gy, y, offsets=[0, 0])


def _as_float(words, dt):
    if dt == float16:
        return words.view(np.float16).astype(np.float64)
    return (words.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


@needs_nvrtc
@needs_gxx
@pytest.mark.parametrize(
    "dt, cols, local_rows",
    [(float16, 32, True), (float16, 7, True), (bfloat16, 2, True), (bfloat16, 32, True),
     (float16, 256, False), (bfloat16, 100, False)],
    ids=str,
)  # fmt: skip
def test_half_accumulated_sum(dt, cols, local_rows):
    """Bit-identical to the interpreter when a row is one thread's registers in order (the
    same tree), else within the dtype's rounding of a float64 reference."""
    import torch

    rng = np.random.default_rng()
    x, _, _, _ = _inputs(rng, dt, 32, cols)
    y = np.full((32, 1), 0x7E00, np.uint16)
    kernel = HalfSum(dt, cols, local_rows)
    ck = emulate(kernel, (x, y), [1])
    want = np.full_like(y, 0x7E00)
    tdt = torch.float16 if dt == float16 else torch.bfloat16
    with tilus.option.scoped(interpret=True):
        kernel(torch.from_numpy(x).view(tdt), torch.from_numpy(want).view(tdt))
    ref = _as_float(x, dt).sum(axis=1, keepdims=True)
    eps = 2.0**-10 if dt == float16 else 2.0**-7
    scale = np.abs(_as_float(x, dt)).sum(axis=1, keepdims=True)
    for got in (y, want):
        assert (np.abs(_as_float(got, dt) - ref) <= eps * np.log2(2 * cols) * scale).all()
    if local_rows:
        np.testing.assert_array_equal(y, want)
        assert "tl_hadd_pair" in ck.source or "tl_badd_pair" in ck.source or cols < 4


def test_acc_dtype_is_refused_where_it_does_not_apply():
    class Bad(tilus.Script):
        def __call__(self, x_ptr: ~float16):
            self.attrs.blocks = [1]
            self.attrs.warps = 1
            gx = self.global_view(x_ptr, dtype=float16, shape=[32])
            x = self.load_global(gx, offsets=[0], shape=[32])
            self.max(self.sum(x, dim=0, acc_dtype=bfloat16), dim=0)  # BAD

    with pytest.raises(tilus.TilusError) as info:
        tilus.compile(Bad(), np.ones(32, np.float16))
    assert "acc_dtype of a float16 sum must be float32 or float16" in str(info.value)
    assert info.value.loc.line == marker_line(Bad, "BAD")


class HalfDot(tilus.Script):
    """``y[r] = sum(a[r, :] * b[0, :])`` in ``dtype`` (``b`` broadcast over the rows): the
    CUDA backend fuses the products into the sum (pair FMAs)."""

    def __init__(self, dtype, cols, local_rows):
        super().__init__()
        self.dtype, self.cols, self.local_rows = dtype, cols, local_rows

    def __call__(self, a_ptr: void_p, b_ptr: void_p, y_ptr: void_p):
        dt, c = self.dtype, self.cols
        self.attrs.blocks = [1]
        self.attrs.warps = 1 if self.local_rows else 4
        ga = self.global_view(a_ptr, dtype=dt, shape=[32, c])
        gb = self.global_view(b_ptr, dtype=dt, shape=[1, c])
        gy = self.global_view(y_ptr, dtype=dt, shape=[32, 1])
        a = self.load_global(ga, offsets=[0, 0], shape=[32, c])
        b = self.load_global(gb, offsets=[0, 0], shape=[1, c])
        if self.local_rows:
            self.annotate_layout(a, spatial(32, 1).local(1, c))
        y = self.sum(a * b, dim=1, keepdim=True, acc_dtype=dt)
        self.store_global(gy, y, offsets=[0, 0])


@needs_nvrtc
@needs_gxx
@pytest.mark.parametrize(
    "dt, cols, local_rows",
    [(float16, 32, True), (bfloat16, 7, True), (float16, 1, True), (bfloat16, 96, False)],
    ids=str,
)
def test_sum_of_products_is_fused_into_pair_fmas(dt, cols, local_rows):
    """Within the dtype's rounding of a float64 reference on the CPU emulator and the
    interpreter (which rounds each product: the two may differ in the last bits)."""
    import torch

    rng = np.random.default_rng()
    a = _inputs(rng, dt, 32, cols)[0]
    b = _inputs(rng, dt, 1, cols)[0]
    y = np.full((32, 1), 0x7E00, np.uint16)
    kernel = HalfDot(dt, cols, local_rows)
    ck = emulate(kernel, (a, b, y), [1])
    if cols > 1:
        assert ("tl_hfma_pair" if dt == float16 else "tl_bfma_pair") in ck.source
    want = np.full_like(y, 0x7E00)
    tdt = torch.float16 if dt == float16 else torch.bfloat16
    with tilus.option.scoped(interpret=True):
        kernel(*(torch.from_numpy(v).view(tdt) for v in (a, b, want)))
    prod = _as_float(a, dt) * _as_float(b, dt)
    ref, scale = prod.sum(axis=1, keepdims=True), np.abs(prod).sum(axis=1, keepdims=True)
    eps = 2.0**-10 if dt == float16 else 2.0**-7
    for got in (y, want):
        assert (np.abs(_as_float(got, dt) - ref) <= eps * np.log2(4 * cols) * scale).all()


@needs_nvrtc
def test_fused_sum_of_products_has_no_separate_multiplies():
    from tilus.runtime.sass import sass_opcodes

    a = np.ones((32, 64), np.uint16)
    ck = tilus.compile(HalfDot(float16, 64, True), a, a[:1].copy(), a[:, :1].copy())
    ops = sass_opcodes(ck.sass())
    # a lane's row of 64: one HMUL2 to start the chain, 31 HFMA2, one HADD2 for the halves
    assert ops.get("HMUL2", 0) <= 1 and ops.get("HFMA2", 0) >= 31, ops
