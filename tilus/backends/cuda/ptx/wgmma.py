"""wgmma family: fence/commit/wait, shared-memory matrix descriptors, and mma_async m64nNk16."""

from __future__ import annotations

from dataclasses import dataclass

from tilus.backends.cuda.ptx.registry import Fragment, check_operands, register

FAMILY = "wgmma"

#: Legal N of wgmma.mma_async m64nNk16 for f16/bf16 inputs (and m64nNk32 for fp8).
LEGAL_N = tuple(range(8, 257, 8))

#: Input type (PTX name) -> K of one instruction. A and B share a type except that the fp8
#: types mix freely; the ISA has transpose immediates only for the 16-bit types (8-bit
#: operands must be K-major), PTX ISA 9.7.15.5.1.
INPUT_K = {"f16": 16, "bf16": 16, "e4m3": 32, "e5m2": 32}
_FP8 = ("e4m3", "e5m2")


def input_k(ab: str, b_type: str | None = None) -> int:
    """K per instruction of inputs ``ab`` x ``b_type`` (default: ``ab``); raises if illegal."""
    bt = ab if b_type is None else b_type
    if ab not in INPUT_K or bt not in INPUT_K or (ab != bt and not (ab in _FP8 and bt in _FP8)):
        raise ValueError(f"wgmma has no {ab} x {bt} form (f16, bf16, or any mix of e4m3/e5m2)")
    return INPUT_K[ab]


#: Swizzle width in bytes -> the descriptor's 2-bit layout-type code (bits 62..63).
SWIZZLE_CODES = {0: 0, 128: 1, 64: 2, 32: 3}

_FIELD_MASK = 0x3FFF  # start address, LBO and SBO are 14-bit fields of (bytes >> 4)

# PTX ISA 9.7.15.7.1 Asynchronous Multiply-and-Accumulate Instruction: wgmma.fence
FENCE = register(
    FAMILY,
    "tl_wgmma_fence",
    f"""
__device__ __forceinline__ void tl_wgmma_fence() {{
  asm volatile("{check_operands("wgmma.fence.sync.aligned;", 0)}" ::: "memory");
}}
""",
)

# PTX ISA 9.7.15.7.2 Asynchronous Multiply-and-Accumulate Instruction: wgmma.commit_group
COMMIT = register(
    FAMILY,
    "tl_wgmma_commit_group",
    f"""
__device__ __forceinline__ void tl_wgmma_commit_group() {{
  asm volatile("{check_operands("wgmma.commit_group.sync.aligned;", 0)}" ::: "memory");
}}
""",
)

# PTX ISA 9.7.15.7.3 Asynchronous Multiply-and-Accumulate Instruction: wgmma.wait_group
# (N = how many most recent wgmma groups may stay pending)
WAIT = register(
    FAMILY,
    "tl_wgmma_wait_group",
    f"""
template <int N>
__device__ __forceinline__ void tl_wgmma_wait_group() {{
  asm volatile("{check_operands("wgmma.wait_group.sync.aligned %0;", 1)}" :: "n"(N) : "memory");
}}
""",
)

# PTX ISA 9.7.15.5.1.2.2 Asynchronous Warpgroup Level Matrix Shared Memory Layout:
# Matrix Descriptor Format. Bits 0-13 start address >> 4, 16-29 leading-dimension byte offset
# >> 4, 32-45 stride-dimension byte offset >> 4, 49-51 matrix base offset, 62-63 swizzle mode.
DESC = register(
    FAMILY,
    "tl_wgmma_desc",
    """
__device__ __forceinline__ uint64_t tl_wgmma_make_desc(uint32_t addr, uint32_t lbo_bytes,
                                                       uint32_t sbo_bytes, uint32_t swizzle_code,
                                                       uint32_t base_offset) {
  uint64_t desc = (uint64_t)((addr >> 4) & 0x3FFFu);
  desc |= (uint64_t)((lbo_bytes >> 4) & 0x3FFFu) << 16;
  desc |= (uint64_t)((sbo_bytes >> 4) & 0x3FFFu) << 32;
  desc |= (uint64_t)(base_offset & 0x7u) << 49;
  desc |= (uint64_t)(swizzle_code & 0x3u) << 62;
  return desc;
}
// OR a shared-window address into precomputed upper fields (see KMajorTile.high_bits()).
__device__ __forceinline__ uint64_t tl_wgmma_desc_with_addr(uint64_t high, uint32_t addr) {
  return high | (uint64_t)((addr >> 4) & 0x3FFFu);
}
// A descriptor from its high and low words (the low word: address and leading byte offset).
__device__ __forceinline__ uint64_t tl_wgmma_desc_join(uint32_t hi, uint32_t lo) {
  return ((uint64_t)hi << 32) | lo;
}
""",
)


