"""Interpreter rules of the atomics and scatter stores (elements applied in row-major order).

The GPU applies the elements of one atomic (and those of different threads and blocks) in an
unspecified order; the interpreter's row-major order is one of the allowed outcomes.
"""

from __future__ import annotations

import numpy as np

from tilus.backends.interp import races
from tilus.backends.interp.numeric import convert, poison
from tilus.backends.interp.packed import PackedGlobalView
from tilus.backends.interp.rules import apply_binary, reg, rule, scal, shared
from tilus.backends.interp.sched import SemWait
from tilus.backends.interp.values import GlobalViewValue, PointerValue
from tilus.errors import TilusRuntimeError
from tilus.ir import inst_memory as M
from tilus.ir.enums import TensorKind
from tilus.ir.tensor import TensorVar

_BINARY = {"add": "+", "sub": "-", "min": "min", "max": "max"}


def _bits(a: np.ndarray) -> np.ndarray:
    """Floats as their bit patterns (cas compares bits, as atom.cas.b32/b64 does)."""
    return a.view(f"u{a.itemsize}") if a.dtype.kind == "f" else a


def _apply(op, old, v, cmp, dtype, loc):
    if op in _BINARY:
        return apply_binary(_BINARY[op], old, v, dtype, loc)
    if op == "exch":
        return v
    return np.where(_bits(old) == _bits(cmp), v, old)  # cas


def memory(task, t, loc, what) -> np.ndarray:
    """The array of a shared or global destination, checked for races and writability."""
    if t.kind == TensorKind.SHARED:
        v = shared(task, t, loc)
        task.cta.units.check_write(v, loc, what)
        return v.arr
    g = task.env[t]
    if isinstance(g, PackedGlobalView):
        raise TilusRuntimeError(f"{what} on bit-packed {t.dtype} memory is not supported", loc)
    if not g.arr.flags.writeable:
        raise TilusRuntimeError(
            f"the kernel writes into `{g.name}`, but the array passed for it is read-only", loc
        )
    return g.arr


def _positions(arr, values, indices, dim):
    """(tile position, destination position) of every element that lands in ``arr``, in
    row-major order of the tile."""
    for p in np.ndindex(values.shape):
        q = list(p)
        if indices is not None:
            q[dim] = int(indices[p])
        if all(0 <= x < n for x, n in zip(q, arr.shape)):
            yield p, tuple(q)


@rule(M.Atomic)
def _atomic(task, inst, loc):
    arr = memory(task, inst.dst, loc, f"this atomic {inst.op}")
    dt = inst.dst.dtype
    v = convert(reg(task, inst.values, loc), dt)
    cmp = convert(reg(task, inst.compare, loc), dt) if inst.compare is not None else None
    ix = reg(task, inst.indices, loc) if inst.indices is not None else None
    out = poison(inst.values.shape, dt)  # elements that update nothing keep no old value
    if ix is None:  # distinct destinations: one vectorized step
        region = tuple(slice(0, min(n, m)) for n, m in zip(v.shape, arr.shape))
        old = arr[region].copy()
        c = cmp[region] if cmp is not None else None
        arr[region] = convert(_apply(inst.op, old, v[region], c, dt, loc), dt)
        out[region] = old
    else:
        for p, q in _positions(arr, v, ix, inst.dim):
            old = np.asarray(arr[q]).copy()
            arr[q] = convert(_apply(inst.op, old, np.asarray(v[p]), None, dt, loc), dt)
            out[p] = old
    task.env[inst.out] = out


@rule(M.ScatterStore)
def _scatter_store(task, inst, loc):
    arr = memory(task, inst.dst, loc, "this scatter store")
    what = f"store_{inst.dst.kind}_scatter"
    # a plain write of (conservatively) the whole destination in the happens-before model;
    # atomics are not recorded there (atomic updates do not race with each other)
    if inst.dst.kind == TensorKind.SHARED:
        races.access_shared(task, shared(task, inst.dst, loc), True, loc, what)
    else:
        races.access_global(task, arr, True, loc, what, task.env[inst.dst].name)
    v = convert(reg(task, inst.values, loc), inst.dst.dtype)
    ix = reg(task, inst.indices, loc)
    for p, q in _positions(arr, v, ix, inst.dim):
        arr[q] = v[p]


def _semaphore(task, inst, loc, what):
    if isinstance(inst.sem, TensorVar):  # a one-element global tile: a pointer to its element
        view = task.env[inst.sem]
        flat = view.arr.reshape(1)
        if not np.shares_memory(flat, view.arr):
            raise TilusRuntimeError(f"{what}: `{view.name}` is not addressable", loc)
        ptr = PointerValue(flat, 0, view.name, inst.sem.dtype)
    else:
        ptr = scal(task, inst.sem, loc)
    if not isinstance(ptr, PointerValue):
        raise TilusRuntimeError(f"{what} needs a pointer", loc)
    if ptr.buf.dtype != np.int32:
        raise TilusRuntimeError(
            f"{what}: `{ptr.name}` is an array of {ptr.buf.dtype}, not int32", loc
        )
    if not 0 <= ptr.offset < ptr.buf.size:
        raise TilusRuntimeError(
            f"{what}: element {ptr.offset} is outside `{ptr.name}` ({ptr.buf.size} elements)", loc
        )
    return ptr, int(scal(task, inst.value, loc))


@rule(M.LockSemaphore)
def _lock(task, inst, loc):
    ptr, value = _semaphore(task, inst, loc, "lock_semaphore")
    yield SemWait(ptr, value, loc)  # the scheduler runs other blocks until the value is there


@rule(M.ReleaseSemaphore)
def _release(task, inst, loc):
    ptr, value = _semaphore(task, inst, loc, "release_semaphore")
    if not ptr.buf.flags.writeable:
        raise TilusRuntimeError(f"release_semaphore: `{ptr.name}` is read-only", loc)
    ptr.buf[ptr.offset] = value


@rule(M.GlobalTensorAlloc)
def _global_tensor(task, inst, loc):
    ws = task.cta.workspace
    hit = ws.get(inst)
    if hit is None:
        out = inst.out
        arr = np.zeros(out.shape, out.dtype.np_storage)
        if not inst.requires_clean:
            arr = poison(out.shape, out.dtype)
        hit = ws[inst] = (arr, loc)
    task.env[inst.out] = GlobalViewValue(hit[0], inst.out.dtype, inst.out.name)
