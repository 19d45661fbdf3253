"""Memory instructions beyond plain loads and stores: cp.async copies, atomics, scatter stores.

Instruction classes like those of :mod:`tilus.ir.inst` (registered in the same table); kept in
their own module to keep each small.
"""

from __future__ import annotations

from typing import ClassVar

from tilus.ir.enums import TensorKind
from tilus.ir.expr import Expr
from tilus.ir.inst import Inst, InstError, instruction
from tilus.ir.tensor import TensorVar

# --- asynchronous copies (cp.async), atomics and scatter stores -------------------------------


@instruction("copy_async", ptx="9.7.9.25.3.1 cp.async")
class CopyAsync(Inst):
    """Asynchronous copy of the tile at ``offsets`` of global ``src`` into shared ``dst`` in
    chunks of 4, 8 or 16 bytes per thread (``cp.async``). With ``check_bounds`` the part of
    the tile outside ``src`` is zero-filled; without it the tile must lie inside ``src``. The
    data lands when the issuing threads wait for its commit group."""

    src: TensorVar
    dst: TensorVar
    offsets: tuple
    dims: tuple[int, ...]
    evict: str | None
    check_bounds: bool

    #: the L2 eviction hints the spec lists (``evict_normal`` is the default policy)
    EVICTS: ClassVar[tuple] = (None, "evict_normal", "evict_first")
    #: PTX ISA: cp.async copies 4, 8 or 16 bytes (.cg only 16)
    CHUNKS: ClassVar[tuple[int, ...]] = (16, 8, 4)

    @classmethod
    def chunk_bytes(cls, row_bytes: int) -> int | None:
        """The widest cp.async size dividing a tile row of ``row_bytes`` (None: none does)."""
        return next((c for c in cls.CHUNKS if row_bytes % c == 0), None)

    def validate(self) -> None:
        """Chunks of whole rows along the global innermost dim, of 4, 8 or 16 bytes."""
        if self.evict not in self.EVICTS:
            raise InstError(f"evict must be 'evict_normal' or 'evict_first', got {self.evict!r}")
        if self.src.dtype != self.dst.dtype:
            raise InstError(
                f"copy_async from a {self.src.dtype} tensor into a {self.dst.dtype} shared tile"
            )
        if self.dims[-1] != self.src.ndim - 1:
            raise InstError(
                "copy_async moves contiguous rows: the tile's last dim must span the global "
                f"tensor's innermost dim (dims={list(self.dims)})"
            )
        nbits = self.dst.dtype.nbits
        row = self.dst.shape[-1] * nbits
        if nbits % 8 or row % 8 or self.chunk_bytes(row // 8) is None:
            raise InstError(
                f"copy_async moves 4, 8 or 16 bytes per thread, but a row of the "
                f"{self.dst.type_str()} tile is {row // 8 if row % 8 == 0 else row / 8} bytes "
                f"(not a multiple of 4)"
            )


@instruction("copy_async_commit_group", ptx="9.7.9.25.3.2 cp.async.commit_group")
class CopyAsyncCommitGroup(Inst):
    """Close the current group of the calling threads' ``copy_async`` copies."""


@instruction("copy_async_wait_group", ptx="9.7.9.25.3.3 cp.async.wait_group")
class CopyAsyncWaitGroup(Inst):
    """Wait until at most ``n`` of the calling threads' committed groups are pending."""

    n: int


@instruction("copy_async_wait_all", ptx="9.7.9.25.3.3 cp.async.wait_all")
class CopyAsyncWaitAll(Inst):
    """Wait for every ``copy_async`` of the calling threads, committed or not."""


@instruction("atomic", ptx="9.7.13.5 atom, 9.7.13.6 red")
class Atomic(Inst):
    """Atomic read-modify-write of every element of ``values`` into shared or global ``dst``.

    Element-wise (``indices`` None): element ``p`` of ``values`` updates ``dst[p]`` (a global
    dim given by an expression bounds the update: elements past it are skipped). Scatter: it
    updates ``dst`` at ``p`` with ``p[dim]`` replaced by ``indices[p]`` (out-of-range indices
    are skipped). ``out`` receives the values before each update. ``cas`` stores
    ``values[p]`` where the old value equals ``compare[p]``. The order in which the elements of
    one instruction (and of different threads) are applied is unspecified on the GPU; the
    interpreter applies them in row-major order.
    """

    out: TensorVar
    dst: TensorVar
    op: str
    values: TensorVar
    compare: TensorVar | None
    indices: TensorVar | None
    dim: int
    sem: str
    scope: str

    OPS: ClassVar[tuple[str, ...]] = ("add", "sub", "min", "max", "exch", "cas")
    SCATTER_OPS: ClassVar[tuple[str, ...]] = ("add", "sub", "min", "max")
    SEMS: ClassVar[tuple[str, ...]] = ("relaxed", "acquire", "release", "acq_rel")
    SCOPES: ClassVar[tuple[str, ...]] = ("cta", "cluster", "gpu", "sys")
    #: PTX ISA 9.7.13.5: what scalar ``atom`` offers per dtype (the same in global and shared
    #: memory); f16/bf16 min/max exist only in vector forms on global memory, so the CUDA
    #: backend runs them as an ``atom.cas.b16`` loop
    DTYPES: ClassVar[dict] = {
        "int32": ("add", "sub", "min", "max", "exch", "cas"),
        "uint32": ("add", "sub", "min", "max", "exch", "cas"),
        "int64": ("add", "sub", "min", "max", "exch", "cas"),
        "uint64": ("add", "sub", "min", "max", "exch", "cas"),
        "float32": ("add", "sub", "exch", "cas"),
        "float64": ("add", "sub", "exch", "cas"),
        "float16": ("add", "sub", "min", "max"),
        "bfloat16": ("add", "sub", "min", "max"),
    }

    @classmethod
    def op_error(cls, space: str, op: str, dtype) -> str | None:
        """Why ``op`` on ``dtype`` in ``space`` memory is not available (None when it is)."""
        if space not in ("shared", "global"):
            return f"atomics update shared or global memory, not a {space} tile"
        ops = cls.DTYPES.get(dtype.name)
        if ops is None:
            return f"{space} memory has no atomic {op} on {dtype}"
        if op not in ops:
            return f"{space} memory has no atomic {op} on {dtype} (it has {', '.join(ops)})"
        return None

    def validate(self) -> None:
        """Operation, ordering, dtypes and shapes."""
        if self.op not in self.OPS:
            raise InstError(f"unknown atomic op {self.op!r}")
        if self.sem not in self.SEMS:
            raise InstError(f"sem must be one of {', '.join(self.SEMS)}, got {self.sem!r}")
        if self.scope not in self.SCOPES:
            raise InstError(f"scope must be one of {', '.join(self.SCOPES)}, got {self.scope!r}")
        dst, v = self.dst, self.values
        if msg := self.op_error(dst.kind, self.op, dst.dtype):
            raise InstError(msg)
        for t, what in ((v, "values"), (self.compare, "compare"), (self.out, "output")):
            if t is not None and (t.kind != TensorKind.REGISTER or t.dtype != dst.dtype):
                raise InstError(
                    f"atomic {what} must be a {dst.dtype} register tile like the destination, "
                    f"got {t.type_str()}"
                )
            if t is not None and t.shape != v.shape:
                raise InstError(f"atomic {what} {t.type_str()} does not match {v.type_str()}")
        if (self.op == "cas") != (self.compare is not None):
            raise InstError("compare is given with cas and only with cas")
        if v.ndim != dst.ndim:
            raise InstError(f"atomic of {v.type_str()} values into {dst.type_str()}")
        if self.indices is not None:
            ix = self.indices
            if self.op not in self.SCATTER_OPS:
                raise InstError(f"scatter atomics are {', '.join(self.SCATTER_OPS)}")
            if not 0 <= self.dim < v.ndim:
                raise InstError(f"dim={self.dim} is not a dim of the {v.ndim}-d values")
            if ix.kind != TensorKind.REGISTER or not ix.dtype.is_integer() or ix.shape != v.shape:
                raise InstError(
                    f"scatter indices must be an integer register tile of the values' shape "
                    f"{list(v.shape)}, got {ix.type_str()}"
                )
        check_tile_fits(dst, v.shape, self.dim if self.indices is not None else None, "atomic")


def check_tile_fits(dst: TensorVar, shape: tuple, dim: int | None, what: str) -> None:
    """A register tile of ``shape`` updates ``dst`` element-wise (or along ``dim`` by index):
    every other compile-time dim of ``dst`` must match (a runtime global dim bounds it)."""
    for d, (n, m) in enumerate(zip(dst.shape, shape)):
        if d != dim and isinstance(n, int) and n != m:
            raise InstError(
                f"{what} of a {list(shape)} tile into {dst.type_str()}: dim {d} is {m} in the "
                f"tile but {n} in the destination"
            )


@instruction("scatter_store")
class ScatterStore(Inst):
    """Store ``values`` into shared or global ``dst`` at ``p`` with ``p[dim]`` replaced by
    ``indices[p]`` (non-atomic: of duplicate indices an unspecified one wins; out-of-range
    indices are skipped)."""

    dst: TensorVar
    indices: TensorVar
    values: TensorVar
    dim: int

    def validate(self) -> None:
        """Dtypes and shapes."""
        v, ix = self.values, self.indices
        if v.kind != TensorKind.REGISTER or v.dtype != self.dst.dtype:
            raise InstError(
                f"scatter values must be a {self.dst.dtype} register tile, got {v.type_str()}"
            )
        if v.ndim != self.dst.ndim or not 0 <= self.dim < v.ndim:
            raise InstError(
                f"scatter of {v.type_str()} into {self.dst.type_str()} along {self.dim}"
            )
        if ix.kind != TensorKind.REGISTER or not ix.dtype.is_integer() or ix.shape != v.shape:
            raise InstError(
                f"scatter indices must be an integer register tile of the values' shape "
                f"{list(v.shape)}, got {ix.type_str()}"
            )
        check_tile_fits(self.dst, v.shape, self.dim, "scatter")


# --- semaphores -------------------------------------------------------------------------------


@instruction("lock_semaphore", ptx="9.7.9.8 ld (.acquire)")
class LockSemaphore(Inst):
    """Spin until the int32 at global address ``sem`` (a pointer, or a one-element global
    tile) equals ``value`` (acquire loads at gpu scope); issued by a single thread."""

    sem: Expr | TensorVar
    value: Expr


@instruction("release_semaphore", ptx="9.7.9.9 st (.release)")
class ReleaseSemaphore(Inst):
    """Store ``value`` into the int32 at global address ``sem`` with release semantics (after
    a gpu-scope fence); issued by a single thread. ``sem`` as for :class:`LockSemaphore`."""

    sem: Expr | TensorVar
    value: Expr


# --- kernel-lifetime global scratch ----------------------------------------------------------


@instruction("global_tensor")
class GlobalTensorAlloc(Inst):
    """A global tensor of ``out.shape`` (compile-time) carved from the launch's workspace and
    shared by every block. ``requires_clean``: zero-filled when first allocated, and the kernel
    must leave it zero again (so the next launch finds it clean without a memset)."""

    out: TensorVar
    requires_clean: bool

    def validate(self) -> None:
        """A positive compile-time shape of a whole-byte dtype."""
        if not self.out.shape or any(not isinstance(n, int) or n <= 0 for n in self.out.shape):
            raise InstError(
                f"global_tensor needs a non-empty shape of positive compile-time ints, got "
                f"{list(self.out.shape)}"
            )
        if self.out.dtype.nbits % 8:
            raise InstError(f"global_tensor of sub-byte {self.out.dtype} is not supported yet")
