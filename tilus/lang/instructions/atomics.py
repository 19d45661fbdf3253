"""Atomics on shared and global tiles (``self.atomic``) and the non-atomic scatter stores."""

from __future__ import annotations

from tilus.dtypes import PointerType, int32
from tilus.ir import inst_memory as M
from tilus.ir.enums import TensorKind
from tilus.ir.expr import Expr
from tilus.ir.tensor import TensorVar
from tilus.lang.builder import current

_SPACES = {"shared": ("shared", "cta"), "global": ("global", "gpu")}


def _atomic(space, op, dst, values, compare, indices, dim, sem, scope, output):
    b = current()
    b.expect_tensor(dst, (space,), f"{space}_{op}'s destination")
    b.expect_tensor(values, (TensorKind.REGISTER,), f"{space}_{op}'s values")
    if indices is not None:
        b.expect_tensor(indices, (TensorKind.REGISTER,), "the scatter indices")
        if isinstance(dim, bool) or not isinstance(dim, int):
            raise b.error(f"dim must be a compile-time int, got {dim!r}")
    if compare is not None:
        b.expect_tensor(compare, (TensorKind.REGISTER,), "cas's compare values")
    if output is not None:
        b.expect_tensor(output, (TensorKind.REGISTER,), "output")
    out = output if output is not None else b.register(dst.dtype, values.shape, "old")
    b.inst(M.Atomic(out, dst, op, values, compare, indices, dim if indices is not None else 0,
                    sem, scope))  # fmt: skip
    return out


def _elementwise(space, op):
    default_scope = _SPACES[space][1]

    def method(self, dst, values, *, sem="relaxed", scope=default_scope, output=None):
        return _atomic(space, op, dst, values, None, None, 0, sem, scope, output)

    method.__name__ = f"{space}_{op}"
    method.__doc__ = (
        f"Atomically {op} each element of register tile ``values`` into the element of "
        f"{space} tile ``dst`` at the same position; returns the previous values (a register "
        f"tile; ``output=`` names an existing one). ``sem`` is relaxed, acquire, release or "
        f"acq_rel; ``scope`` cta, cluster, gpu or sys (default {default_scope}). When the "
        f"result is unused the GPU gets a ``red`` (no return) instead of an ``atom``."
    )
    return method


def _cas(space):
    default_scope = _SPACES[space][1]

    def method(self, dst, compare, values, *, sem="relaxed", scope=default_scope, output=None):
        return _atomic(space, "cas", dst, values, compare, None, 0, sem, scope, output)

    method.__name__ = f"{space}_cas"
    method.__doc__ = (
        f"Compare-and-swap per element of {space} tile ``dst``: where it equals ``compare`` "
        f"it becomes ``values``; returns the previous values (``output=`` names a tile)."
    )
    return method


def _scatter(space, op):
    default_scope = _SPACES[space][1]

    def method(self, dst, *, dim, indices, values, sem="relaxed", scope=default_scope,
               output=None):  # fmt: skip
        return _atomic(space, op, dst, values, None, indices, dim, sem, scope, output)

    method.__name__ = f"{space}_scatter_{op}"
    method.__doc__ = (
        f"Atomically {op} ``values[p]`` into ``dst`` at ``p`` with ``p[dim]`` replaced by "
        f"``indices[p]`` ({space} memory; indices outside ``dst`` are skipped; duplicates all "
        f"apply, in an unspecified order on the GPU). Returns the previous values."
    )
    return method


class AtomicGroup:
    """Tile-level atomic read-modify-write (PTX ``atom``/``red``) on shared and global memory.

    The interpreter applies the elements of one instruction in row-major order; on the GPU the
    order (within the instruction and between threads and blocks) is unspecified, so only
    order-independent results (integer sums, min/max, ...) are reproducible.
    """


for _space in ("shared", "global"):
    for _op in ("add", "sub", "min", "max", "exch"):
        setattr(AtomicGroup, f"{_space}_{_op}", _elementwise(_space, _op))
    setattr(AtomicGroup, f"{_space}_cas", _cas(_space))
    for _op in M.Atomic.SCATTER_OPS:
        setattr(AtomicGroup, f"{_space}_scatter_{_op}", _scatter(_space, _op))