@dataclass(frozen=True)
class SmemDescriptor:
    """The decoded fields of a wgmma shared-memory matrix descriptor (byte quantities).

    Attributes:
        start_address: Byte address of the matrix in the CTA's shared window (16-aligned).
        lbo: Leading-dimension byte offset (16-aligned).
        sbo: Stride-dimension byte offset (16-aligned).
        base_offset: 3-bit matrix base offset (0 when the swizzle pattern is aligned).
        swizzle: Swizzle width in bytes: 0 (none), 32, 64 or 128.
    """

    start_address: int
    lbo: int
    sbo: int
    base_offset: int = 0
    swizzle: int = 128

    def encode(self) -> int:
        """Pack the fields into the 64-bit descriptor value."""
        for what, v in (
            ("start_address", self.start_address),
            ("lbo", self.lbo),
            ("sbo", self.sbo),
        ):
            if v % 16 or not 0 <= (v >> 4) <= _FIELD_MASK:
                raise ValueError(f"{what}={v} must be 16-aligned and below 2**18")
        if self.swizzle not in SWIZZLE_CODES:
            raise ValueError(f"swizzle must be one of {sorted(SWIZZLE_CODES)}, got {self.swizzle}")
        if not 0 <= self.base_offset <= 7:
            raise ValueError(f"base_offset must be in 0..7, got {self.base_offset}")
        return (
            (self.start_address >> 4)
            | (self.lbo >> 4) << 16
            | (self.sbo >> 4) << 32
            | self.base_offset << 49
            | SWIZZLE_CODES[self.swizzle] << 62
        )

    @staticmethod
    def decode(value: int) -> SmemDescriptor:
        """Unpack a 64-bit descriptor value."""
        code_to_swizzle = {c: s for s, c in SWIZZLE_CODES.items()}
        return SmemDescriptor(
            start_address=(value & _FIELD_MASK) << 4,
            lbo=((value >> 16) & _FIELD_MASK) << 4,
            sbo=((value >> 32) & _FIELD_MASK) << 4,
            base_offset=(value >> 49) & 0x7,
            swizzle=code_to_swizzle[(value >> 62) & 0x3],
        )


