"""CPU tests of the driver wrapper: argument packing and error translation."""

from __future__ import annotations

import ctypes
import struct

import pytest

pytest.importorskip("cuda.bindings")

from cuda.bindings import driver as cu  # noqa: E402

from tilus.errors import TilusBackendError  # noqa: E402
from tilus.runtime.driver import (  # noqa: E402
    arg_f32,
    arg_i32,
    arg_i64,
    arg_ptr,
    arg_tensormap,
    arg_u32,
    arg_u64,
    check,
    pack_args,
)


def test_pack_args_points_at_values():
    blob = bytes(range(128))
    args = [
        arg_i32(-3),
        arg_u32(2**32 - 1),
        arg_i64(-(2**40)),
        arg_u64(2**63 + 5),
        arg_f32(1.5),
        arg_ptr(0xDEAD_BEEF_0000),
        arg_tensormap(blob),
    ]
    params = pack_args(args)
    assert len(params) == len(args)
    read = [ctypes.string_at(params[i], n) for i, n in enumerate([4, 4, 8, 8, 4, 8, 128])]
    assert struct.unpack("<i", read[0]) == (-3,)
    assert struct.unpack("<I", read[1]) == (2**32 - 1,)
    assert struct.unpack("<q", read[2]) == (-(2**40),)
    assert struct.unpack("<Q", read[3]) == (2**63 + 5,)
    assert struct.unpack("<f", read[4]) == (1.5,)
    assert struct.unpack("<Q", read[5]) == (0xDEAD_BEEF_0000,)
    assert read[6] == blob
    assert params[6] % 64 == 0  # the tensor map is 64-byte aligned


def test_arg_range_checks():
    with pytest.raises(OverflowError):
        arg_i32(2**31)
    with pytest.raises(OverflowError):
        arg_u32(-1)
    with pytest.raises(OverflowError):
        arg_ptr(-1)
    with pytest.raises(ValueError):
        arg_tensormap(b"\x00" * 64)
    with pytest.raises(TypeError):
        pack_args([3])


def test_check_unwraps_and_raises():
    assert check((cu.CUresult.CUDA_SUCCESS,)) is None
    assert check((cu.CUresult.CUDA_SUCCESS, 7)) == 7
    assert check((cu.CUresult.CUDA_SUCCESS, 7, 8)) == (7, 8)
    with pytest.raises(TilusBackendError, match="CUDA_ERROR_INVALID_VALUE"):
        check((cu.CUresult.CUDA_ERROR_INVALID_VALUE, None), "cuSomething")
