"""Host-side encoding of TMA tensor maps (CUtensorMap), validated before the driver sees them."""

from __future__ import annotations

import ctypes
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tilus.errors import TilusArgumentError
from tilus.option import get_option
from tilus.runtime.driver import check, cuda_driver

# dtype name -> (element bytes, CUtensorMapDataType member). TMA only moves bytes and fills
# out-of-bounds elements with zero bits, so types the driver lacks (signed 8/16-bit ints,
# fp8) are described with the unsigned integer type of the same width.
DTYPES: dict[str, tuple[int, str]] = {
    "float16": (2, "CU_TENSOR_MAP_DATA_TYPE_FLOAT16"),
    "bfloat16": (2, "CU_TENSOR_MAP_DATA_TYPE_BFLOAT16"),
    "float32": (4, "CU_TENSOR_MAP_DATA_TYPE_FLOAT32"),
    "float64": (8, "CU_TENSOR_MAP_DATA_TYPE_FLOAT64"),
    "int8": (1, "CU_TENSOR_MAP_DATA_TYPE_UINT8"),
    "int16": (2, "CU_TENSOR_MAP_DATA_TYPE_UINT16"),
    "int32": (4, "CU_TENSOR_MAP_DATA_TYPE_INT32"),
    "int64": (8, "CU_TENSOR_MAP_DATA_TYPE_INT64"),
    "uint8": (1, "CU_TENSOR_MAP_DATA_TYPE_UINT8"),
    "uint16": (2, "CU_TENSOR_MAP_DATA_TYPE_UINT16"),
    "uint32": (4, "CU_TENSOR_MAP_DATA_TYPE_UINT32"),
    "uint64": (8, "CU_TENSOR_MAP_DATA_TYPE_UINT64"),
    "float8_e4m3": (1, "CU_TENSOR_MAP_DATA_TYPE_UINT8"),
    "float8_e5m2": (1, "CU_TENSOR_MAP_DATA_TYPE_UINT8"),
}

# swizzle name -> (span in bytes, CUtensorMapSwizzle member); span 0 means no swizzle.
SWIZZLES: dict[str, tuple[int, str]] = {
    "none": (0, "CU_TENSOR_MAP_SWIZZLE_NONE"),
    "32B": (32, "CU_TENSOR_MAP_SWIZZLE_32B"),
    "64B": (64, "CU_TENSOR_MAP_SWIZZLE_64B"),
    "128B": (128, "CU_TENSOR_MAP_SWIZZLE_128B"),
}

MAX_RANK = 5
MAX_BOX_DIM = 256
MAX_STRIDE = 2**40
MAX_DIM = 2**32
ADDRESS_ALIGN = 16
STRIDE_ALIGN = 16


@dataclass(frozen=True)
class TiledParams:
    """Validated arguments of cuTensorMapEncodeTiled, in the driver's innermost-first order."""

    dtype_enum: str
    rank: int
    address: int
    global_dim: tuple[int, ...]
    global_strides: tuple[int, ...]  # bytes, rank - 1 entries (the innermost is implied)
    box_dim: tuple[int, ...]
    element_strides: tuple[int, ...]
    swizzle_enum: str


def _fail(msg: str) -> None:
    raise TilusArgumentError(f"invalid TMA tensor map: {msg}")


def validate_tiled(
    *,
    dtype_name: str,
    address: int,
    shape: Sequence[int],
    strides_bytes: Sequence[int],
    box: Sequence[int],
    swizzle: str = "none",
) -> TiledParams:
    """Check a tiled tensor map against the TMA limits and convert it to driver order.

    Pure Python: runs without a GPU. See `encode_tiled` for the arguments.

    Returns:
        The driver-order parameters.

    Raises:
        TilusArgumentError: A limit is violated; the message names the limit.
    """
    if dtype_name not in DTYPES:
        _fail(f"dtype {dtype_name!r} is not supported by TMA (supported: {', '.join(DTYPES)})")
    elem, dtype_enum = DTYPES[dtype_name]
    if swizzle not in SWIZZLES:
        _fail(f"swizzle {swizzle!r} is not one of {', '.join(SWIZZLES)}")
    span, swizzle_enum = SWIZZLES[swizzle]
    shape, strides, box = tuple(shape), tuple(strides_bytes), tuple(box)
    rank = len(shape)
    if not 1 <= rank <= MAX_RANK:
        _fail(f"rank {rank} is outside 1..{MAX_RANK}")
    if len(strides) != rank or len(box) != rank:
        _fail(f"shape {shape}, strides {strides} and box {box} must have the same rank")
    for i, n in enumerate(shape):
        if not 1 <= n <= MAX_DIM:
            _fail(f"shape[{i}] = {n} is outside 1..2^32")
    for i, b in enumerate(box):
        if not 1 <= b <= MAX_BOX_DIM:
            _fail(f"box[{i}] = {b} is outside 1..{MAX_BOX_DIM} (TMA boxes are at most 256 per dim)")
    inner_bytes = box[-1] * elem
    if inner_bytes % 16 != 0:
        _fail(
            f"the innermost box dim spans {inner_bytes} bytes ({box[-1]} x {elem}-byte "
            f"{dtype_name}); it must be a multiple of 16 bytes"
        )
    if span and inner_bytes > span:
        _fail(
            f"the innermost box dim spans {inner_bytes} bytes ({box[-1]} x {elem}-byte "
            f"{dtype_name}), more than the {span}-byte span of swizzle {swizzle}"
        )
    if address % ADDRESS_ALIGN != 0:
        _fail(f"global address {address:#x} is not {ADDRESS_ALIGN}-byte aligned")
    if strides[-1] != elem:
        _fail(
            f"the innermost dim must be contiguous: its stride is {strides[-1]} bytes, "
            f"expected the element size {elem}"
        )
    for i, s in enumerate(strides[:-1]):
        if s <= 0 or s % STRIDE_ALIGN != 0:
            _fail(f"strides_bytes[{i}] = {s} is not a positive multiple of {STRIDE_ALIGN} bytes")
        if s >= MAX_STRIDE:
            _fail(f"strides_bytes[{i}] = {s} is not below 2^40 bytes")
    # The driver lists dims innermost first and omits the innermost stride.
    return TiledParams(
        dtype_enum=dtype_enum,
        rank=rank,
        address=address,
        global_dim=shape[::-1],
        global_strides=strides[-2::-1],
        box_dim=box[::-1],
        element_strides=(1,) * rank,
        swizzle_enum=swizzle_enum,
    )


