"""What each instruction does to the values it names: the effects table the passes read."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from tilus.ir import inst as I
from tilus.ir import inst_cluster as C
from tilus.ir import inst_layout as LY
from tilus.ir import inst_lowbit as L
from tilus.ir import inst_memory as M
from tilus.ir import inst_prefetch as PF
from tilus.ir import inst_random as RN
from tilus.ir import inst_sync as SY
from tilus.ir.rules import RuleTable


class Out(Enum):
    """How an instruction treats its ``out`` field."""

    NONE = "none"  # no ``out`` field
    DEFINES = "defines"  # a new tile (or, given an existing tile as ``out=``, overwrites it)
    OVERWRITES = "overwrites"  # ``out`` must already exist; the instruction updates it


@dataclass(frozen=True)
class Effects:
    """The effects of one instruction class on the variables and tiles it names.

    ``out``: see :class:`Out`. ``updates``: other operand fields the instruction writes in
    place (a wgmma's accumulator). ``binders``: fields holding variables bound only inside
    ``scoped`` (the axes of an ``init`` expression); every other field is read.
    ``allocates``: ``out`` is always fresh storage, never an existing tile updated.
    """

    out: Out = Out.DEFINES
    updates: tuple[str, ...] = ()
    binders: tuple[str, ...] = ()
    scoped: str | None = None
    allocates: bool = False

    @property
    def overwrites(self) -> bool:
        """Whether ``out`` is updated rather than defined."""
        return self.out is Out.OVERWRITES


#: The effects of every instruction class (``EFFECTS.lookup(inst)``).
EFFECTS = RuleTable("effects")

_DEFINES = Effects()
_NO_OUT = Effects(Out.NONE)

for _cls in (
    I.GlobalView,
    I.SliceTensor,
    I.PermuteTensor,
    I.ReshapeTensor,
    I.LoadGlobal,
    I.LoadShared,
    I.CastTensor,
    I.ElementwiseBinary,
    I.ElementwiseUnary,
    I.Where,
    I.Reduce,
    I.Scan,
    I.Dot,
    I.MBarrierAlloc,
    RN.Random,
    M.Atomic,
    L.ViewTensor,
):
    EFFECTS.add(_cls, _DEFINES)

EFFECTS.add(I.AllocRegister, Effects(binders=("axes",), scoped="init", allocates=True))
EFFECTS.add(I.AllocShared, Effects(allocates=True))
EFFECTS.add(M.GlobalTensorAlloc, Effects(allocates=True))
EFFECTS.add(I.AssignTensor, Effects(Out.OVERWRITES))
EFFECTS.add(I.StoreElement, Effects(Out.OVERWRITES))
EFFECTS.add(I.WgmmaMma, Effects(Out.NONE, updates=("d",)))

for _cls in (
    I.FreeShared,
    I.StoreGlobal,
    I.StoreShared,
    I.Sync,
    I.Printf,
    I.PrintTensor,
    I.MBarrierArrive,
    I.MBarrierArriveExpectTx,
    I.MBarrierWait,
    I.TmaGlobalToShared,
    I.TmaSharedToGlobal,
    I.TmaCommitGroup,
    I.TmaWaitGroup,
    I.WgmmaFence,
    I.WgmmaCommitGroup,
    I.WgmmaWaitGroup,
    I.FenceProxyAsync,
    I.SetMaxNReg,
    M.CopyAsync,
    M.CopyAsyncCommitGroup,
    M.CopyAsyncWaitGroup,
    M.CopyAsyncWaitAll,
    M.ScatterStore,
    M.LockSemaphore,
    M.ReleaseSemaphore,
):
    EFFECTS.add(_cls, _NO_OUT)

# --- thread-block clusters -------------------------------------------------------------------
EFFECTS.add(C.MapSharedAddr, _DEFINES)
for _cls in (
    C.ClusterSync,
    C.MBarrierArriveExpectTxRemote,
    C.MBarrierArriveExpectTxMulticast,
    C.TmaGlobalToSharedMulticast,
):
    EFFECTS.add(_cls, _NO_OUT)

# --- layouts and repeats (inst_layout) ---
EFFECTS.add(LY.AnnotateLayout, _NO_OUT)
EFFECTS.add(LY.Repeat, _DEFINES)

# --- named barriers (inst_sync) ---
EFFECTS.add(SY.NamedBarrierSync, _NO_OUT)
EFFECTS.add(SY.NamedBarrierArrive, _NO_OUT)

# --- L2 prefetch (inst_prefetch) ---
EFFECTS.add(PF.TmaPrefetch, _NO_OUT)
