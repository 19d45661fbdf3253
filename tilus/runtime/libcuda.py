"""The CUDA driver functions tilus calls, each resolved alone from libcuda (no entry-point table).

cuda-bindings resolves every driver entry point it knows through ``cuGetProcAddress`` on its
first driver call; the ones this driver lacks fail, and compute-sanitizer's memcheck reports each
failure as an API error (34 on the H200's driver), burying real ones. ``Driver`` offers the few
functions tilus uses with the bindings' calling convention (a ``(CUresult, *values)`` tuple),
calling libcuda through ctypes, where each symbol is looked up by name (``dlsym``) once; the
enums and anything else come from cuda-bindings unchanged (reading an enum calls no driver).
"""

from __future__ import annotations

import ctypes
import os

_P = ctypes.c_void_p
_I = ctypes.c_int
_U = ctypes.c_uint
_PI = ctypes.POINTER(ctypes.c_int)
_PP = ctypes.POINTER(ctypes.c_void_p)
_PU32 = ctypes.POINTER(ctypes.c_uint32)
_PU64 = ctypes.POINTER(ctypes.c_uint64)
_PS = ctypes.POINTER(ctypes.c_char_p)

#: symbol -> argument types (every one returns a CUresult, an int)
SIGNATURES = {
    "cuInit": [_U],
    "cuDriverGetVersion": [_PI],
    "cuDeviceGetCount": [_PI],
    "cuDeviceGet": [_PI, _I],
    "cuDeviceGetAttribute": [_PI, _I, _I],
    "cuDeviceGetName": [ctypes.c_char_p, _I, _I],
    "cuDevicePrimaryCtxRetain": [_PP, _I],
    "cuCtxSetCurrent": [_P],
    "cuModuleLoadData": [_PP, ctypes.c_char_p],
    "cuModuleGetFunction": [_PP, _P, ctypes.c_char_p],
    "cuFuncSetAttribute": [_P, _I, _I],
    "cuLaunchKernel": [_P, _U, _U, _U, _U, _U, _U, _U, _P, _P, _P],
    "cuGetErrorName": [_I, _PS],
    "cuGetErrorString": [_I, _PS],
    "cuTensorMapEncodeTiled": [
        _P,
        _I,
        ctypes.c_uint32,
        _P,
        _PU64,
        _PU64,
        _PU32,
        _PU32,
        _I,
        _I,
        _I,
        _I,
    ],  # fmt: skip
}


class TensorMap:
    """An encoded ``CUtensorMap``: 128 bytes at a 64-byte aligned address (``getPtr()``)."""

    def __init__(self):
        self._buf = (ctypes.c_char * 192)()
        base = ctypes.addressof(self._buf)
        self._addr = base + (-base) % 64

    def getPtr(self) -> int:  # noqa: N802 - the bindings' name
        """The address of the 128 bytes."""
        return self._addr


def _int(x) -> int:
    """An int from an int, a bindings enum member or a bindings integer wrapper."""
    try:
        return int(x)
    except TypeError:
        return int(x.value)


