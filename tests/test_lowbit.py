"""Sub-byte types on the interpreter: bit-packed global views, casts, ``self.view``, errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers_errors import err_line
from lowbit_kernels import SUBBYTE, Dequant, Quant, Repack, ViewBytes, codes, specials

import tilus
from tilus import float16, float32, int4b, int32, uint8, void_p
from tilus.backends.interp.numeric import convert
from tilus.tensor import _float_table, decode, encode, pack, unpack
from tilus.utils import cdiv

rng = np.random.default_rng()
SIZES = [(37, 21), (5, 67)]


def _nbytes(dt, n):
    return (n * dt.nbits + 7) // 8


@pytest.mark.parametrize("dt", SUBBYTE, ids=str)
def test_packed_load_every_code(dt):
    m, n = SIZES[0]
    c = codes(rng, dt, (m, n))
    out = np.full((m, n), np.nan, np.float32)
    Dequant(dt, float32)(m, n, pack(c, dt.nbits), out)
    np.testing.assert_array_equal(out, decode(c, dt).astype(np.float32))


@pytest.mark.parametrize("dt", SUBBYTE, ids=str)
def test_packed_store_rounds_and_keeps_neighbour_bits(dt):
    m, n = SIZES[1]
    a = rng.standard_normal((m, n)) * float(dt.max_value()) / 2
    a = specials(a.astype(np.float32), dt).reshape(m, n)
    nb = _nbytes(dt, m * n)
    w = np.full(nb + 3, 0xA5, np.uint8)  # sentinel bytes after the view
    Quant(float32, dt)(m, n, a, w)
    want = pack(encode(convert(a, dt), dt), dt.nbits)
    np.testing.assert_array_equal(w[: nb - 1], want[: nb - 1])
    tail = m * n * dt.nbits % 8  # the last byte's bits past the view keep the sentinel
    keep = (0xFF << tail) & 0xFF if tail else 0
    last, ref = int(w[nb - 1]), int(want[nb - 1])
    assert last & ~keep & 0xFF == ref & ~keep & 0xFF
    assert last & keep == 0xA5 & keep
    assert (w[nb:] == 0xA5).all()


@pytest.mark.parametrize("dt", [tilus.int3b, tilus.uint4b, tilus.float6_e2m3], ids=str)
def test_packed_round_trip_with_rows_at_any_bit(dt):
    m, n, ld = 19, 45, 47
    c = codes(rng, dt, (m, n))
    b = np.full(_nbytes(dt, m * ld), 0x3C, np.uint8)
    Repack(dt)(m, n, ld, pack(c, dt.nbits), b)
    got = unpack(b, dt.nbits, m * ld).reshape(m, ld)
    np.testing.assert_array_equal(got[:, :n], c)
    pad = unpack(np.full(b.size, 0x3C, np.uint8), dt.nbits, m * ld).reshape(m, ld)
    np.testing.assert_array_equal(got[:, n:], pad[:, n:])  # the padding is never written


def test_storage_kinds_uint8_int8_torch_numpy_and_tilus_tensor():
    m, n = 9, 40
    vals = rng.integers(-8, 8, (m, n))
    raw = pack(vals & 15, 4)
    want = vals.astype(np.float16)
    for storage in (raw, raw.view(np.int8), torch.from_numpy(raw.copy())):
        out = np.full((m, n), np.nan, np.float16)
        if isinstance(storage, np.ndarray) and storage.dtype == np.int8:
            DequantVoid()(m, n, storage, out)
        else:
            Dequant(int4b, float16)(m, n, storage, out)
        np.testing.assert_array_equal(out, want)
    t = tilus.view_torch(torch.from_numpy(raw.copy()), dtype=int4b, shape=[m, n])
    out = np.full((m, n), np.nan, np.float16)
    DequantTyped()(m, n, t, out)
    np.testing.assert_array_equal(out, want)


class DequantVoid(tilus.Script):
    def __call__(self, m: int32, n: int32, w_ptr: void_p, out_ptr: ~float16):
        self.attrs.blocks = [cdiv(m, 16), cdiv(n, 16)]
        self.attrs.warps = 1
        gw = self.global_view(w_ptr, dtype=int4b, shape=[m, n])
        go = self.global_view(out_ptr, dtype=float16, shape=[m, n])
        t = self.load_global(
            gw, offsets=[self.blockIdx.x * 16, self.blockIdx.y * 16], shape=[16, 16]
        )
        self.store_global(go, t.to(float16), offsets=[self.blockIdx.x * 16, self.blockIdx.y * 16])


class DequantTyped(tilus.Script):
    def __call__(self, m: int32, n: int32, w_ptr: ~int4b, out_ptr: ~float16):
        self.attrs.blocks = [cdiv(m, 16), cdiv(n, 16)]
        self.attrs.warps = 1
        gw = self.global_view(w_ptr, dtype=int4b, shape=[m, n])  # ERR
        go = self.global_view(out_ptr, dtype=float16, shape=[m, n])
        t = self.load_global(
            gw, offsets=[self.blockIdx.x * 16, self.blockIdx.y * 16], shape=[16, 16]
        )
        self.store_global(go, t.to(float16), offsets=[self.blockIdx.x * 16, self.blockIdx.y * 16])


def test_storage_that_does_not_cover_the_view_is_refused_at_the_global_view():
    m, n = 7, 13
    short = tilus.zeros([m * n - 2], int4b, device="cpu")  # 45 bytes for a 46-byte view
    with pytest.raises(tilus.TilusRuntimeError, match=r"needs 46 bytes of storage.* has 45") as e:
        DequantTyped()(m, n, short, np.zeros((m, n), np.float16))
    assert e.value.loc.line == err_line(DequantTyped)
    other = tilus.zeros([m * n], tilus.uint2b, device="cpu")
    with pytest.raises(tilus.TilusArgumentError, match="'w_ptr' is declared ~int4b but got"):
        DequantTyped()(m, n, other, np.zeros((m, n), np.float16))


class BadPointer(tilus.Script):
    def __call__(self, n: int32, p: ~float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 1
        self.global_view(p, dtype=int4b, shape=[n])  # ERR


def test_sub_byte_view_of_a_float_pointer_is_refused_at_its_line():
    with pytest.raises(tilus.TilusProgramError, match=r"void_p, ~uint8 or ~int8") as e:
        BadPointer()(4, np.zeros(4, np.float32))
    assert e.value.loc.line == err_line(BadPointer)


@pytest.mark.parametrize(
    "dt", [tilus.int4b, tilus.uint2b, tilus.float4_e2m1, tilus.uint1b], ids=str
)
def test_view_of_uint8_tiles_as_packed(dt):
    m, n = 21, 96
    c = codes(rng, dt, (m, n))
    raw = pack(c, dt.nbits).reshape(m, -1)
    out = np.full((m, n), np.nan, np.float16)
    ViewBytes(dt)(m, n, raw, out)
    np.testing.assert_array_equal(out, decode(c, dt).astype(np.float16))


class ViewRoundTrip(tilus.Script):
    def __call__(self, a_ptr: ~float32, b_ptr: ~float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 1
        ga = self.global_view(a_ptr, dtype=float32, shape=[4, 8])
        gb = self.global_view(b_ptr, dtype=float32, shape=[4, 8])
        t = self.load_global(ga, offsets=[0, 0], shape=[4, 8])
        u = self.view(self.view(t, dtype=tilus.uint4b), dtype=tilus.uint16)
        self.store_global(gb, self.view(u, dtype=float32), offsets=[0, 0])


def test_view_round_trip_keeps_the_bits():
    a = rng.standard_normal((4, 8)).astype(np.float32)
    b = np.full_like(a, np.nan)
    ViewRoundTrip()(a, b)
    np.testing.assert_array_equal(a.view(np.uint32), b.view(np.uint32))


class BadView(tilus.Script):
    def __call__(self, a_ptr: ~uint8):
        self.attrs.blocks = [1]
        self.attrs.warps = 1
        ga = self.global_view(a_ptr, dtype=uint8, shape=[4, 3])
        t = self.load_global(ga, offsets=[0, 0], shape=[4, 3])
        self.view(t, dtype=tilus.int5b)  # ERR


def test_view_that_splits_an_element_is_refused_at_its_line():
    with pytest.raises(tilus.TilusProgramError, match="24 bits, not a whole number") as e:
        BadView()(np.zeros(12, np.uint8))
    assert e.value.loc.line == err_line(BadView)


# --- conversion rules, every code / every f16 input ------------------------------------------


def _nearest(values: np.ndarray, dt) -> np.ndarray:
    """Brute-force reference: the nearest finite value of ``dt`` (ties to the even code),
    saturating; NaN -> +max unless the format has NaN (X=5)."""
    table = _float_table(dt)
    finite = np.flatnonzero(np.isfinite(table))
    v = values.astype(np.float64)
    dist = np.abs(table[finite][None, :] - np.nan_to_num(v)[:, None])
    best = dist.min(axis=1, keepdims=True)
    ties = dist == best
    even = ties & (finite[None, :] % 2 == 0)
    pick = np.where(even.any(axis=1), even.argmax(axis=1), ties.argmax(axis=1))
    out = table[finite][pick]
    out = np.where(np.signbit(v) & (out == 0), -0.0, out)
    fmax = float(dt.max_value())
    if dt.exponent_bits == 5:  # IEEE-like: beyond max + half a step rounds to inf
        step = 2.0 ** (np.floor(np.log2(fmax)) - dt.mantissa_bits)
        out = np.where(np.abs(v) >= fmax + step / 2, np.copysign(np.inf, v), out)
        return np.where(np.isnan(v), np.nan, out)
    return np.where(np.isnan(v), fmax, np.where(np.isinf(v), np.copysign(fmax, v), out))


@pytest.mark.parametrize("dt", [d for d in SUBBYTE if d.is_float()], ids=str)
def test_float_casts_round_to_nearest_even_saturate_and_map_nan_for_every_f16(dt):
    x = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    got = convert(x, dt).astype(np.float64)
    want = _nearest(x, dt)
    np.testing.assert_array_equal(got, want)
    assert np.array_equal(np.signbit(got), np.signbit(want))
    assert np.array_equal(decode(encode(got, dt), dt), got.astype(np.float32), equal_nan=True)


def test_nan_becomes_plus_max_without_nan_codes_and_stays_nan_with_x5():
    x = np.array([np.nan, -np.nan, np.inf, -np.inf], np.float32)
    np.testing.assert_array_equal(convert(x, tilus.float4_e2m1), [6.0, 6.0, 6.0, -6.0])
    assert encode(np.array([np.nan]), tilus.float4_e2m1)[0] == 0b0111
    y = convert(x, tilus.float7_e5m1)
    assert np.isnan(y[:2]).all() and list(y[2:]) == [np.inf, -np.inf]


@pytest.mark.parametrize("dt", [d for d in SUBBYTE if d.is_integer()], ids=str)
def test_integer_casts_truncate_saturate_and_wrap(dt):
    lo, hi = dt.min_value(), dt.max_value()
    f = np.array([np.nan, 1e9, -1e9, 2.7, -2.7, lo - 0.5, hi + 0.5], np.float32)
    want = [0, hi, lo, min(2, hi), max(-2, lo), lo, hi]
    np.testing.assert_array_equal(convert(f, dt), want)
    i = np.arange(-300, 300, dtype=np.int32)
    wrapped = (i & ((1 << dt.nbits) - 1)).astype(np.int64)
    if dt.kind == "int":
        wrapped = np.where(wrapped >= 1 << (dt.nbits - 1), wrapped - (1 << dt.nbits), wrapped)
    np.testing.assert_array_equal(convert(i, dt), wrapped)


def test_a_sub_byte_pointer_takes_byte_storage():
    m, n = 6, 20
    vals = rng.integers(-8, 8, (m, n))
    out = np.full((m, n), np.nan, np.float16)
    DequantTyped()(m, n, pack(vals & 15, 4), out)  # ~int4b given uint8 bytes
    np.testing.assert_array_equal(out, vals.astype(np.float16))
