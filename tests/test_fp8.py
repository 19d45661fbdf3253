"""fp8 e4m3/e5m2: the NumPy codec against torch, rounding at every boundary, saturation,
fp8 arguments on the interpreter, fp8 casts and WGMMA in the front end and the CUDA backend."""

from __future__ import annotations

import re

import numpy as np
import pytest

import tilus
from tests.helpers_errors import err_line
from tilus import float8_e4m3, float8_e5m2, float16, float32, int32, void_p
from tilus.ir import fp8
from tilus.ir.cscalar import round_float_format
from tilus.utils import cdiv

torch = pytest.importorskip("torch")

FORMATS = [(float8_e4m3, "float8_e4m3fn", 448.0), (float8_e5m2, "float8_e5m2", 57344.0)]
CODES = np.arange(256, dtype=np.uint8)


def _tdt(name):
    return getattr(torch, name)


def _finite_codes(dt):
    """Codes of the finite values, in increasing order of value."""
    vals = fp8.decode(CODES, dt).astype(np.float64)
    ok = np.isfinite(vals)
    codes = CODES[ok]
    order = np.argsort(vals[ok], kind="stable")
    return codes[order], vals[ok][order]


# --- the codec -------------------------------------------------------------------------------


@pytest.mark.parametrize("dt, tname, fmax", FORMATS)
def test_decode_matches_torch_on_all_codes(dt, tname, fmax):
    ref = torch.from_numpy(CODES.copy()).view(_tdt(tname)).float().numpy()
    got = fp8.decode(CODES, dt)
    assert np.array_equal(np.isnan(ref), np.isnan(got))
    assert np.array_equal(ref[~np.isnan(ref)], got[~np.isnan(got)])
    assert np.nanmax(got[np.isfinite(got)]) == fmax
    assert np.array_equal(fp8.encode(got, dt), CODES)  # every code survives decode + encode


@pytest.mark.parametrize("dt, tname, fmax", FORMATS)
def test_encode_at_every_rounding_boundary(dt, tname, fmax):
    codes, vals = _finite_codes(dt)
    # adjacent distinct values (skip -0/+0, which are equal)
    keep = np.diff(vals) > 0
    lo_c, lo, hi = codes[:-1][keep], vals[:-1][keep], vals[1:][keep]
    mid = ((lo + hi) / 2).astype(np.float32)  # exact: fp8 midpoints have 5 significant bits
    assert np.array_equal(mid.astype(np.float64), (lo + hi) / 2)
    above = np.nextafter(mid, np.float32(np.inf))
    below = np.nextafter(mid, np.float32(-np.inf))

    def value(x):  # compared as values: -0 and +0 are both zero
        return fp8.decode(fp8.encode(x, dt), dt)

    assert np.array_equal(value(above), hi)  # just above a midpoint: the upper neighbour
    assert np.array_equal(value(below), lo)  # just below: the lower
    # the tie goes to the code with an even mantissa (the even code)
    even = np.where(lo_c % 2 == 0, lo, hi)
    assert np.array_equal(value(mid), even)
    assert np.array_equal(np.signbit(fp8.decode(fp8.encode(mid, dt), dt)), np.signbit(mid))
    # torch agrees everywhere it is defined (inside the finite range)
    t = torch.from_numpy(np.concatenate([mid, above, below]))
    ref = t.to(_tdt(tname)).view(torch.uint8).numpy()
    assert np.array_equal(fp8.encode(t.numpy(), dt), ref)


@pytest.mark.parametrize("dt, tname, fmax", FORMATS)
def test_encode_random_values_match_torch(dt, tname, fmax):
    rng = np.random.default_rng()
    x = np.concatenate(
        [rng.standard_normal(20000) * s for s in (1e-3, 0.1, 1.0, 30.0, fmax / 4)]
    ).astype(np.float32)
    x = x[np.abs(x) <= fmax]
    ref = torch.from_numpy(x).to(_tdt(tname)).view(torch.uint8).numpy()
    assert np.array_equal(fp8.encode(x, dt), ref)


