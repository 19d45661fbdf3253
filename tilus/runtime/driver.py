"""A thin wrapper over the CUDA driver API: contexts, modules, kernel arguments, launches."""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Sequence

from tilus.errors import TilusBackendError

TENSORMAP_BYTES = 128
TENSORMAP_ALIGN = 64


def cuda_driver():
    """Return the driver API: `cuda.bindings.driver`'s interface, its functions that tilus
    calls resolved one by one from libcuda (`tilus.runtime.libcuda`), so that no entry point
    this driver lacks is ever probed; raises TilusBackendError if cuda-bindings is missing."""
    # Imported lazily so that `import tilus` works on machines without cuda-bindings.
    try:
        from cuda.bindings import driver
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise TilusBackendError(
            "the CUDA driver API is unavailable: install the 'cuda' extra (cuda-bindings)"
        ) from e
    return _direct(driver)


@functools.cache
def _direct(bindings):
    from tilus.runtime import libcuda

    return libcuda.load(bindings) or bindings


def _error_text(err) -> str:
    """Describe a CUresult as 'NAME: description', without failing if the driver is absent."""
    drv = cuda_driver()
    name = getattr(err, "name", str(err))
    desc = ""
    try:
        e1, raw_name = drv.cuGetErrorName(err)
        e2, raw_desc = drv.cuGetErrorString(err)
        if e1 == drv.CUresult.CUDA_SUCCESS and raw_name:
            name = raw_name.decode()
        if e2 == drv.CUresult.CUDA_SUCCESS and raw_desc:
            desc = raw_desc.decode()
    except Exception:  # noqa: BLE001 - libcuda may be missing; the enum name still helps
        pass
    return f"{name}: {desc}" if desc else name


def check(result, what: str = "CUDA driver call"):
    """Unwrap a cuda-bindings `(CUresult, *values)` tuple.

    Args:
        result: What a `cuda.bindings.driver` function returned.
        what: A description of the call, for the error message.

    Returns:
        None, the single value, or a tuple of the values.

    Raises:
        TilusBackendError: The result is not CUDA_SUCCESS; the message has the error name
            and the driver's description.
    """
    drv = cuda_driver()
    if not isinstance(result, tuple):
        result = (result,)
    err, *values = result
    if err != drv.CUresult.CUDA_SUCCESS:
        raise TilusBackendError(f"{what} failed: {_error_text(err)}")
    if not values:
        return None
    return values[0] if len(values) == 1 else tuple(values)


