"""Happens-before race detection of the interpreter: vector clocks, access records, proxy fences.

Every thread group (task) has a key and an epoch; its vector clock ``vc`` maps the keys of
other groups (and of mbarriers) to the latest epoch of theirs that is ordered before it.
Synchronization joins clocks: an mbarrier arrive or a TMA load's completion releases into the
barrier's current phase, a wait acquires the last completed phase, a fork hands the parent's
clock to the child, a ``sync()`` joins the clocks of the group's ended children. An access
(``Access``) records its byte range, kind, proxy, key and epoch; an access is ordered after an
earlier one when its group's clock covers the earlier epoch. A group of several threads makes
its generic accesses under a second key (its *spread* key): which thread touches which byte
depends on the layout, so a ``single_thread()`` or smaller group forked from it sees them only
up to the group's last ``sync()``, and the group's own later statements conflicting with them
(a read after a write, a write after a read, writes of differently shaped regions) need that
``sync()`` too; other accesses of one group are in program order.

Asynchronous accesses are recorded when they complete: a TMA load's write under its mbarrier's
key at the phase it completes, a WGMMA's operand reads and a TMA store's source reads under the
group that retired them (``wait_group``). Conflicts with an access still in flight are the
in-flight checks of ``hopper.AsyncUnits``; this module checks everything else, independent of
the schedule.
"""

from __future__ import annotations

import numpy as np

from tilus.errors import TilusRuntimeError, at

GENERIC = "generic"
ASYNC = "async"

_HINT = (
    "nothing orders the two: make the second wait for the first through an mbarrier "
    "(arrive after the first access, wait on that phase before the second), a sync() that "
    "both take part in, or the wait_group that retires an asynchronous access"
)


class Access:
    """One recorded access to shared or global memory."""

    __slots__ = (
        "lo",
        "hi",
        "arr",
        "dense",
        "write",
        "proxy",
        "key",
        "epoch",
        "loc",
        "what",
        "who",
        "fences",
    )

    def __init__(self, lo, hi, arr, dense, write, proxy, key, epoch, loc, what, who):
        self.lo, self.hi, self.arr, self.dense = lo, hi, arr, dense
        self.write, self.proxy, self.key, self.epoch = write, proxy, key, epoch
        self.loc, self.what, self.who = loc, what, who
        self.fences = None  # (key, epoch) of the proxy fences ordered after a generic access


def join(dst: dict, src: dict):
    """``dst`` := the pointwise maximum of ``dst`` and ``src``."""
    if not dst:
        dst.update(src)
        return
    get = dst.get
    for k, v in src.items():
        if get(k, 0) < v:
            dst[k] = v


def ordered(task, key, epoch) -> bool:
    """Whether the access of ``key`` at ``epoch`` happens before ``task``'s current point."""
    return key == task.key or key == task.skey or task.vc.get(key, 0) >= epoch


def release(task) -> dict:
    """A snapshot of what ``task`` knows, its own accesses included; later ones are not."""
    vc = dict(task.vc)
    vc[task.key] = vc[task.skey] = task.epoch
    task.epoch += 1
    return vc


def fork_clock(parent) -> dict:
    """The clock of a group forked by ``parent``: its generic accesses (spread over its
    threads) only up to its last ``sync()``, everything else it knows."""
    vc = dict(parent.vc)
    vc[parent.key] = parent.epoch
    if parent.skey != parent.key:
        vc[parent.skey] = max(vc.get(parent.skey, 0), parent.synced)
    parent.epoch += 1
    return vc


def synced(task):
    """``task`` passed a ``sync()``: its threads and its ended children are in step."""
    join(task.vc, task.unjoined)
    task.unjoined = {}
    task.synced = task.epoch
    task.epoch += 1


# --- shared memory -------------------------------------------------------------------------


def _dense(view) -> bool:
    return (view.hi - view.lo) * 8 <= view.arr.size * view.alloc.nbits + 7


def _overlap(r: Access, lo, hi, arr, dense) -> bool:
    if not (r.lo < hi and lo < r.hi):
        return False
    return (r.dense and dense) or bool(np.shares_memory(r.arr, arr))


def _range(lo, hi, r, base) -> str:
    return f"bytes [{max(lo, r.lo) - base}, {min(hi, r.hi) - base})"


def _note(r: Access) -> list[str]:
    snippet = r.loc.snippet() if r.loc is not None else ""
    return [f"the other access, at {r.loc}:"] + ([snippet] if snippet else [])