@pytest.mark.parametrize("dt, tname, fmax", FORMATS)
def test_saturation_and_nan(dt, tname, fmax):
    # cvt.rn.satfinite: finite overflow and +-Inf become +-max; NaN becomes 0x7F
    x = np.array([fmax * 1.01, 1e30, np.inf, -np.inf, -fmax * 4, np.nan, -np.nan], np.float32)
    r = round_float_format(x, dt)
    assert list(r[:5]) == [fmax, fmax, fmax, -fmax, -fmax]
    assert np.isnan(r[5:]).all()
    codes = fp8.encode(r, dt)
    top = 0x7E if dt == float8_e4m3 else 0x7B
    assert list(codes) == [top, top, top, top | 0x80, top | 0x80, 0x7F, 0x7F]
    # storing a loaded e5m2 infinity keeps it (only conversions saturate)
    if dt == float8_e5m2:
        assert list(fp8.encode(np.array([np.inf, -np.inf], np.float32), dt)) == [0x7C, 0xFC]
    # the scalar semantics of IR constants agree
    assert tilus.ir.cscalar.convert(1e9, dt) == fmax


def test_subnormals_round_half_even():
    # e4m3: smallest subnormal 2^-9; half of it ties to 0, just above rounds up
    s = 2.0**-9
    x = np.array([s / 2, np.nextafter(np.float32(s / 2), np.float32(1)), 1.5 * s, 2.5 * s])
    assert list(fp8.encode(x.astype(np.float32), float8_e4m3)) == [0, 1, 2, 2]
    assert list(fp8.encode(np.array([-0.0], np.float32), float8_e4m3)) == [0x80]


# --- fp8 arguments and casts on the interpreter -----------------------------------------------


class Cast(tilus.Script):
    """``y = cast(x)`` elementwise over raw buffers viewed with the given dtypes."""

    def __init__(self, src, dst):
        super().__init__()
        self.src, self.dst = src, dst

    def __call__(self, n: int32, x_ptr: void_p, y_ptr: void_p):
        self.attrs.blocks = cdiv(n, 256)
        self.attrs.warps = 4
        gx = self.global_view(x_ptr, dtype=self.src, shape=[n])
        gy = self.global_view(y_ptr, dtype=self.dst, shape=[n])
        x = self.load_global(gx, offsets=[self.blockIdx.x * 256], shape=[256])
        self.store_global(gy, self.cast(x, self.dst), offsets=[self.blockIdx.x * 256])  # ERR


class TypedCast(tilus.Script):
    """f32 -> fp8 -> f32 through typed pointers (torch fp8 tensors)."""

    def __call__(self, n: int32, x_ptr: ~float32, q_ptr: ~float8_e4m3, y_ptr: ~float32):
        self.attrs.blocks = cdiv(n, 128)
        self.attrs.warps = 4
        gx = self.global_view(x_ptr, dtype=float32, shape=[n])
        gq = self.global_view(q_ptr, dtype=float8_e4m3, shape=[n])
        gy = self.global_view(y_ptr, dtype=float32, shape=[n])
        x = self.load_global(gx, offsets=[self.blockIdx.x * 128], shape=[128])
        self.store_global(gq, self.cast(x, float8_e4m3), offsets=[self.blockIdx.x * 128])
        q = self.load_global(gq, offsets=[self.blockIdx.x * 128], shape=[128])
        self.store_global(gy, self.cast(q, float32), offsets=[self.blockIdx.x * 128])


