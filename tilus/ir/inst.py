"""Tile instructions: one frozen definition each, with the checks of its operands.

Every instruction is a frozen dataclass whose fields are its operands and attributes. Each job
done per instruction (interpreting, lowering to CUDA, choosing layouts, describing effects) is a
:class:`tilus.ir.rules.RuleTable` keyed by the instruction's class; ``tests/test_registry.py``
asserts that no instruction lacks a rule (or an explicit not-lowered reason) in any table.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields
from typing import ClassVar

from tilus.ir.enums import MemScope, MemSem
from tilus.ir.expr import Const, Expr
from tilus.ir.tensor import TensorVar

INSTRUCTIONS: dict[str, type[Inst]] = {}


class Inst:
    """Base of all instructions. ``NAME`` is the printed mnemonic."""

    __slots__ = ()
    NAME: ClassVar[str] = ""
    # PTX ISA section the hardware semantics come from (for async/hardware instructions)
    PTX: ClassVar[str] = ""

    def items(self):
        """(field name, value) pairs in declaration order."""
        return [(f.name, getattr(self, f.name)) for f in fields(self)]

    def output(self) -> TensorVar | None:
        """The tensor this instruction defines or overwrites, if any."""
        return getattr(self, "out", None)

    def validate(self) -> None:
        """Check the operands known when the instruction is built; raise :class:`InstError`.

        The front end calls it on every instruction it emits and reports the error at the
        user's line; checks that need runtime values live beside it as functions of the class
        (e.g. :meth:`MBarrierAlloc.count_error`) so every backend applies the same rule.
        """


class InstError(ValueError):
    """An instruction's operands break one of its rules (reported at the user's line)."""


def instruction(name: str, ptx: str = ""):
    """Class decorator: make a frozen instruction dataclass and register it as ``name``."""

    def wrap(cls):
        cls = dataclass(frozen=True, eq=False, slots=True)(cls)
        cls.NAME = name
        cls.PTX = ptx
        cls.__hash__ = object.__hash__
        if name in INSTRUCTIONS:
            raise RuntimeError(f"instruction {name} registered twice")
        INSTRUCTIONS[name] = cls
        return cls

    return wrap


Operand = TensorVar | Expr  # a tile, or a scalar broadcast over the tile

# --- allocation and views --------------------------------------------------------------------


@instruction("alloc_register")
class AllocRegister(Inst):
    """A new register tile; ``init`` fills it (an expression over ``axes`` or a scalar)."""

    out: TensorVar
    init: Expr | None
    axes: tuple


@instruction("alloc_shared")
class AllocShared(Inst):
    """A new tile in shared memory (contents undefined)."""

    out: TensorVar


@instruction("free_shared")
class FreeShared(Inst):
    """Release a shared tile; its space may be reused afterwards."""

    tensor: TensorVar


@instruction("global_view")
class GlobalView(Inst):
    """A global-memory view at ``ptr`` with ``out.shape`` and row-major or given strides."""

    out: TensorVar
    ptr: Expr
    strides: tuple | None


@instruction("slice")
class SliceTensor(Inst):
    """``src[i, :, j]``: an integer index drops the dim, ``None`` keeps the whole dim."""

    out: TensorVar
    src: TensorVar
    indices: tuple


@instruction("permute")
class PermuteTensor(Inst):
    """Permute the dims of a tile (``transpose()`` of a 2-D tile); a view for shared tiles."""

    out: TensorVar
    src: TensorVar
    dims: tuple[int, ...]


@instruction("reshape")
class ReshapeTensor(Inst):
    """The same elements in row-major order with a new shape (squeeze/unsqueeze/reshape)."""

    out: TensorVar
    src: TensorVar


# --- data movement ---------------------------------------------------------------------------


@instruction("load_global")
class LoadGlobal(Inst):
    """Load the tile at ``offsets`` of a global view; out-of-bounds elements read 0.
    ``cache``: a cache hint (see :data:`LOAD_CACHES`), None for the default policy."""

    out: TensorVar
    src: TensorVar
    offsets: tuple
    dims: tuple[int, ...]
    cache: str | None = None

    QUIET_NONE: ClassVar[tuple] = ("cache",)  # printed only when set (cache keys stay put)

    def validate(self) -> None:
        """A known cache hint, on elements of whole bytes."""
        _check_cache(self.cache, LOAD_CACHES, self.out.dtype, "load_global")


@instruction("store_global")
class StoreGlobal(Inst):
    """Store a register tile at ``offsets``; out-of-bounds elements are skipped.
    ``cache``: a cache hint (see :data:`STORE_CACHES`), None for the default policy."""

    dst: TensorVar
    src: TensorVar
    offsets: tuple
    dims: tuple[int, ...]
    cache: str | None = None

    QUIET_NONE: ClassVar[tuple] = ("cache",)

    def validate(self) -> None:
        """A known cache hint, on elements of whole bytes."""
        _check_cache(self.cache, STORE_CACHES, self.src.dtype, "store_global")


#: ``load_global(cache=)``: L1 eviction priority plus an L2 policy of the same name
#: (``evict_first``: streamed data, ``evict_last``: data read again soon), or no L1 allocation.
LOAD_CACHES = ("evict_first", "evict_last", "no_allocate")
#: ``store_global(cache=)``: the same L1/L2 priorities, or the streaming store (``st.global.cs``).
STORE_CACHES = ("evict_first", "evict_last", "stream")


def _check_cache(cache, allowed, dtype, name: str) -> None:
    if cache is not None and cache not in allowed:
        raise InstError(
            f"{name}: cache must be one of {', '.join(map(repr, allowed))} (or None), got {cache!r}"
        )
    if cache is not None and dtype.nbits % 8:
        raise InstError(f"{name}: cache hints take elements of whole bytes, not {dtype}")


@instruction("load_shared")
class LoadShared(Inst):
    """Copy a whole shared tile into registers."""

    out: TensorVar
    src: TensorVar


@instruction("store_shared")
class StoreShared(Inst):
    """Copy a register tile into a shared tile: the whole tile, or with ``offsets`` (one per
    shared dim) the sub-tile there, spanning shared dims ``dims`` (the others fixed at their
    offset); elements outside the shared tile are skipped."""

    dst: TensorVar
    src: TensorVar
    offsets: tuple | None = None
    dims: tuple[int, ...] | None = None

    QUIET_NONE: ClassVar[tuple] = ("offsets", "dims")  # a whole-tile store prints as before


@instruction("assign")
class AssignTensor(Inst):
    """Copy register tile ``src`` into ``out`` (same shape and dtype)."""

    out: TensorVar
    src: TensorVar


@instruction("store_element")
class StoreElement(Inst):
    """``t[i, j] = value`` on a register tile."""

    out: TensorVar
    indices: tuple
    value: Expr


# --- compute ---------------------------------------------------------------------------------


@instruction("cast")
class CastTensor(Inst):
    """Convert every element to ``out.dtype`` (round to nearest even)."""

    out: TensorVar
    src: TensorVar


@instruction("binary")
class ElementwiseBinary(Inst):
    """``out = a op b`` elementwise with broadcasting; a scalar operand is broadcast."""

    out: TensorVar
    op: str
    a: Operand
    b: Operand


@instruction("unary")
class ElementwiseUnary(Inst):
    """``out = f(a)`` elementwise (neg, not, abs, exp, log, sqrt, ...)."""

    out: TensorVar
    op: str
    a: TensorVar


@instruction("where")
class Where(Inst):
    """``out = cond ? x : y`` elementwise with broadcasting."""

    out: TensorVar
    cond: Operand
    x: Operand
    y: Operand


@instruction("reduce")
class Reduce(Inst):
    """Reduce ``src`` along ``dim`` with ``op`` in sum/max/min/any/all. ``acc``: the dtype a
    sum of 16-bit floats accumulates in (None: float32; the tile's own dtype: each partial
    sum rounded to it, pairs at a time on the GPU)."""

    out: TensorVar
    src: TensorVar
    op: str
    dim: int
    keepdim: bool
    acc: object = None

    def validate(self) -> None:
        """An accumulator dtype only for sums of 16-bit floats: float32 or their own."""
        if self.acc is None:
            return
        src = self.src.dtype
        if self.op != "sum" or src.name not in ("float16", "bfloat16"):
            raise InstError(
                f"acc_dtype is for sums of float16/bfloat16 tiles, not {self.op} of {src}"
            )
        if self.acc.name not in ("float32", src.name):
            raise InstError(f"acc_dtype of a {src} sum must be float32 or {src}, got {self.acc}")


@instruction("scan")
class Scan(Inst):
    """Prefix ``op`` of ``src`` along ``dim`` (``exclusive``: element i combines 0..i-1,
    element 0 is the op's identity); op in add/mul/max/min/and/or/xor."""

    out: TensorVar
    src: TensorVar
    op: str
    dim: int
    exclusive: bool

    OPS: ClassVar[tuple] = ("add", "mul", "max", "min", "and", "or", "xor")

    def validate(self) -> None:
        """The op is known, bitwise ops are on integer (or boolean) tiles, the dim exists."""
        if self.op not in self.OPS:
            raise InstError(f"scan op must be one of {', '.join(self.OPS)}, got {self.op!r}")
        if self.op in ("and", "or", "xor") and self.src.dtype.is_float():
            raise InstError(f"scan op {self.op} needs an integer tile, got {self.src.dtype}")
        if not 0 <= self.dim < self.src.ndim:
            raise InstError(
                f"scan dim {self.dim} is out of range for a tile of rank {self.src.ndim}"
            )

    def identity(self):
        """The op's identity in the tile's dtype (what an exclusive scan starts from)."""
        dt = self.src.dtype
        if self.op in ("add", "or", "xor"):
            return 0
        if self.op == "mul":
            return 1
        if self.op == "and":
            return True if dt.kind == "bool" else -1
        if self.op == "max":
            return -float("inf") if dt.is_float() else dt.min_value()
        return float("inf") if dt.is_float() else dt.max_value()


@instruction("dot", ptx="9.7.14.5.14 mma (warp-level matrix multiply-accumulate)")
class Dot(Inst):
    """``out = a @ b + c`` on register tiles, accumulating in ``out.dtype``."""

    out: TensorVar
    a: TensorVar
    b: TensorVar
    c: TensorVar | None


# --- synchronization and debugging -----------------------------------------------------------


@instruction("sync", ptx="9.7.13.1 bar, barrier")
class Sync(Inst):
    """Barrier over the threads of the current thread group."""


@instruction("printf")
class Printf(Inst):
    """C-style printf, once per thread group (the group's first thread prints)."""

    fmt: str
    args: tuple


@instruction("print_tensor")
class PrintTensor(Inst):
    """Print a tile with a message."""

    msg: str
    tensor: TensorVar
    fmt: str | None

    @staticmethod
    def default_fmt(dtype) -> str:
        """The printf format of one element when ``fmt`` is None (every backend uses it)."""
        if dtype.kind == "bool":
            return "%1d"
        if dtype.is_integer():
            return "%5d"
        return "%6.3f" if dtype.nbits >= 32 else "%5.2f"

    @staticmethod
    def conversion(fmt: str) -> re.Match | None:
        """The one printf conversion of ``fmt`` (flags in group 1, the letter in group 2), or
        None when it does not have exactly one conversion of a number (``%%`` is text)."""
        found = [m for m in _FMT_CONV.finditer(fmt) if m.group(0) != "%%"]
        stray = _FMT_CONV.sub("", fmt).count("%")
        if len(found) != 1 or stray or found[0].group(2) not in "diouxXfFeEgG":
            return None
        return found[0]

    def validate(self) -> None:
        """``fmt`` formats one element: exactly one conversion of a number."""
        if self.fmt is not None and self.conversion(self.fmt) is None:
            raise InstError(
                "print_tensor's fmt must hold exactly one printf conversion of a number "
                f"(such as %d, %5.2f, %e), got {self.fmt!r}"
            )


#: A printf conversion: ``%%`` or flags, width, precision, an ignored length and a letter.
_FMT_CONV = re.compile(r"%%|%([-+ #0]*\d*(?:\.\d+)?)(?:hh|h|ll|l|z|j|t)?([A-Za-z])")


# --- Hopper asynchronous machinery -----------------------------------------------------------


@instruction("mbarrier_alloc", ptx="9.7.13.15.9 mbarrier.init")
class MBarrierAlloc(Inst):
    """Allocate one shared-memory mbarrier per count; ``out`` holds their addresses."""

    out: TensorVar
    counts: tuple

    #: PTX ISA 9.7.13.15.1: the expected arrival count is in [1, 2^20 - 1]
    MAX_COUNT: ClassVar[int] = (1 << 20) - 1

    @classmethod
    def count_error(cls, n: int) -> str | None:
        """Why ``n`` cannot be an expected arrival count (None when it can)."""
        if not 1 <= n <= cls.MAX_COUNT:
            return f"an mbarrier's expected arrival count must be in [1, 2^20), got {n}"
        return None

    def validate(self) -> None:
        """Constant counts are checked now; the others when the barriers are initialized."""
        if not self.counts:
            raise InstError("mbarrier.alloc needs at least one count")
        for c in self.counts:
            if isinstance(c, Const) and (msg := self.count_error(c.value)):
                raise InstError(msg)


def _ordering_from_strings(self):
    # strings are accepted at the boundary; the node always holds the enum members
    object.__setattr__(self, "sem", MemSem(self.sem))
    object.__setattr__(self, "scope", MemScope(self.scope))


@instruction("mbarrier_arrive", ptx="9.7.13.15.13 mbarrier.arrive")
class MBarrierArrive(Inst):
    """Every thread of the current group arrives ``count`` times."""

    barrier: Expr
    count: Expr
    sem: MemSem
    scope: MemScope

    __post_init__ = _ordering_from_strings


@instruction("mbarrier_arrive_expect_tx", ptx="9.7.13.15.13 mbarrier.arrive.expect_tx")
class MBarrierArriveExpectTx(Inst):
    """Every thread of the current group adds ``tx_bytes`` expected bytes, then arrives."""

    barrier: Expr
    tx_bytes: Expr
    sem: MemSem
    scope: MemScope

    __post_init__ = _ordering_from_strings


@instruction("mbarrier_wait", ptx="9.7.13.15.16 mbarrier.test_wait/try_wait (parity)")
class MBarrierWait(Inst):
    """Block until the phase with parity ``phase`` of the barrier has completed;
    ``suspend_ns`` (None: the system's limit) hints how long each try_wait may suspend the
    thread before it retries (not printed at None, so earlier IR text keeps its form)."""

    barrier: Expr
    phase: Expr
    sem: MemSem
    scope: MemScope
    suspend_ns: int | None = None

    QUIET_NONE: ClassVar[tuple] = ("suspend_ns",)

    __post_init__ = _ordering_from_strings


#: cp.async.bulk.tensor: each box dimension is at most 256 elements
TMA_BOX_LIMIT = 256


def _tma_box_error(what: str, tile: TensorVar) -> str | None:
    for i, n in enumerate(tile.shape):
        if n > TMA_BOX_LIMIT:
            return (
                f"{what}: tile dim {i} is {n} elements, over the TMA box limit of "
                f"{TMA_BOX_LIMIT} per dimension"
            )
    return None


@instruction("tma_global_to_shared", ptx="9.7.9.25.5.2 cp.async.bulk.tensor")
class TmaGlobalToShared(Inst):
    """Asynchronous tile copy global -> shared completing bytes on ``mbarrier``."""

    src: TensorVar
    dst: TensorVar
    offsets: tuple
    dims: tuple[int, ...]
    mbarrier: Expr

    def validate(self) -> None:
        """The shared tile fits one TMA box per dimension."""
        if msg := _tma_box_error("tma.global_to_shared", self.dst):
            raise InstError(msg)


@instruction("tma_shared_to_global", ptx="9.7.9.25.5.2 cp.async.bulk.tensor")
class TmaSharedToGlobal(Inst):
    """Asynchronous tile copy shared -> global in the current bulk group."""

    src: TensorVar
    dst: TensorVar
    offsets: tuple
    dims: tuple[int, ...]

    def validate(self) -> None:
        """The shared tile fits one TMA box per dimension."""
        if msg := _tma_box_error("tma.shared_to_global", self.src):
            raise InstError(msg)


@instruction("tma_commit_group", ptx="9.7.9.25.6.2 cp.async.bulk.commit_group")
class TmaCommitGroup(Inst):
    """Close the current bulk async group of shared -> global copies."""


@instruction("tma_wait_group", ptx="9.7.9.25.6.3 cp.async.bulk.wait_group")
class TmaWaitGroup(Inst):
    """Wait until at most ``n`` bulk async groups are pending (``read``: until their shared
    sources have been read, not until their global writes are done)."""

    n: int
    read: bool = False


@instruction("wgmma_fence", ptx="9.7.15.6.1 wgmma.fence")
class WgmmaFence(Inst):
    """Order register/shared accesses before the following wgmma.mma_async."""


@instruction("wgmma_mma", ptx="9.7.15.5.2 wgmma.mma_async")
class WgmmaMma(Inst):
    """``d += a @ b`` asynchronously on the tensor cores (b in shared memory; a in shared
    memory or, as the A fragment of wgmma.mma_async, in registers)."""

    a: TensorVar
    b: TensorVar
    d: TensorVar


@instruction("wgmma_commit_group", ptx="9.7.15.6.2 wgmma.commit_group")
class WgmmaCommitGroup(Inst):
    """Close the current wgmma group."""


@instruction("wgmma_wait_group", ptx="9.7.15.6.3 wgmma.wait_group")
class WgmmaWaitGroup(Inst):
    """Wait until at most ``n`` wgmma groups are pending; retired groups' results land."""

    n: int


@instruction("fence_proxy_async", ptx="9.7.13.4 membar/fence (proxy.async)")
class FenceProxyAsync(Inst):
    """Order generic-proxy accesses of ``space`` (``"shared"``: the block's shared memory,
    ``"global"``) against async-proxy (TMA/WGMMA) accesses, both ways."""

    space: str = "shared"

    SPACES: ClassVar[tuple[str, ...]] = ("shared", "global")

    def validate(self) -> None:
        """The space is one the PTX proxy fence names (``.shared::cta`` or ``.global``)."""
        if self.space not in self.SPACES:
            raise InstError(f"space must be 'shared' or 'global', got {self.space!r}")


@instruction("setmaxnreg", ptx="9.7.19.5 setmaxnreg")
class SetMaxNReg(Inst):
    """Set the registers per thread of the current warp groups to ``count`` (sm90+): warp
    groups that only issue copies give registers back, ones that hold accumulators take them."""

    count: int
