"""The mma kernel's weight types: their offline fragment-order packing and in-register dequant.

``MatmulWxA16Mma`` (``matmul_wx_a16_mma.py``) reads each 16-row x 128-K chunk of the weights
as one run of ``2 * bits`` 32-bit words a lane: the 64 codes of its share of the ``m16n8k16``
A fragments (rows ``lane / 4`` and 8 below it, K pairs ``2 * (lane % 4)`` and 8 past it, for
the chunk's 8 K steps). Two packings:

* **4-bit** (``uint4b``, ``int4b``, ``float4_e2m1``): a word a K step, fragment register
  ``j``'s two elements in nibbles ``j`` and ``j + 4`` (16 bits apart, ``PACK_ORDER``), so that
  one logic op takes both out of the word. The integers store ``c + 8`` and dequantize by the
  kernel's magic numbers (``MAGIC_*``: one shift, four logic ops and four f16x2 subtractions
  a word); the float's pairs go through the backend's sub-byte float cast, which is made for
  exactly this order (a pair 16 bits apart).
* **the others** (1-3 and 5-8-bit integers, the other floats): the lane's 64 codes densely packed,
  element ``i`` at bit ``i * bits``, in the order K step, K half, row half, pair element, so
  that each fragment register is a pair of consecutive codes, which the backend's paired
  magic-number cast (a byte permute, a logic op and an f16x2 fma a pair) turns into the
  register itself. An unsigned code is stored with its top bit flipped and read as the signed
  type of its width: ``c ^ 2^(bits - 1)`` seen as signed is ``c - 2^(bits - 1)``, the code less
  its zero point, with no subtraction.
"""

from __future__ import annotations

import numpy as np

import tilus
from tilus.errors import TilusArgumentError
from tilus.utils import cdiv

CHUNK = 128  # K of one packed chunk: the 8 k16 steps a lane's run covers

#: the weight types the mma kernel takes
MMA_TYPES = (
    tilus.uint4b, tilus.int4b, tilus.float4_e2m1,
    tilus.uint1b, tilus.int1b, tilus.uint2b, tilus.int2b, tilus.uint3b, tilus.int3b,
    tilus.float3_e1m1,
    tilus.uint5b, tilus.int5b, tilus.uint6b, tilus.int6b, tilus.uint7b, tilus.int7b,
    tilus.uint8, tilus.int8, tilus.float5_e2m2, tilus.float5_e3m1, tilus.float6_e2m3,
    tilus.float6_e3m2, tilus.float6_e4m1, tilus.float7_e2m4, tilus.float7_e3m3,
    tilus.float7_e4m2,
)  # fmt: skip

#: the packed order (outer to inner) of a 16-row x 128-K chunk's 4-bit codes: the lane's row
#: (g = lane / 4), K pair (q = lane % 4), then its registers: K step s (a 32-bit word), the
#: pair element e, the K half h (8 past), the row half rh (8 rows down); so a word's nibbles
#: j and j + 4 are fragment register j = 2 h + rh
PACK_ORDER = "g q s e h rh"
#: the order of the other types' codes: each register's pair (e) consecutive
DENSE_ORDER = "g q s h rh e"
#: fragment register j's nibbles (j and j + 4, 16 bits apart) of a word shifted right by
#: ``MAGIC_SHR[j]`` lie under ``MAGIC_MASK[j]``: bits 0-3 and 16-19 (j even: the row half
#: rh = 0) or 4-7 and 20-23 (j odd: rh = 1), so one shift serves four pairs
MAGIC_SHR = (0, 0, 8, 8)
MAGIC_MASK = (0x000F000F, 0x00F000F0, 0x000F000F, 0x00F000F0)
#: the exponent bits of 1024.0 over both halves: a nibble v under the mask makes the f16
#: 1024 + v (rh = 0) or 1024 + 16 v (rh = 1); v is c + 8 for the code c (see ``prepack``)
MAGIC_EXP = 0x64006400
#: what the halves hold beside c (rh = 0) or 16 c (rh = 1): subtracted in f16, exactly; the
#: scale of an rh = 1 row is divided by 16 (``MAGIC_ROW_SCALE``)
MAGIC_BIAS = (1032.0, 1152.0)
MAGIC_ROW_SCALE = (1.0, 0.0625)


def magic_shr(j):
    """``MAGIC_SHR[j]`` as arithmetic (also on the index expressions of a tile's init)."""
    return (j >> 1) * 8


def magic_mask(j):
    """``MAGIC_MASK[j]`` as arithmetic."""
    return 0x000F000F << (4 * (j & 1))


def magic_bias(rh, _e):
    """``MAGIC_BIAS[rh]`` as arithmetic."""
    return MAGIC_BIAS[0] + rh * (MAGIC_BIAS[1] - MAGIC_BIAS[0])


def magic_row_scale(r, _c):
    """``MAGIC_ROW_SCALE`` of row ``r`` of a tile of 16-row fragments."""
    return MAGIC_ROW_SCALE[0] + ((r >> 3) & 1) * (MAGIC_ROW_SCALE[1] - MAGIC_ROW_SCALE[0])