@pytest.mark.parametrize("dt, tname, fmax", FORMATS)
@pytest.mark.parametrize("out_kind", ["fp8", "uint8", "int8"])
def test_interpreter_f32_to_fp8(dt, tname, fmax, out_kind):
    n = 1000
    x = torch.randn(n) * (fmax / 8)
    x[:4] = torch.tensor([float("nan"), float("inf"), -1e30, 0.0])
    tdt = {"fp8": _tdt(tname), "uint8": torch.uint8, "int8": torch.int8}[out_kind]
    y = torch.zeros(n + 3, dtype=torch.uint8).view(tdt) if out_kind != "fp8" else None
    if y is None:
        y = torch.zeros(n + 3, dtype=torch.uint8).view(_tdt(tname))
    y.view(torch.uint8)[n:] = torch.tensor([0xFF, 0x7D, 0x80], dtype=torch.uint8)  # untouched
    Cast(float32, dt)(n, x, y)
    want = fp8.encode(round_float_format(x.numpy(), dt), dt)
    got = y.view(torch.uint8).numpy()
    assert np.array_equal(got[:n], want)
    assert list(got[n:]) == [0xFF, 0x7D, 0x80]  # bytes the kernel did not write keep their codes


@pytest.mark.parametrize("dt, tname, fmax", FORMATS)
@pytest.mark.parametrize("dst", [float32, float16, tilus.bfloat16])
def test_interpreter_fp8_to_float_all_codes(dt, tname, fmax, dst):
    codes = torch.from_numpy(np.tile(CODES, 3)).view(_tdt(tname))
    out = torch.zeros(codes.numel(), dtype={float32: torch.float32, float16: torch.float16}.get(
        dst, torch.bfloat16))  # fmt: skip
    Cast(dt, dst)(codes.numel(), codes, out)
    ref = codes.float()
    got = out.float()
    assert torch.equal(torch.isnan(got), torch.isnan(ref))
    fin = ~torch.isnan(ref)
    assert torch.equal(got[fin], ref[fin])


def test_interpreter_fp8_between_formats_and_from_f16():
    h = torch.from_numpy(np.arange(65536, dtype=np.uint16).view(np.float16).copy())
    q = torch.zeros(65536, dtype=torch.float8_e5m2)
    Cast(float16, float8_e5m2)(65536, h, q)
    want = fp8.encode(round_float_format(h.numpy().astype(np.float32), float8_e5m2), float8_e5m2)
    assert np.array_equal(q.view(torch.uint8).numpy(), want)
    e4 = torch.from_numpy(CODES.copy()).view(torch.float8_e4m3fn)
    e5 = torch.zeros(256, dtype=torch.float8_e5m2)
    Cast(float8_e4m3, float8_e5m2)(256, e4, e5)
    vals = fp8.decode(CODES, float8_e4m3)
    assert np.array_equal(
        e5.view(torch.uint8).numpy(), fp8.encode(round_float_format(vals, float8_e5m2), float8_e5m2)
    )


def test_interpreter_typed_fp8_pointer_round_trip():
    n = 300
    x = torch.randn(n) * 100
    q = torch.full((n,), 0x7F, dtype=torch.uint8).view(torch.float8_e4m3fn)
    y = torch.full((n,), float("nan"))
    TypedCast()(n, x, q, y)
    assert torch.equal(
        q.view(torch.uint8), x.clamp(-448, 448).to(torch.float8_e4m3fn).view(torch.uint8)
    )
    assert torch.equal(y, q.float())
    with pytest.raises(tilus.TilusArgumentError, match="q_ptr"):
        TypedCast()(n, x, torch.zeros(n, dtype=torch.float8_e5m2), y)


# --- the CUDA backend (code generation and NVRTC, no GPU) --------------------------------------


def _source(kernel, *args, target="sm_90a"):
    pytest.importorskip("cuda.bindings")
    ck = tilus.compile(kernel, *args, target=target)
    return ck.kernel.source


@pytest.mark.parametrize(
    "src, dst, ptx",
    [
        (float32, float8_e4m3, "cvt.rn.satfinite.e4m3x2.f32"),
        (float16, float8_e5m2, "cvt.rn.satfinite.e5m2x2.f16x2"),
        (float8_e4m3, float16, "cvt.rn.f16x2.e4m3x2"),
        (float8_e5m2, float32, "cvt.rn.f16x2.e5m2x2"),
    ],
)
def test_cuda_casts_use_the_pair_cvt(src, dst, ptx):
    text = _source(Cast(src, dst), 1000, void_p, void_p)
    assert ptx in text
    # the cast loop converts two registers per call
    assert re.search(r"tl_\w*x2\w*\(", text) and "(2 * tl_i" in text


