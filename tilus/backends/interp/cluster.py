"""The interpreter's thread-block clusters: blocks that run together and reach each other.

The blocks of a cluster are started together and interleaved by the grid loop
(``launch.run_program``): a block runs until none of its thread groups can move, then the next
block of the cluster runs, so a ``cluster.sync()`` or a barrier that a peer arrives on blocks
one block on another, as on the GPU. Every block sees its peers' shared memory: a
shared::cluster address (``cluster.map_shared_addr``, PTX ``mapa``) carries the target rank
above the 24 bits of a shared-memory offset (``1 + rank`` in bits 24 and up, so a plain
shared::cta address, rank bits 0, is the block's own). A multicast TMA load becomes one
pending load per destination block, landing in that block's tile and completing on that
block's barrier; remote arrives count on the peer's barrier. The blocks share one key space
of the happens-before clocks (``races.py``), so races across blocks are found the same way.

``barrier.cluster`` is modelled per thread: each arrival of a group counts for its threads;
phase ``p`` completes when every thread of every block still running has arrived ``p``
times. Threads that never arrive leave the others blocked: a deadlock report, not a hang.
"""

from __future__ import annotations

import numpy as np

from tilus.backends.interp import races
from tilus.backends.interp.values import SharedView
from tilus.errors import TilusRuntimeError

RANK_SHIFT = 24  # shared-memory offsets stay below 2^18 (232448 bytes)
OFFSET_MASK = (1 << RANK_SHIFT) - 1


class Cluster:
    """The blocks of one cluster (by rank) and its ``barrier.cluster`` state."""

    def __init__(self, shape, num_threads: int):
        self.shape = tuple(shape)
        self.size = shape[0] * shape[1] * shape[2]
        self.ctas: list = []  # by rank
        self.keys = 0
        self.arrived = [np.zeros(num_threads, dtype=np.int64) for _ in range(self.size)]
        self.completed = 0  # phases of barrier.cluster completed
        self.vc: dict = {}  # releases of the arrivals so far (happens-before)
        self.last_vc: dict = {}

    def new_key(self) -> int:
        self.keys += 1
        return self.keys

    def sync_arrive(self, task, loc) -> int:
        """``task``'s threads arrive on barrier.cluster; returns the phase they wait for."""
        counts = self.arrived[task.cta.rank]
        counts[task.begin : task.begin + task.size] += 1
        races.join(self.vc, races.release(task))
        self.check_complete()
        return int(counts[task.begin : task.begin + task.size].max())

    def check_complete(self):
        """Complete every phase that all running threads have arrived for; wake its waiters."""
        live = [self.arrived[c.rank] for c in self.ctas if not c.exited]
        done = min((int(a.min()) for a in live), default=1 << 62)
        if done <= self.completed:
            return
        self.completed = done
        self.last_vc = dict(self.vc)
        for c in self.ctas:
            c.wake_cluster()

    def block_exited(self, cta):
        """A block ended: its threads no longer take part in barrier.cluster."""
        cta.exited = True
        self.check_complete()

    def waiting_lines(self) -> list[str]:
        """What each blocked thread group of the cluster's blocks waits for (a deadlock)."""
        lines = []
        for c in self.ctas:
            if c.exited:
                continue
            x, y, z = c.block
            for line in c.blocked_lines():
                lines.append(f"  block ({x}, {y}, {z}) rank {c.rank}:{line[1:]}")
        return lines


def mapped(addr: int, rank: int) -> int:
    """The interpreter's shared::cluster address of offset ``addr`` in the block of ``rank``."""
    return ((rank + 1) << RANK_SHIFT) | (int(addr) & OFFSET_MASK)


def target_block(task, addr, loc, what: str):
    """(block, shared-memory offset) a shared::cluster address refers to."""
    addr = int(addr)
    cta = task.cta
    tag = addr >> RANK_SHIFT
    if tag == 0:
        return cta, addr
    cl = cta.cluster
    if cl is None or tag > cl.size:
        raise TilusRuntimeError(
            f"{what}: {addr:#x} is not a shared-memory address of this block's cluster",
            loc,
        )
    return peer(task, tag - 1, loc, what), addr & OFFSET_MASK


def peer(task, rank: int, loc, what: str):
    """The running block of cluster ``rank`` (an error if it has exited)."""
    cl = task.cta.cluster
    size = 1 if cl is None else cl.size
    if not 0 <= rank < size:
        raise TilusRuntimeError(
            f"{what}: cluster rank {rank} is outside the cluster's ranks [0, {size})", loc
        )
    if cl is None:
        return task.cta
    c = cl.ctas[rank]
    if c.exited:
        x, y, z = c.block
        raise TilusRuntimeError(
            f"{what} reaches block ({x}, {y}, {z}) (cluster rank {rank}), which has already "
            f"exited: a block must not end while its cluster peers still use its shared memory "
            f"(end both with self.cluster.sync())",
            loc,
        )
    return c


def barrier_at(task, addr, cluster_scope: bool, loc, what: str):
    """(block, mbarrier) at a shared::cta or, for a cluster-scope arrive, shared::cluster
    address."""
    cta, off = target_block(task, addr, loc, what)
    if (int(addr) >> RANK_SHIFT) and not cluster_scope:
        raise TilusRuntimeError(
            f"{what}: the barrier {int(addr):#x} is a shared::cluster address (from "
            f"cluster.map_shared_addr); it needs scope='cluster'",
            loc,
        )
    bar = cta.units.barriers.get(off)
    if bar is None:
        if cta is not task.cta:
            raise TilusRuntimeError(
                f"{what}: no mbarrier at offset {off} of the block of cluster rank {cta.rank} "
                f"(it has not run its mbarrier.alloc yet: pass a self.cluster.sync() after "
                f"allocating barriers and before peers use them)",
                loc,
            )
        return cta, cta.units.barrier(off, loc)
    return cta, bar


def ranks_of(task, mask: int, loc, what: str) -> list[int]:
    """The cluster ranks set in a multicast mask (each one a running block)."""
    cl = task.cta.cluster
    size = 1 if cl is None else cl.size
    if not 0 < mask < (1 << size):
        raise TilusRuntimeError(
            f"{what}: multicast_mask {mask:#x} must be a nonzero mask of the cluster's {size} "
            f"rank(s)",
            loc,
        )
    return [r for r in range(size) if mask >> r & 1]


def peer_view(task, view: SharedView, cta, loc, what: str) -> SharedView:
    """The view of the same bytes of shared memory in block ``cta`` (a cluster peer)."""
    if cta is task.cta:
        return view
    src = view.alloc
    for alloc in cta.shared.values():
        if alloc.offset == src.offset and alloc.array.shape == src.array.shape:
            if alloc.freed:
                break
            base = src.array
            start = view.arr.__array_interface__["data"][0] - base.__array_interface__["data"][0]
            arr = np.ndarray(view.arr.shape, view.arr.dtype, alloc.array, start, view.arr.strides)
            return SharedView(arr, alloc, view.lo, view.hi, view.dtype, view.name)
    raise TilusRuntimeError(
        f"{what}: shared tile `{view.name}` is not allocated in the block of cluster rank "
        f"{cta.rank} (it has not reached that shared_tensor, or freed it: synchronize the "
        f"cluster with self.cluster.sync() after allocating)",
        loc,
    )
