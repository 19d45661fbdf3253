"""Thread-block clusters: ``self.cluster`` (rank, shape, barrier, mapa) and the cluster forms of
the mbarrier arrivals (``arrive_and_expect_tx_remote`` / ``_multicast``)."""

from __future__ import annotations

from tilus.dtypes import uint16, uint32
from tilus.ir import inst_cluster as C
from tilus.ir.builtins import BLOCK_IDX, Dim3
from tilus.ir.enums import MemScope, MemSem, TensorKind
from tilus.ir.expr import Const, Expr, cast
from tilus.ir.tensor import TensorVar
from tilus.lang.builder import current


def _shape(b) -> tuple[int, int, int]:
    b.cluster_read = True
    return tuple(b.attrs.cluster_blocks)


def _rank_expr(b, target_rank, what: str) -> Expr:
    r = b.expect_scalar(target_rank, what, uint32)
    size = _shape(b)
    n = size[0] * size[1] * size[2]
    if isinstance(r, Const) and not 0 <= r.value < n:
        raise b.error(f"{what} {r.value} is outside the cluster's ranks [0, {n})")
    return r


def _local_barrier(b, barrier) -> Expr:
    e = b.expect_scalar(barrier, "the barrier", uint32)
    if isinstance(e, Const):
        raise b.error("the barrier must be an element of a tensor made by self.mbarrier.alloc")
    return e


def _ordering(b, sem, scope) -> tuple[MemSem, MemScope]:
    if sem not in (MemSem.RELAXED, MemSem.RELEASE):
        raise b.error(f"sem must be one of relaxed, release, got {sem!r}")
    if scope != MemScope.CLUSTER:
        raise b.error(f"an arrive on another block's barrier needs scope='cluster', got {scope!r}")
    return MemSem(sem), MemScope(scope)


def _tx(b, transaction_bytes) -> Expr:
    tx = b.expect_scalar(transaction_bytes, "transaction_bytes", uint32)
    if isinstance(tx, Const) and tx.value >= (1 << 20):
        raise b.error(
            f"transaction_bytes {tx.value} exceeds the mbarrier tx-count range (2^20 - 1)"
        )
    return tx


def check_multicast_mask(b, mask, what: str) -> Expr:
    """A user's multicast mask as a uint16 expression (a constant one must name ranks of the
    cluster)."""
    m = b.expect_scalar(mask, "multicast_mask", uint16)
    x, y, z = _shape(b)
    if x * y * z == 1:
        raise b.error(f"{what}: multicast needs a cluster (set self.attrs.cluster_blocks)")
    if isinstance(m, Const) and not 0 < m.value < (1 << (x * y * z)):
        raise b.error(
            f"{what}: multicast_mask {m.value:#x} must be a nonzero mask of the cluster's "
            f"{x * y * z} ranks"
        )
    return m


def _needs_cluster(b, what: str):
    x, y, z = _shape(b)
    if x * y * z == 1:
        raise b.error(f"{what} needs a cluster: set self.attrs.cluster_blocks first")


