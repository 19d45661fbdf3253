"""The driver functions tilus calls, resolved one by one from libcuda (a fake libcuda here)."""

from __future__ import annotations

import ctypes

import pytest

from tilus.runtime import libcuda

bindings = pytest.importorskip("cuda.bindings.driver")


class FakeLib:
    """Only the symbols looked up exist; records each lookup and each call."""

    def __init__(self):
        self.looked_up: list[str] = []
        self.calls: list[tuple] = []

    def __getattr__(self, name):
        if name not in libcuda.SIGNATURES:
            raise AttributeError(name)
        impl = getattr(self, "_" + name, None)

        def f(*args):
            self.calls.append((name, args))
            return impl(*args) if impl else 0

        self.looked_up.append(name)
        setattr(self, name, f)
        return f

    @staticmethod
    def _cuDeviceGet(ref, ordinal):  # noqa: N802
        ref._obj.value = ordinal + 10
        return 0

    @staticmethod
    def _cuDeviceGetName(buf, length, dev):  # noqa: N802
        buf.value = b"Fake H200"
        return 0

    @staticmethod
    def _cuDeviceGetAttribute(ref, attrib, dev):  # noqa: N802
        ref._obj.value = 132 if dev == 10 else -1
        return 0

    @staticmethod
    def _cuModuleLoadData(ref, image):  # noqa: N802
        return 200 if not image else 0  # CUDA_ERROR_INVALID_IMAGE

    @staticmethod
    def _cuTensorMapEncodeTiled(tmap, dtype, rank, addr, dims, strides, box, es, *enums):  # noqa: N802
        assert (rank, [dims[i] for i in range(rank)], strides[0], box[1]) == (2, [64, 32], 128, 8)
        ctypes.memmove(tmap.value, bytes(range(128)), 128)
        return 0


def test_only_the_called_symbols_are_resolved_and_results_match_the_bindings():
    lib = FakeLib()
    drv = libcuda.Driver(lib, bindings)
    err, dev = drv.cuDeviceGet(0)
    assert err == bindings.CUresult.CUDA_SUCCESS and dev == 10
    err, name = drv.cuDeviceGetName(256, dev)
    assert name.split(b"\x00")[0] == b"Fake H200"
    attr = bindings.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
    assert drv.cuDeviceGetAttribute(attr, dev) == (bindings.CUresult.CUDA_SUCCESS, 132)
    err, _ = drv.cuModuleLoadData(b"")
    assert err == bindings.CUresult.CUDA_ERROR_INVALID_IMAGE
    drv.cuDeviceGet(1)  # resolved once
    assert lib.looked_up == ["cuDeviceGet", "cuDeviceGetName", "cuDeviceGetAttribute",
                             "cuModuleLoadData"]  # fmt: skip
    assert drv.CUresult is bindings.CUresult  # enums come from the bindings


def test_tensor_map_and_launch_arguments():
    lib = FakeLib()
    drv = libcuda.Driver(lib, bindings)
    u32, u64 = drv.cuuint32_t, drv.cuuint64_t
    err, tmap = drv.cuTensorMapEncodeTiled(
        bindings.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_FLOAT16, u32(2), 4096,
        [u64(64), u64(32)], [u64(128)], [u32(64), u32(8)], [u32(1), u32(1)],
        bindings.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
        bindings.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B,
        bindings.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
        bindings.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
    )  # fmt: skip
    assert err == bindings.CUresult.CUDA_SUCCESS and tmap.getPtr() % 64 == 0
    assert ctypes.string_at(tmap.getPtr(), 128) == bytes(range(128))
    params = (ctypes.c_void_p * 1)(0)
    assert drv.cuLaunchKernel(7, 2, 1, 1, 128, 1, 1, 0, drv.CUstream(0), params, 0)[0] == 0
    name, args = lib.calls[-1]
    assert name == "cuLaunchKernel" and args[0].value == 7 and args[1:8] == (2, 1, 1, 128, 1, 1, 0)
    assert args[9].value == ctypes.addressof(params)


def test_bindings_only_without_libcuda(monkeypatch):
    monkeypatch.setenv("TILUS_DRIVER_BINDINGS", "1")
    assert libcuda.load(bindings) is None


@pytest.mark.gpu
def test_the_real_driver_goes_through_libcuda():
    from tests.cuda.conftest import _gpu_available

    if not _gpu_available():
        pytest.skip("needs torch with a Hopper GPU")
    from tilus.runtime import driver

    drv = driver.cuda_driver()
    assert isinstance(drv, libcuda.Driver)
    props = driver.device_properties(0)
    assert props["sm_count"] > 0 and props["cc_major"] == 9 and props["name"]
