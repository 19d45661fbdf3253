"""``self.cuda``: device and configuration queries answered for the compile target."""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

from tilus.dtypes import DataType, bfloat16, float16, float32, int8, int32, tfloat32, uint8
from tilus.errors import TilusError
from tilus.ir.layout import mma
from tilus.ir.layout import register as rl
from tilus.ir.layout.mma import mma_atom, supported_pairs
from tilus.ir.layout.shared import SharedLayout, choose_swizzle
from tilus.target import Target, gpu_index, sm_count, transpile_target

SMALL_TILE = 64  # tilus.backends.cuda.layout.inference.SMALL_TILE (a test keeps them equal)


@dataclass(frozen=True)
class MmaConfig:
    """One warp-level ``mma.sync`` shape: ``[m, k] @ [k, n] -> [m, n]`` per warp, operand
    dtypes ``a``/``b``, accumulator ``c``; ``lowered``: the CUDA backend lowers ``dot`` with it
    (the others are listed as the spec has them)."""

    name: str
    m: int
    n: int
    k: int
    a: DataType
    b: DataType
    c: DataType
    lowered: bool = False


_CONFIGS = (
    MmaConfig("m16n8k16_f16_f16", 16, 8, 16, float16, float16, float16, True),
    MmaConfig("m16n8k16_f16_f32", 16, 8, 16, float16, float16, float32, True),
    MmaConfig("m16n8k16_bf16_f32", 16, 8, 16, bfloat16, bfloat16, float32, True),
    MmaConfig("m8n8k16_i8_i32", 8, 8, 16, int8, int8, int32),
    MmaConfig("m16n8k16_i8_i32", 16, 8, 16, int8, int8, int32),
    MmaConfig("m16n8k32_i8_i32", 16, 8, 32, int8, int8, int32, True),
    MmaConfig("m16n8k32_u8_i32", 16, 8, 32, uint8, uint8, int32, True),
    MmaConfig("m16n8k8_tf32_f32", 16, 8, 8, tfloat32, tfloat32, float32, True),
)


class AtomicMmaConfigs(SimpleNamespace):
    """The ``mma.sync`` shapes by name (``m16n8k16_f16_f32``, ...), and :meth:`from_dtypes`."""

    def from_dtypes(self, operand: DataType, acc: DataType) -> MmaConfig:
        """The first shape (the spec's order) taking ``operand`` inputs into ``acc``.

        Raises:
            TilusError: no shape has these dtypes.
        """
        for cfg in _CONFIGS:
            if cfg.a == operand and cfg.c == acc:
                return cfg
        raise TilusError(f"no mma.sync configuration takes {operand} operands into {acc}")


@dataclass(frozen=True)
class DotConfig:
    """How the CUDA backend runs a ``dot`` of ``[m, k] @ [k, n]`` over ``num_warps`` warps:
    the mma shape, the warps along m and n (others hold copies) and the register layouts it
    gives the operands and the accumulator."""

    mma: MmaConfig
    warps_m: int
    warps_n: int
    a_layout: rl.RegisterLayout
    b_layout: rl.RegisterLayout
    c_layout: rl.RegisterLayout


class _Runtime:
    """``self.cuda.runtime``: properties of the GPU present (a GPU is needed)."""

    def get_device_properties(self, device_index: int | None = None) -> dict:
        """Name, compute capability, SM count, shared memory and L2 size of a device.

        Raises:
            TilusError: "No GPU is available." without one.
        """
        idx = gpu_index()
        if idx is None:
            raise TilusError("No GPU is available.")
        from tilus.runtime.driver import device_properties

        return device_properties(idx if device_index is None else device_index)


