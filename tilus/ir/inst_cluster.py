"""Thread-block cluster instructions: cluster barrier, mapa, remote/multicast arrives, TMA multicast.

A cluster (``self.attrs.cluster_blocks``, sm90+) is a group of up to 8 blocks that run at the
same time on one GPC; each block can reach the others' shared memory through shared::cluster
addresses (``mapa``), arrive on their mbarriers, and receive their multicast TMA loads.
"""

from __future__ import annotations

from typing import ClassVar

from tilus.ir.enums import MemScope, MemSem
from tilus.ir.expr import Const, Expr
from tilus.ir.inst import Inst, InstError, TmaGlobalToShared, instruction
from tilus.ir.tensor import TensorVar

#: PTX ISA 9.7.9.27.1.2: the multicast ctaMask is 16 bits, one per CTA rank of the cluster
MULTICAST_MASK_BITS = 16
#: CUDA's portable cluster size (16 blocks need a non-portable opt-in, which is refused)
MAX_CLUSTER_BLOCKS = 8


def cluster_shape_error(shape) -> str | None:
    """Why ``shape`` (three ints) cannot be a cluster shape (None when it can)."""
    if any(isinstance(n, bool) or not isinstance(n, int) or n < 1 for n in shape):
        return f"cluster_blocks must be positive compile-time ints, got {list(shape)}"
    size = shape[0] * shape[1] * shape[2]
    if size > MAX_CLUSTER_BLOCKS:
        return (
            f"cluster_blocks {list(shape)} has {size} blocks, over the portable cluster size "
            f"limit of {MAX_CLUSTER_BLOCKS} (larger, non-portable clusters are not supported)"
        )
    return None


def _check_mask(mask, what: str):
    if isinstance(mask, Const) and not 0 < mask.value < (1 << MULTICAST_MASK_BITS):
        raise InstError(
            f"{what}: multicast_mask {mask.value} must be a nonzero {MULTICAST_MASK_BITS}-bit "
            f"mask of cluster ranks"
        )


def _ordering(self):
    object.__setattr__(self, "sem", MemSem(self.sem))
    object.__setattr__(self, "scope", MemScope(self.scope))


# --- cluster-wide synchronization and addressing ---------------------------------------------


@instruction("cluster_sync", ptx="9.7.13.3 barrier.cluster (arrive.release + wait.acquire)")
class ClusterSync(Inst):
    """Every thread of every block of the cluster arrives, then waits for all the others."""


@instruction("map_shared_addr", ptx="9.7.9.23 mapa.shared::cluster")
class MapSharedAddr(Inst):
    """``out`` = the shared::cluster addresses of the shared addresses ``src`` (a uint32 tile
    or scalar) in the block of cluster rank ``rank``."""

    out: TensorVar
    src: TensorVar | Expr
    rank: Expr


# --- mbarrier arrivals on other blocks of the cluster ----------------------------------------


@instruction("mbarrier_arrive_expect_tx_remote", ptx="9.7.13.15.13 mbarrier.arrive.expect_tx")
class MBarrierArriveExpectTxRemote(Inst):
    """Every thread of the group adds ``tx_bytes`` and arrives on the barrier at the same
    offset as ``barrier`` in the block of cluster rank ``rank``."""

    barrier: Expr
    tx_bytes: Expr
    rank: Expr
    sem: MemSem
    scope: MemScope

    __post_init__ = _ordering


@instruction("mbarrier_arrive_expect_tx_multicast", ptx="9.7.13.15.13 mbarrier.arrive.expect_tx")
class MBarrierArriveExpectTxMulticast(Inst):
    """The group arrives once, adding ``tx_bytes``, on the barrier at the offset of ``barrier``
    in every block whose cluster rank is set in ``mask`` (one lane per rank issues it)."""

    barrier: Expr
    tx_bytes: Expr
    mask: Expr
    sem: MemSem
    scope: MemScope

    MIN_THREADS: ClassVar[int] = MULTICAST_MASK_BITS

    __post_init__ = _ordering

    def validate(self) -> None:
        """A constant mask names at least one rank and fits 16 bits."""
        _check_mask(self.mask, "mbarrier.arrive_and_expect_tx_multicast")


@instruction("tma_global_to_shared_multicast", ptx="9.7.9.25.5.2 cp.async.bulk.tensor.multicast")
class TmaGlobalToSharedMulticast(TmaGlobalToShared):
    """A TMA load whose box lands at the offset of ``dst`` in every block of the cluster whose
    rank is set in ``mask``, completing its bytes on each one's barrier at ``mbarrier``'s
    offset."""

    mask: Expr

    def validate(self) -> None:
        """The box fits TMA's limits and a constant mask names at least one rank."""
        TmaGlobalToShared.validate(self)
        _check_mask(self.mask, "tma.global_to_shared")
