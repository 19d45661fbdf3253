"""The IR builder the front end drives: statement blocks, thread groups, names and checks."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from tilus.dtypes import DataType, PointerType
from tilus.errors import SourceLoc, TilusProgramError
from tilus.ir.enums import TensorKind
from tilus.ir.expr import Expr, Var, cast
from tilus.ir.inst import Inst, InstError
from tilus.ir.stmt import (
    AssignStmt,
    DeclareStmt,
    InstStmt,
    Stmt,
    seq,
)
from tilus.ir.tensor import GlobalTensor, RegisterTensor, SharedTensor, TensorVar

_local = threading.local()


def current() -> Builder:
    """The builder of the kernel being transpiled (instructions called outside one fail)."""
    b = getattr(_local, "builder", None)
    if b is None:
        raise TilusProgramError(
            "tilus instructions can only be used inside a kernel's __call__ (or the methods it "
            "calls); the kernel body is transpiled, never run as Python"
        )
    return b


@dataclass
class Group:
    """A thread group as the front end sees it: absolute first thread and size."""

    begin: int  # absolute thread index of the first thread (-1 unknown: an elected thread)
    size: int
    abs_begin: int  # absolute begin used for alignment checks (elected thread -> parent's)
    loc: SourceLoc | None = None


@dataclass
class Attributes:
    """Launch attributes set in the kernel body: ``self.attrs.blocks``, ``.warps``,
    ``.cluster_blocks`` and ``.min_blocks`` (blocks an SM must hold at once: a register
    budget for the CUDA compiler, ``__launch_bounds__``'s second argument)."""

    blocks: object = None
    warps: object = None
    cluster_blocks: object = (1, 1, 1)
    min_blocks: object = 1
    _locs: dict = field(default_factory=dict)

    def __setattr__(self, name, value):
        if name not in ("blocks", "warps", "cluster_blocks", "min_blocks", "_locs"):
            raise TilusProgramError(
                f"unknown launch attribute {name!r}; use blocks, warps, cluster_blocks or "
                f"min_blocks",
                _current_loc(),
            )
        if name == "min_blocks" and (
            isinstance(value, Expr) or not isinstance(value, int) or not 1 <= value <= 32
        ):
            raise TilusProgramError(
                f"self.attrs.min_blocks must be a compile-time int in [1, 32], got {value!r}",
                _current_loc(),
            )
        if name == "warps" and value is not None:
            if isinstance(value, Expr) or not isinstance(value, int) or not 1 <= value <= 32:
                raise TilusProgramError(
                    f"self.attrs.warps must be a compile-time int in [1, 32], got {value!r}",
                    _current_loc(),
                )
        b = getattr(_local, "builder", None)
        if name != "_locs" and b is not None and b.runtime_depth:
            raise TilusProgramError(
                f"self.attrs.{name} must be set outside runtime loops, ifs and thread groups "
                f"(it is a launch attribute, fixed before the kernel starts)",
                _current_loc(),
            )
        if name == "cluster_blocks":
            value = _cluster_shape(value)
            if b is not None and b.cluster_read:
                raise TilusProgramError(
                    "self.attrs.cluster_blocks must be set before self.cluster is used",
                    _current_loc(),
                )
        object.__setattr__(self, name, value)
        if name != "_locs":
            b = getattr(_local, "builder", None)
            if b is not None:
                self._locs[name] = b.loc
                if name == "warps":
                    b.open_root_group(value)


def _cluster_shape(value) -> tuple[int, int, int]:
    """``cluster_blocks`` as three ints (missing dims are 1), or a located error."""
    from tilus.ir.inst_cluster import cluster_shape_error

    items = list(value) if isinstance(value, (list, tuple)) else [value]
    if not 1 <= len(items) <= 3 or any(isinstance(n, Expr) for n in items):
        raise TilusProgramError(
            f"self.attrs.cluster_blocks must be 1 to 3 compile-time ints, got {value!r}",
            _current_loc(),
        )
    shape = tuple(items + [1] * (3 - len(items)))
    if msg := cluster_shape_error(shape):
        raise TilusProgramError(msg, _current_loc())
    return shape


def _current_loc():
    b = getattr(_local, "builder", None)
    return b.loc if b is not None else None


class Builder:
    """Accumulates the IR of one kernel while the transpiler walks the user's code."""

    def __init__(self):
        self.blocks: list[list[Stmt]] = [[]]
        self.loc: SourceLoc | None = None
        self.groups: list[Group] = []
        self.attrs = Attributes()
        self.names: dict[str, int] = {}
        self.name_hint: str | None = None
        self.runtime_depth = 0  # runtime loops/ifs/thread groups around the current statement
        self.decl_init: dict[Var, Expr | None] = {}  # for re-expressing the grid over params
        self.assigned: set[Var] = set()
        self.assumes: list = []  # (condition, loc) facts about the parameters (assume())
        self.cluster_read = False  # self.cluster was used (the shape may no longer change)
        self.permuted: dict = {}  # a permuted view -> (its source, dims), for operand checks

    # --- context -------------------------------------------------------------------------------
    def __enter__(self):
        self._prev = getattr(_local, "builder", None)
        _local.builder = self
        return self

    def __exit__(self, *exc):
        _local.builder = self._prev

    def error(self, msg: str, notes=None) -> TilusProgramError:
        """An error at the current source position."""
        return TilusProgramError(msg, self.loc, notes)

    # --- statement blocks ----------------------------------------------------------------------
    def emit(self, stmt: Stmt):
        self.blocks[-1].append(stmt)

    def push_block(self):
        self.blocks.append([])

    def pop_block(self) -> Stmt:
        return seq(self.blocks.pop())

    def inst(self, inst: Inst) -> Inst:
        """Check an instruction (a located error if its operands break a rule) and append it
        at the current source position."""
        try:
            inst.validate()
        except InstError as e:
            raise self.error(str(e)) from None
        self.emit(InstStmt(self.loc, inst))
        return inst

    # --- names ---------------------------------------------------------------------------------
    def fresh(self, hint: str) -> str:
        n = self.names.get(hint, 0)
        self.names[hint] = n + 1
        return hint if n == 0 else f"{hint}_{n}"

    def take_hint(self, default: str) -> str:
        """The name the value being built will be bound to (set by the transpiler)."""
        hint = self.name_hint or default
        self.name_hint = None
        return hint

    def declare(self, name: str, dtype, init: Expr | None) -> Var:
        v = Var(self.fresh(name), dtype)
        if init is not None:
            init = cast(init, dtype) if isinstance(dtype, DataType) else init
        self.emit(DeclareStmt(self.loc, v, init))
        self.decl_init[v] = init
        return v

    def assign(self, var: Var, value):
        self.assigned.add(var)
        if isinstance(var.dtype, PointerType):
            if not isinstance(value, Expr) or not isinstance(value.dtype, PointerType):
                raise self.error(
                    f"cannot assign a non-pointer value to pointer variable {var.name}"
                )
            self.emit(AssignStmt(self.loc, var, value))
            return
        self.emit(AssignStmt(self.loc, var, cast(value, var.dtype)))

    def register(self, dtype, shape, hint="r") -> RegisterTensor:
        return RegisterTensor(self.fresh(self.take_hint(hint)), dtype, tuple(shape))

    def shared(self, dtype, shape, hint="s") -> SharedTensor:
        return SharedTensor(self.fresh(self.take_hint(hint)), dtype, tuple(shape))

    def global_(self, dtype, shape, hint="g") -> GlobalTensor:
        return GlobalTensor(self.fresh(self.take_hint(hint)), dtype, tuple(shape))

    # --- thread groups -------------------------------------------------------------------------
    def open_root_group(self, warps: int):
        if self.groups and len(self.groups) > 1:
            raise self.error("self.attrs.warps must be set before any thread group is opened")
        self.groups = [Group(0, warps * 32, 0, self.loc)]

    @property
    def group(self) -> Group:
        if not self.groups:
            raise self.error(
                "this instruction needs the block's thread count: set self.attrs.warps first"
            )
        return self.groups[-1]

    def in_thread_group(self) -> bool:
        return len(self.groups) > 1

    # --- checks shared by instruction methods --------------------------------------------------
    def expect_tensor(self, value, kinds, what: str) -> TensorVar:
        if not isinstance(value, TensorVar) or value.kind not in kinds:
            got = value.type_str() if isinstance(value, TensorVar) else type(value).__name__
            raise self.error(f"{what} must be a {' or '.join(kinds)} tensor, got {got}")
        return value

    def expect_scalar(self, value, what: str, dtype=None) -> Expr:
        from tilus.ir.expr import as_expr

        if isinstance(value, TensorVar):
            if value.kind == TensorKind.REGISTER and value.shape == ():
                from tilus.ir.expr import TensorElement

                return TensorElement(value, (), value.dtype)
            raise self.error(f"{what} must be a scalar, got a {value.type_str()} tile")
        try:
            e = as_expr(value, dtype)
        except TypeError:
            raise self.error(f"{what} must be a scalar, got {type(value).__name__}") from None
        return cast(e, dtype) if dtype is not None else e

    def expect_offsets(self, offsets, n: int, what: str) -> tuple:
        if not isinstance(offsets, (list, tuple)):
            raise self.error(f"{what} must be a list of {n} offsets")
        if len(offsets) != n:
            raise self.error(f"{what} has {len(offsets)} entries but the tensor has rank {n}")
        from tilus.dtypes import int32

        return tuple(self.expect_scalar(o, f"{what}[{i}]", int32) for i, o in enumerate(offsets))