class Driver:
    """cuda-bindings' ``driver`` module with the functions tilus calls going through ctypes."""

    cuuint32_t = int  # the bindings' integer wrappers: plain ints here
    cuuint64_t = int

    def __init__(self, lib, bindings):
        self._lib = lib
        self._bindings = bindings
        self._fns: dict = {}

    def __getattr__(self, name):
        return getattr(self._bindings, name)  # enums, types, functions tilus does not call

    @staticmethod
    def CUstream(value) -> int:  # noqa: N802 - the bindings' name
        """A stream handle (an int)."""
        return int(value or 0)

    def _call(self, name: str, *args) -> int:
        f = self._fns.get(name)
        if f is None:
            f = getattr(self._lib, name)  # dlsym of this one symbol
            f.argtypes = SIGNATURES[name]
            f.restype = ctypes.c_int
            self._fns[name] = f
        return int(f(*args))

    def _result(self, code: int):
        try:
            return self._bindings.CUresult(code)
        except (ValueError, TypeError):
            return code

    def _out(self, name: str, ctype, *args):
        value = ctype()
        code = self._call(name, ctypes.byref(value), *args)
        return self._result(code), value.value

    # --- the functions tilus calls (same arguments and results as the bindings) --------------
    def cuInit(self, flags):  # noqa: N802
        return (self._result(self._call("cuInit", int(flags))),)

    def cuDriverGetVersion(self):  # noqa: N802
        return self._out("cuDriverGetVersion", ctypes.c_int)

    def cuDeviceGetCount(self):  # noqa: N802
        return self._out("cuDeviceGetCount", ctypes.c_int)

    def cuDeviceGet(self, ordinal):  # noqa: N802
        return self._out("cuDeviceGet", ctypes.c_int, int(ordinal))

    def cuDeviceGetAttribute(self, attrib, dev):  # noqa: N802
        return self._out("cuDeviceGetAttribute", ctypes.c_int, _int(attrib), _int(dev))

    def cuDeviceGetName(self, length, dev):  # noqa: N802
        buf = ctypes.create_string_buffer(int(length))
        code = self._call("cuDeviceGetName", buf, int(length), _int(dev))
        return self._result(code), buf.raw

    def cuDevicePrimaryCtxRetain(self, dev):  # noqa: N802
        return self._out("cuDevicePrimaryCtxRetain", ctypes.c_void_p, _int(dev))

    def cuCtxSetCurrent(self, ctx):  # noqa: N802
        return (self._result(self._call("cuCtxSetCurrent", _P(_int(ctx or 0)))),)

    def cuModuleLoadData(self, image):  # noqa: N802
        return self._out("cuModuleLoadData", ctypes.c_void_p, bytes(image))

    def cuModuleGetFunction(self, module, name: bytes):  # noqa: N802
        return self._out("cuModuleGetFunction", ctypes.c_void_p, _P(_int(module)), name)

    def cuFuncSetAttribute(self, func, attrib, value):  # noqa: N802
        code = self._call("cuFuncSetAttribute", _P(_int(func)), _int(attrib), int(value))
        return (self._result(code),)

    def cuLaunchKernel(self, f, gx, gy, gz, bx, by, bz, smem, stream, params, extra):  # noqa: N802
        if not isinstance(params, int):
            params = ctypes.addressof(params) if params is not None else 0
        dims = [int(v) for v in (gx, gy, gz, bx, by, bz, smem)]
        code = self._call("cuLaunchKernel", _P(_int(f)), *dims, _P(_int(stream or 0)),
                          _P(params), _P(_int(extra or 0)))  # fmt: skip
        return (self._result(code),)

    def cuGetErrorName(self, error):  # noqa: N802
        return self._out("cuGetErrorName", ctypes.c_char_p, _int(error))

    def cuGetErrorString(self, error):  # noqa: N802
        return self._out("cuGetErrorString", ctypes.c_char_p, _int(error))

    def cuTensorMapEncodeTiled(self, dtype, rank, address, dims, strides, box, elem_strides,
                               interleave, swizzle, l2, oob):  # fmt: skip  # noqa: N802
        tmap = TensorMap()
        r = _int(rank)
        u64 = ctypes.c_uint64 * max(1, len(dims))
        s64 = ctypes.c_uint64 * max(1, len(strides))
        u32 = ctypes.c_uint32 * max(1, len(box))
        e32 = ctypes.c_uint32 * max(1, len(elem_strides))
        code = self._call(
            "cuTensorMapEncodeTiled",
            _P(tmap.getPtr()),
            _int(dtype),
            r,
            _P(_int(address)),
            u64(*[_int(d) for d in dims]),
            s64(*[_int(s) for s in strides]),
            u32(*[_int(b) for b in box]),
            e32(*[_int(e) for e in elem_strides]),
            _int(interleave),
            _int(swizzle),
            _int(l2),
            _int(oob),
        )
        return self._result(code), tmap


def load(bindings):
    """A ``Driver`` over libcuda.so.1, or None (no libcuda, or ``TILUS_DRIVER_BINDINGS`` set:
    then every call goes through cuda-bindings)."""
    if os.environ.get("TILUS_DRIVER_BINDINGS"):
        return None
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    return Driver(lib, bindings)
