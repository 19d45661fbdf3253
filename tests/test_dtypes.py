"""Data types: names, widths, pointer types, limits, and narrow-float rounding."""

from __future__ import annotations

import numpy as np
import pytest

import tilus
from tilus import float32, int32
from tilus.dtypes import ALL_DTYPES, SHORT_NAMES, from_numpy_dtype, from_torch_dtype
from tilus.utils import cdiv

STANDARD = [
    # name, short name, nbits, kind
    ("int8", "i8", 8, "int"),
    ("int16", "i16", 16, "int"),
    ("int32", "i32", 32, "int"),
    ("int64", "i64", 64, "int"),
    ("uint8", "u8", 8, "uint"),
    ("uint16", "u16", 16, "uint"),
    ("uint32", "u32", 32, "uint"),
    ("uint64", "u64", 64, "uint"),
    ("float16", "f16", 16, "float"),
    ("bfloat16", "bf16", 16, "float"),
    ("float32", "f32", 32, "float"),
    ("float64", "f64", 64, "float"),
    ("tfloat32", "tf32", 32, "float"),
    ("float8_e4m3", "f8e4m3", 8, "float"),
    ("float8_e5m2", "f8e5m2", 8, "float"),
    ("boolean", "bool", 8, "bool"),
]

SUBBYTE_FLOATS = [
    "float7_e5m1",
    "float7_e4m2",
    "float7_e3m3",
    "float7_e2m4",
    "float6_e4m1",
    "float6_e3m2",
    "float6_e2m3",
    "float5_e3m1",
    "float5_e2m2",
    "float4_e2m1",
    "float3_e1m1",
]


@pytest.mark.parametrize("name, short, nbits, kind", STANDARD)
def test_standard_types(name, short, nbits, kind):
    dt = getattr(tilus, name)
    assert dt.name == name and str(dt) == name and repr(dt) == name
    assert dt.short_name == short
    assert dt.nbits == nbits
    assert dt.nbytes == nbits // 8
    assert dt.is_integer() == (kind in ("int", "uint"))
    assert dt.is_float() == (kind == "float")
    assert dt.is_boolean() == (kind == "bool")
    assert dt.is_signed() == (kind in ("int", "float"))
    assert ALL_DTYPES[name] is dt
    assert SHORT_NAMES[short] is dt


def test_short_aliases_exported_from_tilus():
    assert tilus.i8 is tilus.int8 and tilus.i16 is tilus.int16
    assert tilus.i32 is tilus.int32 and tilus.i64 is tilus.int64
    assert tilus.u8 is tilus.uint8 and tilus.u16 is tilus.uint16
    assert tilus.u32 is tilus.uint32 and tilus.u64 is tilus.uint64
    assert tilus.f16 is tilus.float16 and tilus.f32 is tilus.float32
    assert tilus.f64 is tilus.float64 and tilus.bf16 is tilus.bfloat16
    assert tilus.tf32 is tilus.tfloat32
    assert tilus.f8e4m3 is tilus.float8_e4m3 and tilus.f8e5m2 is tilus.float8_e5m2


def test_float_layouts():
    for dt, e, m in [
        (tilus.float16, 5, 10),
        (tilus.bfloat16, 8, 7),
        (tilus.float32, 8, 23),
        (tilus.float64, 11, 52),
        (tilus.tfloat32, 8, 10),
        (tilus.float8_e4m3, 4, 3),
        (tilus.float8_e5m2, 5, 2),
    ]:
        assert (dt.exponent_bits, dt.mantissa_bits) == (e, m), dt


