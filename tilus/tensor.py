"""``tilus.Tensor``: a host-side tensor of any tilus dtype over densely bit-packed bytes."""

from __future__ import annotations

import math

import numpy as np

from tilus.dtypes import DataType, float32, from_torch_dtype, int32
from tilus.errors import TilusError
from tilus.packing import _float_table, decode, encode, pack, unpack  # noqa: F401

#: torch dtype names of the tilus types torch stores natively (the others: packed bytes only).
_TORCH_NAMES = {
    "float16": "float16",
    "bfloat16": "bfloat16",
    "float32": "float32",
    "float64": "float64",
    "int8": "int8",
    "int16": "int16",
    "int32": "int32",
    "int64": "int64",
    "uint8": "uint8",
    "uint16": "uint16",
    "uint32": "uint32",
    "uint64": "uint64",
    "boolean": "bool",
    "float8_e4m3": "float8_e4m3fn",
    "float8_e5m2": "float8_e5m2",
}


def _torch():
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency
        return None
    return torch


def _torch_dtype(dtype: DataType):
    torch = _torch()
    name = _TORCH_NAMES.get(dtype.name)
    return getattr(torch, name, None) if torch is not None and name else None


def _shape(shape) -> tuple[int, ...]:
    if isinstance(shape, int):
        shape = (shape,)
    out = tuple(int(s) for s in shape)
    if any(s < 0 for s in out):
        raise TilusError(f"a tensor shape has no negative sizes, got {list(out)}")
    return out


def _storage_bytes(dtype: DataType, numel: int) -> int:
    return (dtype.nbits * numel + 7) // 8


