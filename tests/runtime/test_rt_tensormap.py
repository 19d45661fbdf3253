"""Tests of TMA descriptor validation (pure Python) and the tensor map LRU cache."""

from __future__ import annotations

import pytest

from tilus.errors import TilusArgumentError
from tilus.runtime.tensormap import TensorMapCache, validate_tiled

GOOD = dict(
    dtype_name="float16",
    address=0x7F00_0000_0000,
    shape=(100, 72),
    strides_bytes=(72 * 2, 2),
    box=(64, 64),
    swizzle="none",
)


def _args(**overrides):
    args = dict(GOOD)
    args.update(overrides)
    return args


def test_valid_converts_to_innermost_first():
    p = validate_tiled(
        **_args(shape=(4, 100, 72), strides_bytes=(100 * 144, 144, 2), box=(1, 64, 64))
    )
    assert p.rank == 3
    assert p.global_dim == (72, 100, 4)
    assert p.global_strides == (144, 100 * 144)  # innermost stride is implied
    assert p.box_dim == (64, 64, 1)
    assert p.element_strides == (1, 1, 1)
    assert p.dtype_enum == "CU_TENSOR_MAP_DATA_TYPE_FLOAT16"
    assert p.swizzle_enum == "CU_TENSOR_MAP_SWIZZLE_NONE"


@pytest.mark.parametrize(
    "overrides, needle",
    [
        (dict(box=(300, 64)), "256"),
        (dict(box=(0, 64)), "256"),
        (dict(strides_bytes=(146, 2)), "16 bytes"),
        (dict(address=0x7F00_0000_0008), "16-byte aligned"),
        (dict(strides_bytes=(2**41, 2)), "2^40"),
        (dict(strides_bytes=(144, 4)), "contiguous"),
        (dict(shape=(1,) * 6, strides_bytes=(16,) * 5 + (2,), box=(1,) * 5 + (8,)), "rank 6"),
        (dict(dtype_name="complex64"), "complex64"),
        (dict(swizzle="256B"), "swizzle"),
        (dict(swizzle="64B"), "64-byte span"),
        (dict(box=(64, 4)), "multiple of 16 bytes"),
        (dict(shape=(100,)), "same rank"),
        (dict(shape=(0, 72)), "shape[0]"),
    ],
)
def test_validation_errors(overrides, needle):
    with pytest.raises(TilusArgumentError) as info:
        validate_tiled(**_args(**overrides))
    assert needle in str(info.value)


def test_swizzle_span_fits():
    p = validate_tiled(**_args(box=(64, 64), swizzle="128B"))
    assert p.swizzle_enum == "CU_TENSOR_MAP_SWIZZLE_128B"
    validate_tiled(
        **_args(
            dtype_name="float8_e4m3",
            shape=(100, 128),
            strides_bytes=(128, 1),
            box=(64, 128),
            swizzle="128B",
        )
    )


def test_cache_lru():
    calls = []

    def fake_encoder(**kw):
        calls.append(kw)
        return bytes([len(calls)]) * 128

    cache = TensorMapCache(capacity=2, encoder=fake_encoder)
    a = cache.get(**_args())
    assert cache.get(**_args()) == a and len(calls) == 1 and cache.hits == 1
    b = cache.get(**_args(address=GOOD["address"] + 256))
    assert a != b and len(calls) == 2
    cache.get(**_args())  # touch a: b becomes least recently used
    cache.get(**_args(box=(32, 64)))  # evicts b
    assert len(cache) == 2 and len(calls) == 3
    cache.get(**_args())
    assert len(calls) == 3
    cache.get(**_args(address=GOOD["address"] + 256))
    assert len(calls) == 4
    assert calls[0]["shape"] == (100, 72)


def test_encode_passes_binding_type_checks():
    """The bindings' argument conversion must accept what encode_tiled hands them.

    Without a driver the call then fails (or succeeds, where libcuda exists); a TypeError
    would mean the arguments are of the wrong Python types.
    """
    pytest.importorskip("cuda.bindings")
    from tilus.runtime.tensormap import encode_tiled

    try:
        blob = encode_tiled(**GOOD)
    except TypeError:
        raise
    except Exception:  # noqa: BLE001 - no libcuda or no device here
        return
    assert len(blob) == 128


def test_l2_promotion_option_keys_the_cache_and_is_checked():
    import tilus
    from tilus.runtime import tensormap

    calls = []
    cache = TensorMapCache(encoder=lambda **kw: bytes([len(calls.append(kw) or calls)]) * 128)
    a = cache.get(**_args())
    with tilus.option.scoped(tma_l2_promotion=256):
        assert tensormap._l2_promotion_enum() == "CU_TENSOR_MAP_L2_PROMOTION_L2_256B"
        b = cache.get(**_args())  # another map: the promotion is part of it
    assert a != b and len(calls) == 2 and cache.get(**_args()) == a
    assert tensormap._l2_promotion_enum() == "CU_TENSOR_MAP_L2_PROMOTION_L2_128B"
    with tilus.option.scoped(tma_l2_promotion=100):
        with pytest.raises(tilus.TilusArgumentError, match="tma_l2_promotion must be one of"):
            tensormap._l2_promotion_enum()