def encode_tiled(
    *,
    dtype_name: str,
    address: int,
    shape: Sequence[int],
    strides_bytes: Sequence[int],
    box: Sequence[int],
    swizzle: str = "none",
) -> bytes:
    """Encode a tiled TMA descriptor with cuTensorMapEncodeTiled.

    Out-of-bounds elements are filled with zeros, there is no interleave, and L2 promotion
    (the granule in which L2 fetches the box's rows from DRAM) is the ``tma_l2_promotion``
    option: 128 bytes unless set to 0, 64 or 256.

    Args:
        dtype_name: Element type, e.g. "float16", "bfloat16", "float8_e4m3", "int32".
        address: Device address of element (0, ..., 0).
        shape: Global extents, outermost first (numpy order).
        strides_bytes: Global strides in bytes, outermost first; the last must equal the
            element size.
        box: The tile shape one TMA copy moves, outermost first.
        swizzle: Shared memory swizzle: "none", "32B", "64B" or "128B".

    Returns:
        The 128-byte CUtensorMap, to be passed as a `__grid_constant__` kernel argument.

    Raises:
        TilusArgumentError: The arguments violate a TMA limit (checked before the driver).
        TilusBackendError: The driver rejected the descriptor.
    """
    p = validate_tiled(
        dtype_name=dtype_name,
        address=address,
        shape=shape,
        strides_bytes=strides_bytes,
        box=box,
        swizzle=swizzle,
    )
    drv = cuda_driver()
    # The bindings want their own fixed-width integer wrappers, not Python ints.
    u32, u64 = drv.cuuint32_t, drv.cuuint64_t
    tmap = check(
        drv.cuTensorMapEncodeTiled(
            getattr(drv.CUtensorMapDataType, p.dtype_enum),
            u32(p.rank),
            p.address,
            [u64(d) for d in p.global_dim],
            [u64(s) for s in p.global_strides],
            [u32(b) for b in p.box_dim],
            [u32(e) for e in p.element_strides],
            drv.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
            getattr(drv.CUtensorMapSwizzle, p.swizzle_enum),
            getattr(drv.CUtensorMapL2promotion, _l2_promotion_enum()),
            # FILL_NONE means out-of-bounds elements read as zero.
            drv.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        ),
        "cuTensorMapEncodeTiled",
    )
    return ctypes.string_at(tmap.getPtr(), 128)


#: the ``tma_l2_promotion`` option (bytes) -> CUtensorMapL2promotion
L2_PROMOTIONS = {0: "NONE", 64: "L2_64B", 128: "L2_128B", 256: "L2_256B"}


def _l2_promotion_enum() -> str:
    """The CUtensorMapL2promotion name for the current ``tma_l2_promotion`` option."""
    v = get_option("tma_l2_promotion")
    if v not in L2_PROMOTIONS:
        raise TilusArgumentError(
            f"tma_l2_promotion must be one of {sorted(L2_PROMOTIONS)} (bytes), got {v!r}"
        )
    return "CU_TENSOR_MAP_L2_PROMOTION_" + L2_PROMOTIONS[v]


class TensorMapCache:
    """An LRU cache of encoded tensor maps, keyed by every argument of `encode_tiled`.

    Repeated launches on the same pointer and shape then skip the driver call.
    """

    def __init__(self, capacity: int = 1024, encoder: Callable[..., bytes] = encode_tiled):
        """Create an empty cache.

        Args:
            capacity: Most entries kept; the least recently used is evicted first.
            encoder: The encoding function (replaceable for testing).
        """
        self.capacity = capacity
        self.encoder = encoder
        self.hits = 0
        self.misses = 0
        self._entries: OrderedDict[tuple, bytes] = OrderedDict()
        self._lock = threading.Lock()

    def get(
        self,
        *,
        dtype_name: str,
        address: int,
        shape: Sequence[int],
        strides_bytes: Sequence[int],
        box: Sequence[int],
        swizzle: str = "none",
    ) -> bytes:
        """Return the encoded tensor map, encoding it on a miss (same arguments as encode_tiled)."""
        key = (dtype_name, address, tuple(shape), tuple(strides_bytes), tuple(box), swizzle,
               get_option("tma_l2_promotion"))  # fmt: skip
        with self._lock:
            blob = self._entries.get(key)
            if blob is not None:
                self._entries.move_to_end(key)
                self.hits += 1
                return blob
        blob = self.encoder(
            dtype_name=dtype_name,
            address=address,
            shape=key[2],
            strides_bytes=key[3],
            box=key[4],
            swizzle=swizzle,
        )
        with self._lock:
            self.misses += 1
            self._entries[key] = blob
            self._entries.move_to_end(key)
            while len(self._entries) > self.capacity:
                self._entries.popitem(last=False)
        return blob

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        """Drop every entry."""
        with self._lock:
            self._entries.clear()