class Tensor:
    """A tensor of ``dtype`` and ``shape`` over ``ceil(nbits * numel / 8)`` bytes of storage.

    Element ``i`` (row-major) occupies bits ``[i * nbits, (i + 1) * nbits)`` of the storage,
    least significant bit first (little endian), possibly straddling bytes, as tilus packs
    sub-byte types in every memory space. The storage is a flat uint8 torch tensor (on the
    GPU or the CPU), or a NumPy array without torch.

    Attributes:
        dtype: the element type.
        shape: the sizes.
        storage: the bytes.
    """

    def __init__(self, dtype: DataType, shape, storage):
        self.dtype = dtype
        self.shape = _shape(shape)
        need = _storage_bytes(dtype, self.numel)
        if tuple(storage.shape) != (need,):
            raise TilusError(
                f"a {dtype} tensor of shape {list(self.shape)} needs {need} bytes of storage, "
                f"got {tuple(storage.shape)}"
            )
        self.storage = storage

    @property
    def numel(self) -> int:
        """Number of elements."""
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        """Bytes of storage: ``ceil(nbits * numel / 8)``."""
        return _storage_bytes(self.dtype, self.numel)

    @property
    def device(self) -> str:
        """ "cpu" or "cuda:N"."""
        dev = getattr(self.storage, "device", "cpu")
        return str(dev)

    def __repr__(self) -> str:
        return f"tilus.Tensor({self.dtype}, {list(self.shape)}, {self.device})"

    def _bytes_np(self) -> np.ndarray:
        s = self.storage
        return s if isinstance(s, np.ndarray) else s.detach().cpu().numpy()

    def torch(self):
        """The tensor as a torch tensor of the same dtype sharing the storage.

        Raises:
            TilusError: the dtype has no torch equivalent (sub-byte types, tfloat32).
        """
        tdt = _torch_dtype(self.dtype)
        if tdt is None:
            raise TilusError(
                f"{self.dtype} has no torch dtype; use .view(dtype=tilus.uint8) for the bytes"
            )
        s = self.storage
        if isinstance(s, np.ndarray):
            s = _torch().from_numpy(s)
        return s.view(tdt).reshape(self.shape)

    def numpy(self) -> np.ndarray:
        """The values as a NumPy array (a copy): byte-sized types in their NumPy type (bfloat16
        and float8 as float32), sub-byte integers sign- or zero-extended, sub-byte floats
        decoded to float32."""
        if self.dtype.nbits % 8 == 0 and self.dtype.name in _TORCH_NAMES:
            t = self.torch()
            if self.dtype.name in ("bfloat16", "float8_e4m3", "float8_e5m2"):
                t = t.float()
            return t.cpu().numpy().copy()
        codes = unpack(self._bytes_np(), self.dtype.nbits, self.numel)
        return decode(codes, self.dtype).reshape(self.shape)

    def view(self, *, dtype: DataType | None = None, shape=None) -> Tensor:
        """The same storage seen as another dtype and/or shape (no copy).

        Without ``shape`` the last dim is rescaled by the ratio of the element widths.

        Raises:
            TilusError: the new dtype and shape do not cover exactly the storage's bits.
        """
        dtype = self.dtype if dtype is None else dtype
        if shape is None:
            if not self.shape:
                shape = (self.nbytes * 8 // dtype.nbits,)
            else:
                last = self.shape[-1] * self.dtype.nbits
                if last % dtype.nbits:
                    raise TilusError(
                        f"cannot view the last dim of {self!r} ({last} bits) as {dtype}"
                    )
                shape = (*self.shape[:-1], last // dtype.nbits)
        shape = _shape(shape)
        if math.prod(shape) * dtype.nbits != self.numel * self.dtype.nbits:
            raise TilusError(
                f"cannot view {self!r} ({self.numel * self.dtype.nbits} bits) as {dtype} of "
                f"shape {list(shape)} ({math.prod(shape) * dtype.nbits} bits)"
            )
        return Tensor(dtype, shape, self.storage)

    def to(self, dtype: DataType) -> Tensor:
        """A copy converted to ``dtype``: torch's conversion between types torch has, else the
        tilus cast kernel ``tilus.kernels.cast`` (on the interpreter for CPU storage, on the
        GPU for CUDA storage) with tilus's rounding (nearest even, saturating; see
        ``tilus.ir.cscalar.round_float_format``)."""
        if _torch_dtype(self.dtype) is not None and _torch_dtype(dtype) is not None:
            return from_torch(self.torch().to(_torch_dtype(dtype)))
        if _cast_kernel is None:  # pragma: no cover - tilus/__init__ installs it
            raise TilusError("Tensor.to needs tilus.kernels (import tilus)")
        return _cast_kernel(self, dtype)


#: ``(tensor, dtype) -> tensor``: the cast kernel, installed by ``tilus.kernels.cast`` (which
#: is above this module: it is a Script)
_cast_kernel = None


def set_cast_kernel(fn) -> None:
    """Install the function behind :meth:`Tensor.to` for types torch lacks."""
    global _cast_kernel
    _cast_kernel = fn


# --- construction --------------------------------------------------------------------------------


def _device(device):
    torch = _torch()
    if device is None:
        return "cuda" if torch is not None and torch.cuda.is_available() else "cpu"
    return str(device)


def _from_values(values: np.ndarray, dtype: DataType, device) -> Tensor:
    """A tensor of ``dtype`` holding NumPy ``values`` (converted) on ``device``."""
    values = np.asarray(values)
    shape = values.shape
    tdt = _torch_dtype(dtype)
    torch = _torch()
    if tdt is not None:
        t = torch.from_numpy(np.ascontiguousarray(values)).to(tdt)
        return from_torch(t.to(_device(device)))
    if dtype.nbits % 8 == 0 and dtype.kind == "float":  # tfloat32: float32 bits
        data = np.ascontiguousarray(values, dtype=np.float32).view(np.uint8).reshape(-1)
    else:
        data = pack(encode(values, dtype), dtype.nbits)
    if torch is None:
        if _device(device) != "cpu":
            raise TilusError("a tilus.Tensor off the CPU needs torch")
        return Tensor(dtype, shape, data)
    return Tensor(dtype, shape, torch.from_numpy(data).to(_device(device)))


def empty(shape, dtype: DataType = float32, *, device=None) -> Tensor:
    """An uninitialised tensor."""
    shape = _shape(shape)
    n = _storage_bytes(dtype, math.prod(shape))
    torch = _torch()
    if torch is None:
        return Tensor(dtype, shape, np.empty(n, dtype=np.uint8))
    return Tensor(dtype, shape, torch.empty(n, dtype=torch.uint8, device=_device(device)))


def full(shape, fill_value, dtype: DataType = float32, *, device=None) -> Tensor:
    """A tensor with every element ``fill_value`` (rounded to ``dtype``)."""
    return _from_values(np.full(_shape(shape), fill_value, dtype=np.float64), dtype, device)


def zeros(shape, dtype: DataType = float32, *, device=None) -> Tensor:
    """A tensor of zeros."""
    return full(shape, 0, dtype, device=device)


def ones(shape, dtype: DataType = float32, *, device=None) -> Tensor:
    """A tensor of ones."""
    return full(shape, 1, dtype, device=device)


def rand(shape, dtype: DataType = float32, *, device=None, seed: int | None = None) -> Tensor:
    """Uniform values in [0, 1) (rounded to ``dtype``)."""
    return _from_values(np.random.default_rng(seed).random(_shape(shape)), dtype, device)


def randn(shape, dtype: DataType = float32, *, device=None, seed: int | None = None) -> Tensor:
    """Standard normal values (rounded to ``dtype``)."""
    rng = np.random.default_rng(seed)
    return _from_values(rng.standard_normal(_shape(shape)), dtype, device)


def randint(
    low: int, high: int, shape, dtype: DataType = int32, *, device=None, seed: int | None = None
) -> Tensor:
    """Integers uniform in [low, high).

    Raises:
        TilusError: the range is empty or does not fit ``dtype``.
    """
    if dtype.kind not in ("int", "uint"):
        raise TilusError(f"randint needs an integer dtype, got {dtype}")
    lo = -(1 << (dtype.nbits - 1)) if dtype.kind == "int" else 0
    hi = lo + (1 << dtype.nbits)
    if not lo <= low < high <= hi:
        raise TilusError(f"randint range [{low}, {high}) is empty or outside {dtype} [{lo}, {hi})")
    rng = np.random.default_rng(seed)
    return _from_values(rng.integers(low, high, _shape(shape)), dtype, device)


def from_torch(t) -> Tensor:
    """A tensor sharing the memory of torch tensor ``t`` (made contiguous first, a copy then)."""
    dtype = from_torch_dtype(t.dtype)
    if dtype is None:
        raise TilusError(f"torch dtype {t.dtype} has no tilus equivalent")
    t = t.contiguous()
    torch = _torch()
    return Tensor(dtype, tuple(t.shape), t.reshape(-1).view(torch.uint8))


def view_torch(t, dtype: DataType | None = None, shape=None) -> Tensor:
    """Torch tensor ``t``'s memory seen as a tilus tensor (no copy; ``t`` must be contiguous):
    e.g. a uint8 tensor of packed weights as ``int4b`` of a given shape.

    Raises:
        TilusError: ``t`` is not contiguous, or the bits do not match.
    """
    if not t.is_contiguous():
        raise TilusError("view_torch needs a contiguous tensor (it shares the memory)")
    base = from_torch(t)
    return base if dtype is None and shape is None else base.view(dtype=dtype, shape=shape)