def check_type(wdtype) -> None:
    """A :class:`TilusArgumentError` unless the mma kernel takes ``wdtype``."""
    if wdtype not in MMA_TYPES:
        names = ", ".join(str(t) for t in MMA_TYPES)
        raise TilusArgumentError(f"wdtype must be one of {names}, got {wdtype}")


def int4_magic(wdtype) -> bool:
    """Whether ``wdtype`` dequantizes by the kernel's 4-bit magic numbers."""
    return wdtype in (tilus.uint4b, tilus.int4b)


def nibble_order(wdtype) -> bool:
    """Whether ``wdtype``'s codes lie in ``PACK_ORDER`` (else ``DENSE_ORDER``)."""
    return wdtype.nbits == 4


def code_dtype(wdtype):
    """The type the kernel views a lane's run as: a float as it is, an integer as the signed
    integer of its width (an unsigned code is stored with its top bit flipped)."""
    if wdtype.is_float() or int4_magic(wdtype):
        return wdtype
    return tilus.int8 if wdtype.nbits == 8 else getattr(tilus, f"int{wdtype.nbits}b")


def code_flip(wdtype) -> int:
    """What ``prepack`` XORs each code with: 8 for int4b (the magic numbers read ``c + 8``),
    the top bit of another unsigned integer (read as signed), else 0."""
    if wdtype == tilus.int4b:
        return 8
    if wdtype.is_float() or wdtype == tilus.uint4b or wdtype.kind == "int":
        return 0
    return 1 << (wdtype.nbits - 1)


def lane_words(wdtype) -> int:
    """32-bit words of a lane's run (its 64 codes of a chunk)."""
    return 2 * wdtype.nbits


def packed_shape(n: int, k: int, wdtype=tilus.uint4b) -> tuple[int, int]:
    """Bytes [rows, row bytes] of :func:`prepack` output for N x K weights (N padded to 16)."""
    return cdiv(n, 16) * 16, k * wdtype.nbits // 8


def _fragment_axes(wdtype) -> tuple[int, ...]:
    """The transpose of a chunk's codes [R, rh, g, G, s, h, q, e] into the packed order."""
    if nibble_order(wdtype):  # [R, G, g, q, s, e, h, rh]
        return (0, 3, 2, 6, 4, 7, 5, 1)
    return (0, 3, 2, 6, 4, 5, 1, 7)  # [R, G, g, q, s, h, rh, e]


def prepack(codes: np.ndarray, wdtype=tilus.uint4b) -> np.ndarray:
    """The [N, K] codes (unsigned integers, ``wdtype``'s bits) repacked for the mma kernel:
    uint8 bytes, each 16-row x 128-K chunk in its lanes' runs (``PACK_ORDER`` or
    ``DENSE_ORDER``), chunks row-major (N padded with zero rows to a multiple of 16; K a
    multiple of 128); each code XOR ``code_flip(wdtype)``."""
    from tilus.packing import pack

    check_type(wdtype)
    n, k = codes.shape
    if k % CHUNK:
        raise TilusArgumentError(f"prepack: K = {k} is not a multiple of {CHUNK}")
    rows, kb = packed_shape(n, k, wdtype)
    c = np.zeros((rows, k), np.uint8)
    c[:n] = codes.astype(np.uint8) ^ code_flip(wdtype)
    c = c.reshape(rows // 16, 2, 8, k // CHUNK, 8, 2, 4, 2).transpose(_fragment_axes(wdtype))
    return pack(c.reshape(-1), wdtype.nbits).reshape(rows, kb)


def prepack_torch(torch, w_packed, wdtype=tilus.uint4b):
    """:func:`prepack` of plain packed weights (uint8 [N, K * bits / 8], code k of a row at
    bit ``k * bits``) on their device with torch."""
    check_type(wdtype)
    nb = wdtype.nbits
    n, kb = w_packed.shape
    k = kb * 8 // nb
    if k % CHUNK:
        raise TilusArgumentError(f"prepack: K = {k} is not a multiple of {CHUNK}")
    rows = cdiv(n, 16) * 16
    dev = w_packed.device
    bits = (w_packed[:, :, None] >> torch.arange(8, device=dev, dtype=torch.uint8)) & 1
    weights = (1 << torch.arange(nb, device=dev, dtype=torch.uint8)).reshape(1, 1, nb)
    c = (bits.reshape(n, k, nb) * weights).sum(-1, dtype=torch.uint8) ^ code_flip(wdtype)
    if rows != n:
        c = torch.cat([c, torch.zeros(rows - n, k, dtype=c.dtype, device=dev)])
    c = c.reshape(rows // 16, 2, 8, k // CHUNK, 8, 2, 4, 2).permute(_fragment_axes(wdtype))
    c = c.reshape(-1, 8, 1) >> torch.arange(nb, device=dev, dtype=torch.uint8)  # 8 codes' bits
    bits = (c & 1).reshape(-1, nb, 8)  # 8 codes = nb bytes, bit i of the run at bit i
    byte_w = (1 << torch.arange(8, device=dev, dtype=torch.int32)).to(torch.uint8)
    return (bits * byte_w).sum(-1, dtype=torch.uint8).reshape(rows, kb).contiguous()
