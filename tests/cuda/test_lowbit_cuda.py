"""Sub-byte tiles on the CUDA backend without a GPU: NVRTC to sm_90a, then the generated code
on the CPU emulator, bit-identical to the interpreter (every code of every type), and the
located refusals."""

from __future__ import annotations

import numpy as np
import pytest

import tilus
from tests.cuda.conftest import needs_nvrtc
from tests.helpers_cpu_cuda import available, emulate
from tests.helpers_errors import err_line
from tests.lowbit_kernels import Both, Dequant, Repack, ViewBytes, both_inputs, codes, grid
from tilus import float16, int4b, int32, uint8, void_p
from tilus.tensor import pack
from tilus.utils import cdiv

needs_gxx = pytest.mark.skipif(not available(), reason="needs g++ for the CPU emulator")
rng = np.random.default_rng()


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TILUS_CACHE_DIR", str(tmp_path))


#: one type per path of the generated code: the u4/i4 magic numbers, the paired magic-number
#: cast of the other widths (each table: 1, 2, 3, 5, 6, 7 bits, both signs; 3 and 7 bits
#: straddle bytes and words, 5-7 bits read some pairs from funnel-shifted words), and each
#: float family shape (IEEE-like X=5 included); the GPU tier runs every type (the byte pairs
#: of int8/uint8: ``test_bytes_to_f16_...``)
EMULATED = [tilus.int4b, tilus.uint1b, tilus.int2b, tilus.uint3b, tilus.int5b, tilus.uint6b,
            tilus.int7b, tilus.float3_e1m1, tilus.float4_e2m1, tilus.float6_e3m2,
            tilus.float7_e5m1]  # fmt: skip


@needs_nvrtc
@needs_gxx
@pytest.mark.parametrize("dt", EMULATED, ids=str)
def test_casts_both_ways_match_the_interpreter_bit_for_bit(dt):
    args = both_inputs(rng, dt, 250, 262)  # every code, every f16 value, ragged tiles
    ref = [x.copy() if isinstance(x, np.ndarray) else x for x in args]
    emulate(Both(dt), args, grid(250, 262))
    Both(dt)(*ref)
    np.testing.assert_array_equal(args[3].view(np.uint32), ref[3].view(np.uint32))
    np.testing.assert_array_equal(args[5], ref[5])
    assert (args[5][-4:] == 0xA5).all()


@needs_nvrtc
@needs_gxx
@pytest.mark.parametrize("dt", [tilus.int3b], ids=str)
def test_packed_round_trip_with_padded_rows(dt):
    m, n, ld = 19, 45, 47
    c = codes(rng, dt, (m, n))
    nb = (m * ld * dt.nbits + 7) // 8
    got = np.full(nb, 0x3C, np.uint8)
    want = got.copy()
    emulate(Repack(dt), (m, n, ld, pack(c, dt.nbits), got), grid(m, n))
    Repack(dt)(m, n, ld, pack(c, dt.nbits), want)
    np.testing.assert_array_equal(got, want)


@needs_nvrtc
@needs_gxx
@pytest.mark.parametrize("dt", [tilus.uint2b], ids=str)
def test_view_of_uint8_tiles(dt):
    m, n = 21, 96
    raw = pack(codes(rng, dt, (m, n)), dt.nbits).reshape(m, -1)
    got = np.full((m, n), np.nan, np.float16)
    want = got.copy()
    emulate(ViewBytes(dt), (m, n, raw, got), grid(m, n))
    ViewBytes(dt)(m, n, raw, want)
    np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))