def test_cuda_fp8_needs_sm89():
    pytest.importorskip("cuda.bindings")
    with pytest.raises(tilus.TilusCompileError, match="sm_89") as info:
        tilus.compile(Cast(float32, float8_e4m3), 1000, void_p, void_p, target="sm_80")
    assert info.value.loc.line == err_line(Cast)
    # moving fp8 bytes alone is fine on sm_80; sm_89 converts
    assert "cvt.rn.satfinite" in _source(Cast(float32, float8_e4m3), 10, void_p, void_p,
                                         target="sm_89")  # fmt: skip


def _no_c_type():
    """A byte-sized tilus dtype the CUDA backend has no C type for (skip when every one has one;
    sub-byte types are bit-packed, not C types, and have their own refusals)."""
    from tilus.backends.cuda.codegen.scalar import C_TYPES
    from tilus.dtypes import ALL_DTYPES

    for dt in ALL_DTYPES.values():
        if dt.name not in C_TYPES and dt.nbits % 8 == 0:
            return dt
    pytest.skip("every dtype has a C type")


class NoCTypeTile(tilus.Script):
    def __init__(self, dt):
        super().__init__()
        self.dt = dt

    def __call__(self, n: int32, x_ptr: ~float32):
        self.attrs.blocks = 1
        self.attrs.warps = 4
        gx = self.global_view(x_ptr, dtype=float32, shape=[n])
        x = self.load_global(gx, offsets=[0], shape=[128])
        t = self.cast(x, self.dt)  # ERR
        self.store_global(gx, self.cast(t, float32), offsets=[0])


def test_cuda_dtype_without_c_type_is_located():
    pytest.importorskip("cuda.bindings")
    dt = _no_c_type()
    with pytest.raises(tilus.TilusCompileError, match=f"no C type for {dt.name}") as info:
        tilus.compile(NoCTypeTile(dt), 128, float32, target="sm_90a")
    assert info.value.loc.line == err_line(NoCTypeTile)


@tilus.autotune("dt", ["f32", "other"])
class NoCTypeSpace(tilus.Script):
    def __init__(self, dt, other):
        super().__init__()
        self.dt = tilus.float32 if dt == "f32" else other

    def __call__(self, n: int32, x_ptr: ~float32):
        self.attrs.blocks = 1
        self.attrs.warps = 4
        gx = self.global_view(x_ptr, dtype=float32, shape=[n])
        x = self.load_global(gx, offsets=[0], shape=[128])
        self.store_global(gx, self.cast(self.cast(x, self.dt), float32), offsets=[0])


def test_unsupported_dtype_is_a_failed_config_of_the_sweep():
    pytest.importorskip("cuda.bindings")
    built = tilus.compile(NoCTypeSpace(other=_no_c_type()), 128, float32, target="sm_90a")
    built = built if isinstance(built, list) else [built]
    assert [dict(b.config) for b in built] == [{"dt": "f32"}]


# --- fp8 WGMMA --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "da, db", [(float8_e4m3, float8_e4m3), (float8_e4m3, float8_e5m2), (float8_e5m2, float8_e4m3)]
)
def test_interpreter_fp8_wgmma_matches_torch(da, db):
    from tests.fp8_kernels import Fp8Wgmma

    m, n, k = 70, 72, 208  # ragged in M, N and K
    tdt = {float8_e4m3: torch.float8_e4m3fn, float8_e5m2: torch.float8_e5m2}
    a = (torch.randn(m, k) * 8).to(tdt[da])
    b = (torch.randn(n, k) * 8).to(tdt[db])
    c = torch.full((m, n), float("nan"))
    Fp8Wgmma(da, db)(m, n, k, a.view(torch.uint8), b.view(torch.uint8), c)
    ref = a.float() @ b.float().T
    assert float((c - ref).abs().max() / ref.abs().max()) < 1e-5