@dataclass(frozen=True)
class KMajorTile:
    """Descriptor fields of a K-major (K contiguous) operand tile of ``rows`` x ``cols`` elements.

    Storage assumed: with a swizzle of W bytes, the tile is ``ceil(cols*dtype_bytes / W)``
    column blocks, each ``rows`` rows of W bytes (one TMA box of inner size W each), swizzled
    in 8-row atoms of ``8*W`` bytes. Without swizzle, 8x16-byte core matrices of 128 contiguous
    bytes, K-adjacent core matrices adjacent in memory.
    """

    rows: int
    cols: int
    dtype_bytes: int = 2
    swizzle: int = 128

    def __post_init__(self):
        if self.swizzle not in SWIZZLE_CODES:
            raise ValueError(f"swizzle must be one of {sorted(SWIZZLE_CODES)}, got {self.swizzle}")
        row_bytes = self.cols * self.dtype_bytes
        unit = self.swizzle or 16
        if self.rows % 8 or row_bytes % unit:
            raise ValueError(
                f"a {self.rows}x{self.cols} tile of {self.dtype_bytes}-byte elements does not "
                f"tile into 8-row atoms of {unit}-byte rows"
            )

    @property
    def lbo(self) -> int:
        """Leading-dimension byte offset: between K-adjacent core matrices (unused if swizzled)."""
        return 16 if self.swizzle else 128

    @property
    def sbo(self) -> int:
        """Stride-dimension byte offset: between consecutive 8-row groups."""
        if self.swizzle:
            return 8 * self.swizzle
        return (self.cols * self.dtype_bytes // 16) * 128

    @property
    def bytes(self) -> int:
        """Size of the whole tile in shared memory."""
        return self.rows * self.cols * self.dtype_bytes

    def k_offset(self, k: int) -> int:
        """Byte offset to add to the start address to begin at K element ``k`` (k % 8 == 0)."""
        kb = k * self.dtype_bytes
        if kb % 16:
            raise ValueError(f"K offset {k} is not a multiple of 16 bytes")
        if self.swizzle:
            return (kb // self.swizzle) * self.rows * self.swizzle + kb % self.swizzle
        return (kb // 16) * 128

    def row_offset(self, row: int) -> int:
        """Byte offset to add to the start address to begin at row ``row`` (row % 8 == 0)."""
        if row % 8:
            raise ValueError(f"row offset {row} is not a multiple of 8")
        return (row // 8) * self.sbo

    def base_offset(self, start_address: int) -> int:
        """The 3-bit base offset for a start address not aligned to the swizzle pattern."""
        if not self.swizzle:
            return 0
        return (start_address >> 7) & 0x7 if start_address % (8 * self.swizzle) else 0

    def descriptor(self, start_address: int = 0) -> SmemDescriptor:
        """The descriptor of this tile placed at ``start_address``."""
        return SmemDescriptor(
            start_address, self.lbo, self.sbo, self.base_offset(start_address), self.swizzle
        )

    def high_bits(self) -> int:
        """The descriptor with a zero start address, to OR with ``(addr >> 4) & 0x3FFF``."""
        return self.descriptor(0).encode()


def _reg_list(first: int, count: int, per_line: int = 8) -> str:
    regs = [f"%{first + i}" for i in range(count)]
    lines = [", ".join(regs[i : i + per_line]) for i in range(0, count, per_line)]
    return "{" + ",\\n\\t ".join(lines) + "}"


def _constraint_list(kind: str, array: str, count: int, per_line: int = 8) -> str:
    items = [f'"{kind}"({array}[{i}])' for i in range(count)]
    lines = [", ".join(items[i : i + per_line]) for i in range(0, count, per_line)]
    return (",\n" + " " * 16).join(lines)


def mma_async_name(n: int, ab: str = "f16", a_from: str = "smem", b_type: str | None = None) -> str:
    """The C++ name of the m64n{n}k{K} f32-accumulating wgmma wrapper."""
    types = ab if b_type in (None, ab) else f"{ab}_{b_type}"
    k = input_k(ab, b_type)
    return f"tl_wgmma_m64n{n}k{k}_f32_{types}_{'ss' if a_from == 'smem' else 'rs'}"


def mma_async(
    n: int,
    ab: str = "f16",
    *,
    a_from: str = "smem",
    trans_a: int = 0,
    trans_b: int = 0,
    b_type: str | None = None,
) -> Fragment:
    """Build the wrapper for ``wgmma.mma_async.sync.aligned.m64n{n}k{K}.f32.{ab}.{b_type}``.

    The C++ function is ``void NAME(float (&d)[n/2], A, uint64_t desc_b, int scale_d)`` where A
    is ``uint64_t desc_a`` (``a_from="smem"``) or ``const uint32_t (&a)[4]`` (``"regs"``);
    ``scale_d == 0`` computes D = A*B, otherwise D += A*B. Transposes are baked in (0 means
    K-major); a non-default transpose adds a ``_t{a}{b}`` suffix to the name.

    Args:
        n: The N of the shape, a multiple of 8 in 8..256.
        ab: Input type of A (and of B unless ``b_type``): "f16", "bf16", "e4m3" or "e5m2"
            (K = 16 for the 16-bit types, 32 for fp8).
        a_from: "smem" (descriptor) or "regs" (four 32-bit registers per thread).
        trans_a: imm-trans-a (smem A only), 0 or 1; 16-bit types only.
        trans_b: imm-trans-b, 0 or 1; 16-bit types only.
        b_type: Input type of B when it differs from A's (the fp8 types mix).

    Returns:
        A Fragment of family "wgmma" to pass to ``prelude``.
    """
    if n not in LEGAL_N:
        raise ValueError(f"wgmma m64nNk16 needs N in 8..256 step 8, got {n}")
    k = input_k(ab, b_type)
    bt = ab if b_type is None else b_type
    if a_from not in ("smem", "regs") or trans_a not in (0, 1) or trans_b not in (0, 1):
        raise ValueError("bad a_from / transpose arguments")
    if a_from == "regs" and trans_a:
        raise ValueError("imm-trans-a exists only for A in shared memory")
    has_trans = ab not in _FP8
    if not has_trans and (trans_a or trans_b):
        raise ValueError(f"wgmma with {ab} x {bt} operands has no transpose: both are K-major")
    n_d = n // 2  # f32 accumulators per thread: 64*n / 128
    name = mma_async_name(n, ab, a_from, b_type)
    if trans_a or trans_b:
        name += f"_t{trans_a}{trans_b}"
    shape = f"wgmma.mma_async.sync.aligned.m64n{n}k{k}.f32.{ab}.{bt}"
    d_list = _reg_list(0, n_d)
    if a_from == "smem":
        n_ops = n_d + 3
        a_operand, b_idx, s_idx = f"%{n_d}", n_d + 1, n_d + 2
        tail = f"p, 1, 1, {trans_a}, {trans_b};" if has_trans else "p, 1, 1;"
        a_param, a_inputs = "uint64_t desc_a", '"l"(desc_a)'
    else:
        n_ops = n_d + 6
        a_operand, b_idx, s_idx = _reg_list(n_d, 4), n_d + 4, n_d + 5
        tail = f"p, 1, 1, {trans_b};" if has_trans else "p, 1, 1;"
        a_param = "const uint32_t (&a)[4]"
        a_inputs = '"r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3])'
    asm = (
        "{\\n\\t.reg .pred p;\\n\\t"
        f"setp.ne.b32 p, %{s_idx}, 0;\\n\\t"
        f"{shape}\\n\\t{d_list},\\n\\t{a_operand}, %{b_idx}, {tail}\\n\\t}}"
    )
    check_operands(asm, n_ops)
    text = f"""
// PTX ISA 9.7.15.5.2 Asynchronous Multiply-and-Accumulate Instruction: wgmma.mma_async
// m64n{n}k{k}, D f32 ({n_d} registers per thread), A {a_from}, B smem, trans {trans_a}{trans_b}.
__device__ __forceinline__ void {name}(float (&d)[{n_d}], {a_param}, uint64_t desc_b,
                                        int scale_d) {{
  asm volatile("{asm}"
               : {_constraint_list("+f", "d", n_d)}
               : {a_inputs}, "l"(desc_b), "r"(scale_d)
               : "memory");
}}
"""
    return Fragment(name=name, family=FAMILY, text=text.lstrip("\n"))


@dataclass(frozen=True)
class MNMajorTile:
    """Descriptor fields of an MN-major (M or N contiguous) operand tile, ``rows`` K rows of
    ``cols`` M/N elements, used with imm-trans = 1 (16-bit types only).

    Storage assumed (as :class:`KMajorTile`'s, so one TMA-loaded ``[K, N]`` tile serves): with a
    swizzle of W bytes the tile is ``cols * dtype_bytes / W`` column blocks of ``rows`` rows of
    W bytes, swizzled in 8-row atoms. In the canonical MN-major form (PTX ISA 9.7.15.5.1.2.1)
    the leading-dimension offset steps from one W-byte span of M/N to the next (one column
    block) and the stride-dimension offset from one group of 8 K rows to the next.
    """

    rows: int
    cols: int
    dtype_bytes: int = 2
    swizzle: int = 128

    def __post_init__(self):
        if self.swizzle not in (32, 64, 128):
            raise ValueError(
                f"an MN-major operand needs a 32/64/128-byte swizzle, not {self.swizzle}"
            )
        if self.rows % 8 or (self.cols * self.dtype_bytes) % self.swizzle:
            raise ValueError(
                f"a {self.rows}x{self.cols} MN-major tile of {self.dtype_bytes}-byte elements "
                f"does not tile into 8-row atoms of {self.swizzle}-byte rows"
            )

    @property
    def lbo(self) -> int:
        """Between M/N-adjacent column blocks (each ``rows`` rows of W bytes)."""
        return self.rows * self.swizzle

    @property
    def sbo(self) -> int:
        """Between consecutive groups of 8 K rows."""
        return 8 * self.swizzle

    def k_offset(self, k: int) -> int:
        """Byte offset to add to the start address to begin at K row ``k`` (k % 8 == 0)."""
        if k % 8:
            raise ValueError(f"K offset {k} is not a multiple of 8 rows")
        return k * self.swizzle

    def descriptor(self, start_address: int = 0) -> SmemDescriptor:
        """The descriptor of this tile placed at ``start_address`` (swizzle-atom aligned)."""
        return SmemDescriptor(start_address, self.lbo, self.sbo, 0, self.swizzle)

    def high_bits(self) -> int:
        """The descriptor with a zero start address, to OR with ``(addr >> 4) & 0x3FFF``."""
        return self.descriptor(0).encode()