def _group_hint(task, r: Access) -> str:
    """Why an access of an enclosing group is not ordered before its single_thread()."""
    p = task.parent
    while p is not None:
        if r.key == p.skey and p.skey != p.key:
            return (
                f" ({p.label} made that access with all its threads, each its part: sync() the "
                f"group before {task.label} uses the result)"
            )
        p = p.parent
    return ""


def check_shared(task, view, write: bool, proxy: str, loc, what: str):
    """Report an earlier access of ``view``'s bytes that conflicts with this one and is not
    ordered before it, or generic writes an async-proxy read sees with no proxy fence."""
    recs = view.alloc.acc
    if not recs:
        return
    lo, hi, arr = view.lo, view.hi, view.arr
    dense = _dense(view)
    base = view.alloc.offset
    for r in recs:
        if not (write or r.write) or not _overlap(r, lo, hi, arr, dense):
            continue
        if proxy is GENERIC and _unsynced_in_group(task, r, loc, write, arr):
            verb = "writes" if write else "reads"
            did = "wrote" if r.write else "read"
            raise TilusRuntimeError(
                f"race within {task.label} on {_range(lo, hi, r, base)} of shared tile "
                f"`{view.alloc.name}`: {what} {verb} them and the group's {r.what} at "
                f"{at(r.loc)} {did} them with no sync() of the group between: a group spreads "
                "each access over its threads by the tile's layout, so one thread's part of the "
                "first is not ordered before another's of the second; call self.sync() between "
                "them",
                loc,
                _note(r),
            )
        if not ordered(task, r.key, r.epoch):
            verb = "writes" if write else "reads"
            did = "wrote" if r.write else "read"
            raise TilusRuntimeError(
                f"race on {_range(lo, hi, r, base)} of shared tile `{view.alloc.name}`: {what} "
                f"({task.label}) {verb} them, and {r.what} ({r.who}) at {at(r.loc)} {did} them; "
                f"{_HINT}{_group_hint(task, r)}",
                loc,
                _note(r),
            )
        if proxy is ASYNC and write and r.proxy is GENERIC:
            # PTX: accesses through different proxies are ordered only by a proxy fence, so an
            # mbarrier that orders generic reads before a TMA refill is not enough on its own
            # (r94-r96: lagging ld.shared/ldmatrix reads of a ring slot saw the next copy)
            if not any(ordered(task, k, e) for k, e in r.fences or ()):
                did = "wrote" if r.write else "read"
                raise TilusRuntimeError(
                    f"missing fence.proxy_async: {what} ({task.label}) writes "
                    f"{_range(lo, hi, r, base)} of shared tile `{view.alloc.name}` through the "
                    f"async proxy, but {r.what} ({r.who}) at {at(r.loc)} {did} them through the "
                    f"generic proxy and no fence.proxy_async() is ordered between the two (call "
                    f"self.fence.proxy_async() in the issuing thread after the wait or sync() "
                    f"that orders that access before this copy)",
                    loc,
                    _note(r),
                )
        if proxy is ASYNC and not write and r.proxy is GENERIC:
            if not any(ordered(task, k, e) for k, e in r.fences or ()):
                raise TilusRuntimeError(
                    f"missing fence.proxy_async: {what} ({task.label}) reads "
                    f"{_range(lo, hi, r, base)} of shared tile `{view.alloc.name}` through the "
                    f"async proxy, but {r.what} ({r.who}) at {at(r.loc)} wrote them through the "
                    f"generic proxy and no fence.proxy_async() is ordered between the two (call "
                    f"self.fence.proxy_async() after the writes, in the writing group, before the "
                    f"sync() or arrive that orders them before this read)",
                    loc,
                    _note(r),
                )


def _unsynced_in_group(task, r: Access, loc, write: bool, arr) -> bool:
    """Whether ``r`` is a generic access of ``task``'s own group (several threads) made since
    its last ``sync()`` by another statement, which this one conflicts with across threads: a
    read after a write or a write after a read, or two writes of regions of different shapes
    (two writes of one shape are taken to spread alike: rewriting a tile in place)."""
    if task.size <= 1 or r.key != task.skey or r.epoch <= task.synced or r.loc == loc:
        return False
    if r.proxy is not GENERIC or r.what == "copy_async":  # (copy_async has its own checks)
        return False
    return not (write and r.write) or r.arr.shape != arr.shape