@pytest.mark.parametrize(
    "name, fragment",
    [
        ("Fp8WgmmaMNMajorB", "operand b `sb` .* MN-major"),
        ("Fp8WgmmaMNMajorA", "operand a `sa_t` .* MN-major"),
        ("Fp8WgmmaBadK", "K=16 must be a multiple of 32"),
        ("Fp8WgmmaMixedF16", "float8_e4m3/float8_e5m2 operands in any mix"),
    ],
)
def test_fp8_wgmma_refusals_are_located(name, fragment):
    from tests import fp8_kernels

    cls = getattr(fp8_kernels, name)
    with pytest.raises(tilus.TilusProgramError) as info:
        cls()(np.zeros(8, np.uint8), np.zeros(8, np.uint8), np.zeros(8, np.float32))
    assert info.value.loc.line == err_line(cls)
    assert re.search(fragment, info.value.msg), info.value.msg


def test_cuda_fp8_wgmma_code_and_targets():
    pytest.importorskip("cuda.bindings")
    from tests.fp8_kernels import Fp8Wgmma

    ck = tilus.compile(
        Fp8Wgmma(float8_e4m3, float8_e5m2), 100, 72, 208, void_p, void_p, float32, target="sm_90a"
    )
    src = ck.kernel.source
    assert "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e5m2" in src
    assert "p, 1, 1;" in src  # no transpose immediates for 8-bit operands
    # four K steps of 32 bytes in a 128-byte swizzled row (descriptor offsets in 16-byte units)
    assert all(f"+ {off // 16}u)" in src for off in (0, 32, 64, 96))
    with pytest.raises(tilus.TilusCompileError, match="wgmma_fence needs target sm_90a"):
        tilus.compile(
            Fp8Wgmma(float8_e4m3, float8_e4m3), 64, 64, 128, void_p, void_p, float32,
            target="sm_90",
        )  # fmt: skip


def test_ptx_wgmma_fp8_wrappers():
    from tilus.backends.cuda.ptx import wgmma as W

    assert W.mma_async_name(128, "f16") == "tl_wgmma_m64n128k16_f32_f16_ss"  # unchanged
    assert W.mma_async_name(128, "e4m3") == "tl_wgmma_m64n128k32_f32_e4m3_ss"
    assert W.mma_async_name(8, "e5m2", b_type="e4m3") == "tl_wgmma_m64n8k32_f32_e5m2_e4m3_ss"
    frag = W.mma_async(256, "e4m3", b_type="e5m2")
    assert "m64n256k32.f32.e4m3.e5m2" in frag.text and "p, 1, 1;" in frag.text
    with pytest.raises(ValueError, match="no transpose"):
        W.mma_async(64, "e4m3", trans_b=1)
    with pytest.raises(ValueError, match="no e4m3 x f16 form"):
        W.mma_async(64, "e4m3", b_type="f16")
    # an fp8 K step is 32 elements = 32 bytes of a 128-byte swizzled K-major row
    tile = W.KMajorTile(rows=8, cols=128, dtype_bytes=1, swizzle=128)
    assert [tile.k_offset(32 * i) for i in range(4)] == [0, 32, 64, 96]


@pytest.mark.parametrize("dt", [float8_e4m3, float8_e5m2])
def test_same_dtype_cast_and_store_keep_every_code(dt):
    """A cast to the same fp8 dtype and its store move the bits (Inf and NaN codes included),
    as the GPU does; only conversions saturate."""
    torch = pytest.importorskip("torch")
    x = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    y = torch.full((256,), 0x5A, dtype=torch.uint8)
    with tilus.option.scoped(interpret=True):
        Cast(dt, dt)(256, x, y)
    assert torch.equal(x, y)