@functools.cache
def _primary_context(device_index: int):
    # Retained once per device and never released: the context lives as long as the process,
    # exactly like PyTorch's own use of the primary context.
    drv = cuda_driver()
    check(drv.cuInit(0), "cuInit")
    dev = check(drv.cuDeviceGet(device_index), "cuDeviceGet")
    return check(drv.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")


def ensure_context(device_index: int = 0):
    """Make the device's primary context current on this thread and return it.

    PyTorch allocates in the primary context, so launching in it lets kernels use torch
    tensors' device pointers directly.

    Args:
        device_index: The CUDA device ordinal.

    Returns:
        The CUcontext now current.
    """
    drv = cuda_driver()
    ctx = _primary_context(device_index)
    check(drv.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
    return ctx


@functools.cache
def device_properties(device_index: int = 0) -> dict:
    """Return (and cache) the properties of a device that kernel planning needs.

    Args:
        device_index: The CUDA device ordinal.

    Returns:
        A dict with name, cc_major, cc_minor, sm_count, max_smem_per_block_optin,
        max_smem_per_sm and l2_bytes.
    """
    drv = cuda_driver()
    check(drv.cuInit(0), "cuInit")
    dev = check(drv.cuDeviceGet(device_index), "cuDeviceGet")
    attr = drv.CUdevice_attribute

    def get(a) -> int:
        return int(check(drv.cuDeviceGetAttribute(a, dev), f"cuDeviceGetAttribute({a.name})"))

    raw_name = check(drv.cuDeviceGetName(256, dev), "cuDeviceGetName")
    return {
        "name": raw_name.split(b"\x00", 1)[0].decode(),
        "cc_major": get(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
        "cc_minor": get(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR),
        "sm_count": get(attr.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT),
        "max_smem_per_block_optin": get(attr.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN),
        "max_smem_per_sm": get(attr.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR),
        "l2_bytes": get(attr.CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE),
    }


class KernelArg:
    """One kernel argument: host memory holding its bytes, and the address the driver reads."""

    __slots__ = ("kind", "obj", "address")

    def __init__(self, kind: str, obj, address: int):
        self.kind = kind
        self.obj = obj  # the ctypes object owning the bytes; must outlive the launch
        self.address = address

    def raw(self) -> bytes:
        """The argument's bytes, as the kernel will see them."""
        size = TENSORMAP_BYTES if self.kind == "tensormap" else ctypes.sizeof(self.obj)
        return ctypes.string_at(self.address, size)

    def __repr__(self) -> str:
        value = "<128 bytes>" if self.kind == "tensormap" else self.obj.value
        return f"KernelArg({self.kind}, {value})"


def _scalar(kind: str, ctype, value, lo: int | None = None, hi: int | None = None) -> KernelArg:
    # Range-check integers here: ctypes would silently wrap them.
    if lo is not None and not lo <= value < hi:
        raise OverflowError(f"{value} does not fit in {kind}")
    obj = ctype(value)
    return KernelArg(kind, obj, ctypes.addressof(obj))


def arg_i32(v: int) -> KernelArg:
    """A 32-bit signed integer argument (`int`)."""
    return _scalar("i32", ctypes.c_int32, v, -(2**31), 2**31)


def arg_u32(v: int) -> KernelArg:
    """A 32-bit unsigned integer argument (`unsigned`)."""
    return _scalar("u32", ctypes.c_uint32, v, 0, 2**32)


def arg_i64(v: int) -> KernelArg:
    """A 64-bit signed integer argument (`long long`)."""
    return _scalar("i64", ctypes.c_int64, v, -(2**63), 2**63)


def arg_u64(v: int) -> KernelArg:
    """A 64-bit unsigned integer argument (`unsigned long long`)."""
    return _scalar("u64", ctypes.c_uint64, v, 0, 2**64)


def arg_f32(v: float) -> KernelArg:
    """A 32-bit float argument (`float`)."""
    return _scalar("f32", ctypes.c_float, v)


def arg_ptr(addr: int) -> KernelArg:
    """A device pointer argument, given as an integer address (e.g. `tensor.data_ptr()`)."""
    return _scalar("ptr", ctypes.c_uint64, addr, 0, 2**64)


def arg_tensormap(blob: bytes) -> KernelArg:
    """A `const __grid_constant__ CUtensorMap` argument: 128 bytes, copied 64-byte aligned."""
    if len(blob) != TENSORMAP_BYTES:
        raise ValueError(f"a tensor map is {TENSORMAP_BYTES} bytes, got {len(blob)}")
    # ctypes cannot align to 64 bytes, so over-allocate and place the bytes at an aligned
    # offset inside the buffer.
    buf = (ctypes.c_char * (TENSORMAP_BYTES + TENSORMAP_ALIGN))()
    base = ctypes.addressof(buf)
    address = base + (-base) % TENSORMAP_ALIGN
    ctypes.memmove(address, blob, TENSORMAP_BYTES)
    return KernelArg("tensormap", buf, address)


def pack_args(args: Sequence[KernelArg]):
    """Build the `void*[]` array cuLaunchKernel's kernelParams expects.

    Args:
        args: The arguments in declaration order; they must stay alive until the launch.

    Returns:
        The ctypes array of pointers (keep it alive too).
    """
    for i, a in enumerate(args):
        if not isinstance(a, KernelArg):
            raise TypeError(f"kernel argument {i} is {type(a).__name__}, expected a KernelArg")
    return (ctypes.c_void_p * max(len(args), 1))(*[a.address for a in args])


class Kernel:
    """A `__global__` function of a loaded module."""

    def __init__(self, module: Module, name: str, handle):
        self.module = module  # keeps the module (and so the function) loaded
        self.name = name
        self.handle = handle

    def set_max_dynamic_shared_memory(self, nbytes: int) -> None:
        """Allow up to `nbytes` of dynamic shared memory (launches above 48 KB need this)."""
        drv = cuda_driver()
        attr = drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        check(drv.cuFuncSetAttribute(self.handle, attr, int(nbytes)), "cuFuncSetAttribute")

    def launch(
        self,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        smem: int,
        stream: int,
        args: Sequence[KernelArg],
    ) -> None:
        """Launch the kernel asynchronously on a stream.

        Args:
            grid: Blocks in x, y, z.
            block: Threads per block in x, y, z.
            smem: Dynamic shared memory bytes per block.
            stream: A CUstream handle as an int (0 is the legacy default stream), e.g.
                `torch.cuda.current_stream().cuda_stream`.
            args: The kernel arguments, in declaration order.
        """
        drv = cuda_driver()
        params = pack_args(args)
        check(
            drv.cuLaunchKernel(
                self.handle,
                *(int(g) for g in grid),
                *(int(b) for b in block),
                int(smem),
                drv.CUstream(int(stream)),
                ctypes.addressof(params),
                0,
            ),
            f"cuLaunchKernel({self.name})",
        )
        # `args` and `params` are referenced up to here; the driver has copied them by now.

    def __repr__(self) -> str:
        return f"Kernel({self.name})"


class Module:
    """A loaded cubin."""

    def __init__(self, handle):
        self.handle = handle
        self._functions: dict[str, Kernel] = {}

    @classmethod
    def load(cls, cubin: bytes) -> Module:
        """Load a cubin into the current context (call `ensure_context` first)."""
        drv = cuda_driver()
        return cls(check(drv.cuModuleLoadData(cubin), "cuModuleLoadData"))

    def function(self, name: str) -> Kernel:
        """Return the `extern "C" __global__` function with this name."""
        if name not in self._functions:
            drv = cuda_driver()
            handle = check(drv.cuModuleGetFunction(self.handle, name.encode()), f"get {name}")
            self._functions[name] = Kernel(self, name, handle)
        return self._functions[name]