class CudaQueries:
    """Answers for one target (the compile target: ``tilus.compile(target=)``, the current
    target, or the GPU's), so every query works with no GPU present.

    Attributes:
        target: the ``tilus.target.Target``.
        atomic_mma_configs: the ``mma.sync`` shapes (:class:`AtomicMmaConfigs`).
        runtime: ``runtime.get_device_properties()`` of the GPU present.
    """

    def __init__(self, target: Target):
        self.target = target
        self.atomic_mma_configs = AtomicMmaConfigs(**{c.name: c for c in _CONFIGS})
        self.runtime = _Runtime()

    def __repr__(self) -> str:
        return f"<self.cuda for {self.target.arch}>"

    @property
    def arch(self) -> str:
        """The target's name ("sm_90a")."""
        return self.target.arch

    @property
    def compute_capability(self) -> tuple[int, int]:
        """(major, minor) of the target."""
        return self.target.compute_capability

    @property
    def shared_memory_per_block(self) -> int:
        """Bytes of shared memory one block may use on the target."""
        return self.target.properties.shared_memory_per_block

    @property
    def sm_count(self) -> int:
        """Multiprocessors: the GPU's own count when a GPU of the target's compute capability
        is present, else the count of the GPU the target implies (132 for sm_90/sm_90a, an
        H100/H200 SXM; 108 for sm_80, an A100; see ``tilus.target.TargetProperties``)."""
        return sm_count(self.target)

    def resolve_dot_config(
        self, operand: DataType, acc: DataType, *, m: int, n: int, k: int, num_warps: int
    ) -> DotConfig:
        """The ``mma.sync`` shape, warp split and layouts the CUDA backend uses for a ``dot``
        of ``[m, k] @ [k, n]`` with ``operand`` inputs into ``acc`` over ``num_warps`` warps.

        Raises:
            TilusError: the dtypes are not lowered (float16/bfloat16 into float32 are), or the
                tile does not split into m16n8k16 atoms over the warps.
        """
        cfg = next((c for c in _CONFIGS if c.a == operand and c.c == acc and c.lowered), None)
        atom = mma_atom(operand, acc)
        if cfg is None or atom is None:
            raise TilusError(
                f"dot with {operand} operands into {acc} has no CUDA lowering "
                f"({supported_pairs()} have)"
            )
        w = mma.choose_warps(num_warps, m, n, k, operand.nbits, acc.nbits)
        if w is None or k % cfg.k:
            raise TilusError(
                f"dot [{m}, {k}] @ [{k}, {n}] does not tile into mma.sync "
                f"m{cfg.m}n{cfg.n}k{cfg.k} over {num_warps} warps"
            )
        wm, wn = w
        return DotConfig(cfg, wm, wn, *atom.layouts(m, n, k, wm, wn, num_warps))

    def mma_dot_config(self, operand: DataType, acc: DataType, num_warps: int) -> DotConfig:
        """:meth:`resolve_dot_config` for the smallest tile the warps cover (one atom each)."""
        cfg = next((c for c in _CONFIGS if c.a == operand and c.c == acc and c.lowered), None)
        if cfg is None:
            cfg = self.atomic_mma_configs.from_dtypes(operand, acc)
        w = rl.mma_warps(num_warps, 16 * num_warps, 8 * num_warps)
        wm, wn = w if w is not None else (1, 1)
        return self.resolve_dot_config(
            operand, acc, m=cfg.m * wm, n=cfg.n * wn, k=cfg.k, num_warps=num_warps
        )

    def shared_layout(self, shape, dtype: DataType = float16) -> SharedLayout:
        """The backend's default shared layout of a ``dtype`` tile of ``shape``: row-major,
        with the widest hardware swizzle its rows fill exactly (128/64/32 bytes; none when
        the row is another width or the rows are not a multiple of 8)."""
        shape = tuple(int(s) for s in shape)
        if dtype.nbits % 8:
            raise TilusError(f"shared_layout of a sub-byte dtype ({dtype}) is not supported")
        eb = dtype.nbits // 8
        swizzle = choose_swizzle(shape[-1] * eb) if len(shape) >= 2 else 0
        if swizzle and shape[-2] % 8:
            swizzle = 0
        return SharedLayout(shape, eb, swizzle)

    def default_register_layout(self, shape, num_threads: int) -> rl.RegisterLayout:
        """The layout the backend gives a register tile no instruction constrains: every
        thread holds a tile of at most 64 elements (replicated), a larger one is spread
        row-major over the threads (blocked)."""
        shape = tuple(int(s) for s in shape)
        size = 1
        for s in shape:
            size *= s
        if size <= SMALL_TILE:
            return rl.replicated(shape, int(num_threads))
        return rl.blocked(shape, int(num_threads))


class CudaQueryInstructions:
    """Adds ``self.cuda`` (host-side values at transpile time)."""

    @property
    def cuda(self) -> CudaQueries:
        """Queries about the target the kernel is transpiled for (see :class:`CudaQueries`)."""
        return CudaQueries(transpile_target())
