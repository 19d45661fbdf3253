"""Interpreter rules of cp.async (copy_async): copies land when their group is waited for.

PTX ISA 9.7.9.25.3: the copies of a thread belong to its current group until
``cp.async.commit_group`` closes it; ``cp.async.wait_group n`` returns once at most ``n`` of
its committed groups are pending. The model keeps the data of each copy aside (read from
global memory at issue) and writes it into shared memory only at the wait that retires its
group, so a read of the tile before that wait is reported at its line (``AsyncUnits.check_read``).
Groups belong to the issuing thread group (a ``single_thread()`` block's to its parent, as
for TMA stores: elect.sync picks the same lane every time). In the happens-before model
(``races``) the global read is an access at issue and the shared write one at the wait, under
the waiting group's spread key: other threads see it after a ``sync()``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tilus.backends.interp import races
from tilus.backends.interp.rules import box_index, read_box, rule, scal, shared
from tilus.errors import SourceLoc, TilusRuntimeError, at
from tilus.ir import inst_memory as M


@dataclass
class PendingCopy:
    """One copy_async in flight: the shared view it fills and the data it will write."""

    dst: object  # SharedView
    data: np.ndarray
    loc: SourceLoc


def _owner(task):
    return task.parent if task.elected and task.parent is not None else task


def _land(task, group):
    # each thread's chunks land for that thread: a generic write under the waiting group's
    # spread key, so other threads (and groups) read it only after a sync() or barrier
    for p in group:
        p.dst.arr[...] = p.data
        races.record_shared(
            p.dst, True, races.GENERIC, task.skey, task.epoch, p.loc, "copy_async", task.label
        )


@rule(M.CopyAsync)
def _copy_async(task, inst, loc):
    g = task.env[inst.src]
    dst = shared(task, inst.dst, loc)
    offs = [int(scal(task, o, loc)) for o in inst.offsets]
    if not inst.check_bounds:
        gidx, tidx = box_index(g.arr, offs, inst.dims, dst.arr.shape)
        whole = gidx is not None and all(
            (t.stop - t.start) == n for t, n in zip(tidx, dst.arr.shape)
        )
        if not whole:
            raise TilusRuntimeError(
                f"copy_async with check_bounds=False: the tile at offsets {offs} leaves "
                f"`{g.name}` (shape {list(g.arr.shape)}); pass check_bounds=True to zero-fill",
                loc,
            )
    units = task.cta.units
    for groups in units.copies.values():
        for group in groups:
            for p in group:
                if dst.overlaps(p.dst.lo, p.dst.hi):
                    raise TilusRuntimeError(
                        f"race: copy_async into shared tile `{dst.name}` overlaps the copy_async "
                        f"issued at {at(p.loc)}, which has not been waited for",
                        loc,
                    )
    units.check_write(dst, loc, "this copy_async")
    index = box_index(g.arr, offs, inst.dims, dst.arr.shape)
    data = read_box(g, offs, inst.dims, dst.arr.shape, inst.dst.dtype, index)
    if index[0] is not None:  # the global tile is read at issue in this model
        races.access_global(task, g.arr[index[0] + (...,)], False, loc, "copy_async", g.name)
    # the shared write must not race with earlier accesses; it is recorded when it lands
    races.check_shared(task, dst, True, races.GENERIC, loc, "copy_async")
    units.copies.setdefault(_owner(task), [[]])[0].append(PendingCopy(dst, data, loc))


@rule(M.CopyAsyncCommitGroup)
def _commit(task, inst, loc):
    groups = task.cta.units.copies.setdefault(_owner(task), [[]])
    groups.append(groups[0])  # an empty group is a group too (PTX: commit always makes one)
    groups[0] = []


@rule(M.CopyAsyncWaitGroup)
def _wait_group(task, inst, loc):
    groups = task.cta.units.copies.get(_owner(task))
    if groups:
        while len(groups) - 1 > inst.n:
            _land(task, groups.pop(1))


@rule(M.CopyAsyncWaitAll)
def _wait_all(task, inst, loc):
    groups = task.cta.units.copies.pop(_owner(task), None)
    for group in groups or ():
        _land(task, group)