@pytest.mark.parametrize("bits", range(1, 8))
def test_subbyte_integers(bits):
    s = getattr(tilus, f"int{bits}b")
    u = getattr(tilus, f"uint{bits}b")
    assert (s.name, s.short_name, s.nbits) == (f"int{bits}b", f"i{bits}", bits)
    assert (u.name, u.short_name, u.nbits) == (f"uint{bits}b", f"u{bits}", bits)
    assert s.is_integer() and u.is_integer() and not s.is_float()
    assert s.is_signed() and not u.is_signed()
    assert (s.min_value(), s.max_value()) == (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
    assert (u.min_value(), u.max_value()) == (0, 2**bits - 1)
    assert SHORT_NAMES[f"i{bits}"] is s and SHORT_NAMES[f"u{bits}"] is u
    for dt in (s, u):
        with pytest.raises(TypeError):
            _ = dt.nbytes


@pytest.mark.parametrize("name", SUBBYTE_FLOATS)
def test_subbyte_floats(name):
    dt = getattr(tilus, name)
    nbits = int(name[5])
    e = int(name.split("_e")[1].split("m")[0])
    m = int(name.split("m")[-1])
    assert dt.name == name
    assert dt.short_name == f"f{nbits}e{e}m{m}"
    assert dt.nbits == nbits == 1 + e + m
    assert (dt.exponent_bits, dt.mantissa_bits) == (e, m)
    assert dt.is_float() and not dt.is_integer() and dt.is_signed()
    with pytest.raises(TypeError):
        _ = dt.nbytes


def test_subbyte_short_aliases_exported_from_tilus():
    assert tilus.i4 is tilus.int4b
    assert tilus.u2 is tilus.uint2b
    assert tilus.f6e3m2 is tilus.float6_e3m2
    assert tilus.f4e2m1 is tilus.float4_e2m1


@pytest.mark.parametrize(
    "name, fmax",
    [
        ("float8_e4m3", 448.0),
        ("float8_e5m2", 57344.0),
        ("float6_e3m2", 28.0),
        ("float6_e2m3", 7.5),
        ("float4_e2m1", 6.0),
        ("float16", 65504.0),
        ("bfloat16", float(np.finfo(np.float32).max) * (1 - 2**-8) / (1 - 2**-24)),
        ("float32", float(np.finfo(np.float32).max)),
        ("float64", float(np.finfo(np.float64).max)),
    ],
)
def test_float_max_values(name, fmax):
    dt = getattr(tilus, name)
    assert dt.max_value() == pytest.approx(fmax, rel=1e-12)
    assert dt.min_value() == -dt.max_value()


def test_integer_limits():
    assert (tilus.int8.min_value(), tilus.int8.max_value()) == (-128, 127)
    assert (tilus.uint8.min_value(), tilus.uint8.max_value()) == (0, 255)
    assert (tilus.int32.min_value(), tilus.int32.max_value()) == (-(2**31), 2**31 - 1)
    assert tilus.uint64.max_value() == 2**64 - 1
    assert (tilus.boolean.min_value(), tilus.boolean.max_value()) == (0, 1)


def test_pointer_types():
    p = ~tilus.float16
    assert isinstance(p, tilus.PointerType)
    assert p.base is tilus.float16
    assert p == ~tilus.float16 and hash(p) == hash(~tilus.float16)
    assert p != ~tilus.float32
    assert repr(p) == "~float16"
    pp = ~(~tilus.int32)
    assert pp.base == ~tilus.int32 and pp.base.base is tilus.int32
    assert repr(pp) == "~~int32"
    assert ~~tilus.int32 == pp
    assert tilus.void_p.base is None and repr(tilus.void_p) == "void_p"
    assert p.nbits == 64
    assert not p.is_integer() and not p.is_float() and not p.is_boolean()


def test_constants():
    assert tilus.int8(300).value == 44  # wraps like a C cast
    assert tilus.uint8(-1).value == 255
    assert tilus.int32(-7.9).value == -7  # truncation toward zero
    assert tilus.float16.one.value == 1.0 and tilus.float16.one.dtype is tilus.float16
    assert tilus.int32.zero.value == 0 and tilus.int32.zero.dtype is tilus.int32
    assert tilus.boolean(5).value is True


def test_numpy_and_torch_dtype_mapping():
    assert from_numpy_dtype(np.float16) is tilus.float16
    assert from_numpy_dtype(np.int32) is tilus.int32
    assert from_numpy_dtype(np.bool_) is tilus.boolean
    assert from_numpy_dtype(np.complex64) is None
    assert from_torch_dtype("torch.bfloat16") is tilus.bfloat16
    assert from_torch_dtype("torch.float8_e4m3fn") is tilus.float8_e4m3
    assert from_torch_dtype("torch.float8_e5m2") is tilus.float8_e5m2
    torch = pytest.importorskip("torch")
    assert from_torch_dtype(torch.float16) is tilus.float16
    assert from_torch_dtype(torch.bfloat16) is tilus.bfloat16
    assert from_torch_dtype(torch.int64) is tilus.int64


# --------------------------------------------------------------------------------------------
# narrow floats through the interpreter: round to nearest even, saturation


class RoundTrip(tilus.Script):
    def __init__(self, dtype):
        super().__init__()
        self.dtype = dtype

    def __call__(self, n: int32, a_ptr: ~float32, out: ~float32):
        self.attrs.blocks = cdiv(n, 32)
        self.attrs.warps = 1
        off = self.blockIdx.x * 32
        ga = self.global_view(a_ptr, dtype=float32, shape=[n])
        go = self.global_view(out, dtype=float32, shape=[n])
        a = self.load_global(ga, offsets=[off], shape=[32])
        self.store_global(
            go, self.cast(self.cast(a, dtype=self.dtype), dtype=float32), offsets=[off]
        )


def _round_trip(dtype, values):
    a = np.array(values, dtype=np.float32)
    out = np.full(a.size, np.nan, dtype=np.float32)
    RoundTrip(dtype)(a.size, a, out)
    return out.tolist()


def test_float4_e2m1_rounding():
    # representable: 0, 0.5, 1, 1.5, 2, 3, 4, 6 (and negatives)
    got = _round_trip(tilus.float4_e2m1, [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 7.0, 100.0, -5.0])
    assert got == [0.0, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0, 6.0, 6.0, -4.0]


def test_float8_e4m3_rounding_and_saturation():
    got = _round_trip(tilus.float8_e4m3, [1.0625, 1.1875, 448.0, 464.0, 1000.0, -1000.0, 2**-9])
    assert got == [1.0, 1.25, 448.0, 448.0, 448.0, -448.0, 2**-9]


def test_float8_e5m2_rounding_and_overflow():
    got = _round_trip(tilus.float8_e5m2, [1.125, 1.375, 57344.0, 1e6, 2**-16])
    assert got[:3] == [1.0, 1.5, 57344.0]
    assert got[3] == 57344.0  # conversions saturate (cvt.rn.satfinite), as on the GPU
    assert got[4] == 2**-16


def test_float6_e3m2_grid():
    rng = np.random.default_rng()
    a = rng.uniform(-28, 28, size=64).astype(np.float32)
    got = np.array(_round_trip(tilus.float6_e3m2, a))
    # every result is on the e3m2 grid and is a nearest grid point
    grid = sorted(
        {
            s * (1 + mm / 4) * 2.0 ** (ex - 3)
            for s in (1, -1)
            for ex in range(1, 8)
            for mm in range(4)
        }
        | {s * (mm / 4) * 2.0**-2 for s in (1, -1) for mm in range(4)}
    )
    grid = np.array(grid)
    for x, g in zip(a, got):
        assert g in grid
        assert abs(g - x) <= np.min(np.abs(grid - x)) + 1e-12


class IntCast(tilus.Script):
    def __init__(self, dtype, from_int):
        super().__init__()
        self.dtype = dtype
        self.from_int = from_int

    def __call__(self, a_ptr: ~float32, out: ~int32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        ga = self.global_view(a_ptr, dtype=float32, shape=[8])
        go = self.global_view(out, dtype=int32, shape=[8])
        a = self.load_global(ga, offsets=[0], shape=[8])
        if self.from_int:
            a = self.cast(a, dtype=int32)
        narrow = self.cast(a, dtype=self.dtype)
        self.store_global(go, self.cast(narrow, dtype=int32), offsets=[0])


@pytest.mark.parametrize("name", ["int8", "uint8", "int4b", "uint4b", "int2b", "uint16"])
def test_integer_casts_saturate_from_floats_and_wrap_from_ints(name):
    dt = getattr(tilus, name)
    a = np.array([300.7, -300.2, 127.9, -128.9, 5.5, -5.5, 255.9, 70000.0], np.float32)
    lo, hi, bits = dt.min_value(), dt.max_value(), dt.nbits
    out = np.full(8, -12345, np.int32)
    IntCast(dt, False)(a, out)
    assert out.tolist() == [int(np.clip(np.trunc(x), lo, hi)) for x in a]
    IntCast(dt, True)(a, out)
    wrapped = [(int(np.trunc(x)) - lo) % 2**bits + lo for x in a]
    assert out.tolist() == wrapped