def record_shared(view, write: bool, proxy: str, key, epoch, loc, what: str, who: str):
    """Record an access of ``view`` (already checked); drop the records it supersedes."""
    lo, hi, arr = view.lo, view.hi, view.arr
    dense = _dense(view)
    recs = view.alloc.acc
    if recs:
        keep = []
        for r in recs:
            same = (
                r.lo == lo
                and r.hi == hi
                and r.arr.shape == arr.shape
                and (r.arr.strides == arr.strides)
            )
            covered = same or (dense and lo <= r.lo and r.hi <= hi)
            # a write is ordered after every access it overlaps (or it raised); a read after
            # the same group's earlier reads
            if covered and (write or (r.key == key and not r.write)):
                continue
            keep.append(r)
        recs[:] = keep
    recs.append(Access(lo, hi, arr, dense, write, proxy, key, epoch, loc, what, who))


def access_shared(task, view, write: bool, loc, what: str):
    """A generic access by ``task`` now: checked, then recorded under its spread key."""
    check_shared(task, view, write, GENERIC, loc, what)
    record_shared(view, write, GENERIC, task.skey, task.epoch, loc, what, task.label)


def fence_proxy_async(task, allocs):
    """``fence.proxy.async`` by ``task``: generic accesses ordered before it are fenced for
    the async-proxy accesses it is ordered before (a read of a generic write, a TMA write over
    a generic read or write)."""
    key = task.key  # every thread of the group fences: in program order for its children too
    for alloc in allocs:
        for r in alloc.acc:
            if r.proxy is GENERIC and ordered(task, r.key, r.epoch):
                if r.fences is None:
                    r.fences = [(key, task.epoch)]
                elif all(k != key for k, _ in r.fences):
                    r.fences.append((key, task.epoch))


# --- global memory (within a block) --------------------------------------------------------


def _span(arr: np.ndarray):
    p = arr.__array_interface__["data"][0]
    lo = p + sum(min(0, (n - 1) * s) for n, s in zip(arr.shape, arr.strides))
    hi = p + sum(max(0, (n - 1) * s) for n, s in zip(arr.shape, arr.strides)) + arr.itemsize
    return lo, hi


def _records(task, region: np.ndarray):
    """The (writes, reads) records of the caller's buffer that ``region`` views."""
    root = region
    while isinstance(root.base, np.ndarray):
        root = root.base
    recs = task.cta.gacc.get(id(root))
    if recs is None:
        recs = task.cta.gacc[id(root)] = ([], [], root.__array_interface__["data"][0])
    return recs


def access_global(task, region: np.ndarray, write: bool, loc, what: str, name: str, pending=False):
    """Check an access of this block to global memory against the block's earlier ones (a
    TMA store not yet waited for, or an access of another group not ordered before this one)
    and record it; returns the record (a TMA store's stays pending until it is waited for)."""
    if region.size == 0:
        return None
    lo, hi = _span(region)
    writes, reads, base = _records(task, region)
    for recs in (writes, reads) if write else (writes,):
        for r in recs:
            if not (r.lo < hi and lo < r.hi):
                continue
            if r.epoch is not None and ordered(task, r.key, r.epoch):
                continue
            if not np.shares_memory(r.arr, region):
                continue
            if r.epoch is None:
                why = (
                    "the TMA store has not completed: wait for it with tma.wait_group(n) "
                    "(without read=True, which only waits until its shared source is read) and "
                    "order that wait before this access"
                )
            else:
                why = _HINT
            did = "wrote" if r.write else "read"
            raise TilusRuntimeError(
                f"race on {_range(lo, hi, r, base)} of global tensor `{name}`: {what} "
                f"({task.label}) {'writes' if write else 'reads'} them, and {r.what} ({r.who}) "
                f"at {at(r.loc)} {did} them; {why}",
                loc,
                _note(r),
            )
    recs = writes if write else reads
    key = task.skey
    if recs and not pending:  # the same group accessing the same box again supersedes
        last = recs[-1]
        if last.key == key and last.epoch is not None and last.lo == lo and last.hi == hi:
            if last.arr.shape == region.shape and last.arr.strides == region.strides:
                recs.pop()
    r = Access(
        lo,
        hi,
        region,
        False,
        write,
        GENERIC,
        key,
        None if pending else task.epoch,
        loc,
        what,
        task.label,
    )
    recs.append(r)
    return r