def _scatter_store(space, dst, dim, indices, values):
    b = current()
    b.expect_tensor(dst, (space,), f"store_{space}_scatter's destination")
    b.expect_tensor(values, (TensorKind.REGISTER,), f"store_{space}_scatter's values")
    b.expect_tensor(indices, (TensorKind.REGISTER,), "the scatter indices")
    if isinstance(dim, bool) or not isinstance(dim, int):
        raise b.error(f"dim must be a compile-time int, got {dim!r}")
    b.inst(M.ScatterStore(dst, indices, values, dim))


def _semaphore(cls, sem, value, what):
    b = current()
    if isinstance(sem, TensorVar):  # a one-element global tile: e.g. counts[i] of a global_tensor
        if sem.kind != TensorKind.GLOBAL or sem.size != 1 or sem.dtype != int32:
            raise b.error(
                f"{what} needs a pointer to an int32 in global memory or a one-element int32 "
                f"global tile, got {sem.type_str()}"
            )
    elif not isinstance(sem, Expr) or not isinstance(sem.dtype, PointerType):
        raise b.error(f"{what} needs a pointer to an int32 in global memory, got {sem!r}")
    elif sem.dtype.base is not None and sem.dtype.base != int32:
        raise b.error(f"{what} needs a pointer to int32, got a pointer to {sem.dtype.base}")
    if b.group.size != 1:
        raise b.error(
            f"{what} runs in a single thread (inside self.single_thread()); the current thread "
            f"group has {b.group.size} threads"
        )
    b.inst(cls(sem, b.expect_scalar(value, "the semaphore value", int32)))


class AtomicInstructions:
    """Adds ``self.atomic`` and the scatter stores."""

    atomic = AtomicGroup()

    def store_global_scatter(self, dst, *, dim, indices, values):
        """``dst[p with p[dim] = indices[p]] = values[p]`` for a global tensor (non-atomic: of
        duplicate indices an unspecified one wins; indices outside ``dst`` are skipped)."""
        _scatter_store("global", dst, dim, indices, values)

    def global_tensor(self, dtype, shape, *, layout=None, requires_clean: bool):
        """A kernel-lifetime global tensor shared by all blocks, from a workspace the launcher
        provides. With ``requires_clean=True`` it is zero when first allocated and the kernel
        must leave it zero again (the interpreter checks at exit); otherwise its contents are
        undefined at the start."""
        from tilus.lang.instructions.tiles import _dtype, _int_list

        b = current()
        if layout is not None:
            raise b.error("global_tensor(layout=...) is not supported yet (row-major only)")
        if not isinstance(requires_clean, bool):
            raise b.error(f"requires_clean must be True or False, got {requires_clean!r}")
        out = b.global_(_dtype(b, dtype), _int_list(b, shape, "shape"), "gt")
        b.inst(M.GlobalTensorAlloc(out, requires_clean))
        return out

    def lock_semaphore(self, sem, value):
        """Spin until the int32 at global address ``sem`` (a pointer expression, or a
        one-element int32 global tile such as ``counts[i]`` of a ``global_tensor``) equals
        ``value``, with acquire semantics; only in a single thread (``self.single_thread()``).
        Follow it with the group's ``sync()`` before other threads read what it guards."""
        _semaphore(M.LockSemaphore, sem, value, "lock_semaphore")

    def release_semaphore(self, sem, value):
        """Publish ``value`` into the int32 at ``sem`` (as for :meth:`lock_semaphore`) with release semantics
        (what this block wrote before is visible to whoever sees the value); only in a single
        thread, after the group's ``sync()`` when other threads wrote the guarded data."""
        _semaphore(M.ReleaseSemaphore, sem, value, "release_semaphore")

    def store_shared_scatter(self, dst, *, dim, indices, values):
        """:meth:`store_global_scatter` into a shared tile."""
        _scatter_store("shared", dst, dim, indices, values)
