"""Pure-Python tests of the wgmma shared-memory descriptor encoding and K-major tile fields."""

from __future__ import annotations

import pytest

from tilus.backends.cuda.ptx.wgmma import SWIZZLE_CODES, KMajorTile, SmemDescriptor


def test_bit_positions():
    d = SmemDescriptor(start_address=0x10, lbo=0x20, sbo=0x40, base_offset=5, swizzle=64)
    v = d.encode()
    assert v & 0x3FFF == 0x1
    assert (v >> 16) & 0x3FFF == 0x2
    assert (v >> 32) & 0x3FFF == 0x4
    assert (v >> 49) & 0x7 == 5
    assert v >> 62 == 2


@pytest.mark.parametrize("swizzle", sorted(SWIZZLE_CODES))
def test_roundtrip(swizzle):
    d = SmemDescriptor(start_address=0x3FFF0, lbo=0x3FFF0, sbo=1024, base_offset=3, swizzle=swizzle)
    assert SmemDescriptor.decode(d.encode()) == d


def test_swizzle_codes():
    assert SWIZZLE_CODES == {0: 0, 128: 1, 64: 2, 32: 3}


def test_kmajor_128b_fp16():
    t = KMajorTile(rows=128, cols=64, dtype_bytes=2, swizzle=128)
    assert (t.lbo, t.sbo) == (16, 1024)
    assert t.high_bits() == (1 << 62) | (64 << 32) | (1 << 16)
    assert t.high_bits() == 0x4000004000010000
    assert [t.k_offset(k) for k in (0, 16, 32, 48)] == [0, 32, 64, 96]
    assert t.row_offset(64) == 64 * 128
    assert t.bytes == 128 * 64 * 2


@pytest.mark.parametrize("swizzle,cols,sbo", [(64, 32, 512), (32, 16, 256)])
def test_kmajor_narrow_swizzles(swizzle, cols, sbo):
    t = KMajorTile(rows=64, cols=cols, dtype_bytes=2, swizzle=swizzle)
    assert t.sbo == sbo
    assert t.descriptor(0).swizzle == swizzle
    assert t.high_bits() >> 62 == SWIZZLE_CODES[swizzle]


def test_kmajor_two_atoms_along_k():
    # 128 fp16 along K = two 128-byte column blocks of `rows` rows each.
    t = KMajorTile(rows=64, cols=128, dtype_bytes=2, swizzle=128)
    assert t.k_offset(64) == 64 * 128
    assert t.k_offset(80) == 64 * 128 + 32


def test_kmajor_no_swizzle():
    t = KMajorTile(rows=64, cols=32, dtype_bytes=2, swizzle=0)
    # Core matrices: 8 rows x 16 bytes = 128 contiguous bytes; 4 of them along K per 8 rows.
    assert (t.lbo, t.sbo) == (128, 4 * 128)
    assert t.k_offset(8) == 128
    assert t.row_offset(8) == 512
    assert t.high_bits() >> 62 == 0


def test_base_offset():
    t = KMajorTile(rows=64, cols=64, dtype_bytes=2, swizzle=128)
    assert t.base_offset(2048) == 0  # aligned to the 1024-byte pattern
    assert t.base_offset(2048 + 3 * 128) == 3
    assert t.descriptor(2048 + 3 * 128).base_offset == 3


def test_bf16_and_tf32_like_sizes():
    assert KMajorTile(rows=64, cols=32, dtype_bytes=4, swizzle=128).sbo == 1024


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(rows=60, cols=64),  # rows not a multiple of 8
        dict(rows=64, cols=48),  # 96-byte rows do not fill a 128B atom
        dict(rows=64, cols=64, swizzle=96),
    ],
)
def test_kmajor_rejects(kwargs):
    with pytest.raises(ValueError):
        KMajorTile(**kwargs)


def test_encode_rejects_misaligned():
    with pytest.raises(ValueError):
        SmemDescriptor(start_address=8, lbo=16, sbo=1024).encode()
    with pytest.raises(ValueError):
        SmemDescriptor(start_address=1 << 18, lbo=16, sbo=1024).encode()
    with pytest.raises(ValueError):
        SmemDescriptor(start_address=0, lbo=16, sbo=1024, base_offset=8).encode()
    with pytest.raises(ValueError):
        KMajorTile(rows=64, cols=64).k_offset(4)