class ClusterGroup:
    """The block's thread-block cluster (sm90+; ``self.attrs.cluster_blocks``)."""

    @property
    def blockIdx(self) -> Dim3:  # noqa: N802 - CUDA's name
        """The block's index inside its cluster (x, y, z)."""
        x, y, z = _shape(current())
        return Dim3(BLOCK_IDX.x % x, BLOCK_IDX.y % y, BLOCK_IDX.z % z)

    @property
    def clusterDim(self) -> Dim3:  # noqa: N802 - CUDA's name
        """The cluster shape (x, y, z): compile-time ints."""
        return Dim3(*_shape(current()))

    @property
    def blockRank(self) -> Expr:  # noqa: N802 - the spec's name
        """The block's rank in its cluster (uint32; x fastest, as ``%cluster_ctarank``)."""
        x, y, _ = _shape(current())
        i = self.blockIdx
        return cast(i.x + i.y * x + i.z * (x * y), uint32)

    def sync(self):
        """Barrier over every thread of every block of the cluster (``barrier.cluster``
        arrive.release + wait.acquire): shared-memory writes before it are visible to every
        block of the cluster after it. Before a block exits, a cluster whose blocks reach each
        other's shared memory must pass one, so no block leaves while a peer still uses its
        memory."""
        b = current()
        g = b.group
        if g.begin < 0 or g.size % 32 or g.abs_begin % 32:
            raise b.error(
                "cluster.sync() must be executed by whole warps (barrier.cluster.aligned); the "
                f"current thread group has {g.size} threads"
                + (" (a single elected thread)" if g.begin < 0 else f" from {g.abs_begin}")
            )
        b.inst(C.ClusterSync())

    def map_shared_addr(self, addr, target_rank):
        """The shared::cluster addresses (``mapa``) of the block's shared addresses ``addr`` (a
        uint32 tile, e.g. the barriers of ``self.mbarrier.alloc``, or one element) in the
        block of cluster rank ``target_rank``; the result is a uint32 tile of the same shape
        (a 0-d tile for a scalar), usable as the barrier of ``mbarrier.arrive(...,
        scope="cluster")``."""
        b = current()
        _needs_cluster(b, "cluster.map_shared_addr")
        rank = _rank_expr(b, target_rank, "target_rank")
        if isinstance(addr, TensorVar) and not (
            addr.kind == TensorKind.REGISTER and addr.shape == ()
        ):
            b.expect_tensor(addr, (TensorKind.REGISTER,), "map_shared_addr's addr")
            if addr.dtype != uint32:
                raise b.error(f"map_shared_addr needs uint32 shared addresses, got {addr.dtype}")
            src, shape = addr, addr.shape
        else:
            src = b.expect_scalar(addr, "map_shared_addr's addr", uint32)
            shape = ()
        out = b.register(uint32, shape, "mapped")
        b.inst(C.MapSharedAddr(out, src, rank))
        return out


class ClusterMBarrier:
    """The cluster forms of the mbarrier arrivals (mixed into ``self.mbarrier``)."""

    def arrive_and_expect_tx_remote(
        self, barrier, transaction_bytes, target_rank, sem="release", scope="cluster"
    ):
        """Each thread of the group adds ``transaction_bytes`` and arrives once on the barrier
        at ``barrier``'s offset in the block of cluster rank ``target_rank`` (``mapa``; sm90+).
        """
        b = current()
        _needs_cluster(b, "mbarrier.arrive_and_expect_tx_remote")
        sem, scope = _ordering(b, sem, scope)
        b.inst(
            C.MBarrierArriveExpectTxRemote(
                _local_barrier(b, barrier),
                _tx(b, transaction_bytes),
                _rank_expr(b, target_rank, "target_rank"),
                sem,
                scope,
            )
        )

    def arrive_and_expect_tx_multicast(
        self, barrier, transaction_bytes, multicast_mask, sem="release", scope="cluster"
    ):
        """Arrive once, adding ``transaction_bytes``, on the barrier at ``barrier``'s offset in
        every block of the cluster whose rank is set in ``multicast_mask`` (one lane per rank
        issues it, so the group needs at least 16 threads; sm90+)."""
        b = current()
        what = "mbarrier.arrive_and_expect_tx_multicast"
        sem, scope = _ordering(b, sem, scope)
        g = b.group
        if g.begin < 0 or g.size < C.MBarrierArriveExpectTxMulticast.MIN_THREADS:
            raise b.error(
                f"{what} needs a thread group of at least 16 threads (one lane per cluster "
                f"rank); the current group has {1 if g.begin < 0 else g.size}"
            )
        mask = check_multicast_mask(b, multicast_mask, what)
        b.inst(
            C.MBarrierArriveExpectTxMulticast(
                _local_barrier(b, barrier), _tx(b, transaction_bytes), mask, sem, scope
            )
        )


class ClusterInstructions:
    """Adds ``self.cluster``."""

    cluster = ClusterGroup()