@needs_nvrtc
def test_int4_to_f16_uses_the_magic_number_path_and_vector_loads():
    from tilus.runtime.sass import sass_opcodes

    m, n = 64, 256
    k = Dequant(int4b, float16)
    ck = tilus.compile(k, m, n, np.zeros(m * n // 2, np.uint8), np.zeros((m, n), np.float16))
    assert "tl_hfma2" in ck.kernel.source and "uint2" in ck.kernel.source
    ops = sass_opcodes(ck.sass())
    assert ops.get("HFMA2", 0) >= 8 and ops.get("PRMT", 0) >= 8  # a byte permute, an fma a byte
    assert not ops.get("LDL") and not ops.get("STL")


@needs_nvrtc
@pytest.mark.parametrize(
    "dt", [tilus.uint1b, tilus.int2b, tilus.uint3b, tilus.int5b, tilus.uint6b, tilus.int7b], ids=str
)
def test_small_ints_to_f16_use_the_paired_magic_number_cast(dt):
    """Two codes a byte permute (of funnel-shifted words where a pair would not fit under f16's
    mantissa as it lies), a logic op and an f16x2 fma; no integer-to-float conversion."""
    from tilus.runtime.sass import sass_opcodes

    m, n = 64, 256
    ck = tilus.compile(Dequant(dt, float16), m, n, np.zeros(m * n * dt.nbits // 8, np.uint8),
                       np.zeros((m, n), np.float16))  # fmt: skip
    assert f"tl_ik{dt.nbits}" in ck.kernel.source
    ops = sass_opcodes(ck.sass())
    assert ops.get("HFMA2", 0) >= 8 and ops.get("PRMT", 0) >= 8
    assert not any(op.startswith(("I2F", "I2FP")) for op in ops), ops


class CarryPacked(tilus.Script):
    """int4b [64, 64] -> fp16: the first 32 columns loaded, copied into a register tile with
    ``assign``, then the next 32 loaded over the source; the copy is cast and stored."""

    def __call__(self, w_ptr: ~uint8, out_ptr: ~float16):
        self.attrs.blocks = [1]
        self.attrs.warps = 2
        g = self.global_view(w_ptr, dtype=int4b, shape=[64, 64])
        go = self.global_view(out_ptr, dtype=float16, shape=[64, 64])
        t = self.load_global(g, offsets=[0, 0], shape=[64, 32])
        keep = self.register_tensor(dtype=int4b, shape=[64, 32])
        self.assign(keep, t)
        self.assign(t, self.load_global(g, offsets=[0, 32], shape=[64, 32]))
        self.store_global(go, self.cast(keep, float16), offsets=[0, 0])
        self.store_global(go, self.cast(t, float16), offsets=[0, 32])


@needs_nvrtc
@needs_gxx
def test_assign_of_a_packed_tile_copies_its_words():
    raw = pack(codes(rng, int4b, (64, 64)), 4).reshape(64, 32)
    got = np.full((64, 64), np.nan, np.float16)
    want = got.copy()
    emulate(CarryPacked(), (raw, got), [1])
    CarryPacked()(raw, want)
    np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))
    assert not np.isnan(want).any()


class AddOnPacked(tilus.Script):
    def __call__(self, w_ptr: ~uint8):
        self.attrs.blocks = [1]
        self.attrs.warps = 1
        g = self.global_view(w_ptr, dtype=int4b, shape=[16, 32])
        t = self.load_global(g, offsets=[0, 0], shape=[16, 32])
        self.store_global(g, t + t, offsets=[0, 0])  # ERR


class SharedPacked(tilus.Script):
    def __call__(self, w_ptr: ~uint8):
        self.attrs.blocks = [1]
        self.attrs.warps = 1
        self.shared_tensor(dtype=int4b, shape=[16, 32])  # ERR


def _no_c_type():
    """A byte-sized dtype the CUDA backend has no C type for (fp8 until it lowers them)."""
    from tilus.backends.cuda.codegen.scalar import C_TYPES

    left = [d for d in tilus.dtypes.ALL_DTYPES.values() if d.nbits % 8 == 0]
    return next((d for d in left if d.name not in C_TYPES), None)


NO_C = _no_c_type()


class Fp8Tile(tilus.Script):
    def __call__(self, a_ptr: ~float16):
        self.attrs.blocks = [1]
        self.attrs.warps = 1
        g = self.global_view(a_ptr, dtype=float16, shape=[16, 32])
        t = self.load_global(g, offsets=[0, 0], shape=[16, 32])
        self.store_global(g, self.cast(t, NO_C).to(float16), offsets=[0, 0])  # ERR


@pytest.mark.parametrize(
    "cls, args, match",
    [
        (AddOnPacked, (np.zeros(256, np.uint8),), "binary on the int4b tile"),
        (SharedPacked, (np.zeros(256, np.uint8),), "shared tile %s of sub-byte int4b"),
        pytest.param(
            Fp8Tile,
            (np.zeros((16, 32), np.float16),),
            f"dtype {NO_C}, which the CUDA backend",
            marks=pytest.mark.skipif(NO_C is None, reason="every dtype has a C type"),
        ),
    ],
    ids=["elementwise", "shared", "no-c-type"],
)
def test_what_the_cuda_backend_cannot_lower_is_refused_at_its_line(cls, args, match):
    with pytest.raises(tilus.TilusCompileError, match=match) as e:
        tilus.compile(cls(), *args)
    assert e.value.loc.line == err_line(cls)


class BytesToHalf(tilus.Script):
    """int8/uint8 [m, n] (any pointer) -> fp16: load, cast, store."""

    def __init__(self, dt):
        super().__init__()
        self.dt = dt

    def __call__(self, m: int32, n: int32, w_ptr: void_p, out_ptr: ~float16):
        self.attrs.blocks = [cdiv(m, 16), cdiv(n, 32)]
        self.attrs.warps = 1
        gw = self.global_view(w_ptr, dtype=self.dt, shape=[m, n])
        go = self.global_view(out_ptr, dtype=float16, shape=[m, n])
        om, on = self.blockIdx.x * 16, self.blockIdx.y * 32
        t = self.load_global(gw, offsets=[om, on], shape=[16, 32])
        self.store_global(go, self.cast(t, float16), offsets=[om, on])


@needs_nvrtc
@pytest.mark.parametrize("dt", [tilus.int8, tilus.uint8], ids=str)
def test_bytes_to_f16_go_two_at_a_time_under_the_exponent_of_1024(dt):
    from tilus.runtime.sass import sass_opcodes

    m, n = 37, 250  # every byte, ragged tiles
    w = np.arange(m * n, dtype=np.int64).astype(np.uint8).reshape(m, n)
    ck = tilus.compile(BytesToHalf(dt), m, n, w, np.zeros((m, n), np.float16))
    assert "tl_hsub2" in ck.kernel.source
    ops = sass_opcodes(ck.sass())
    assert ops.get("HADD2", 0) >= 8  # the f16x2 subtraction (ptxas spells it HADD2)
    assert not any(op.startswith(("I2F", "I2FP")) for op in ops), ops
    if available():
        got = np.full((m, n), np.nan, np.float16)
        emulate(BytesToHalf(dt), (m, n, w, got), [cdiv(m, 16), cdiv(n, 32)])
        want = w.view(np.int8) if dt == tilus.int8 else w
        np.testing.assert_array_equal(got, want.astype(np.float16))
