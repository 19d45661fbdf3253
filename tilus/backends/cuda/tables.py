"""The CUDA backend's rule tables (layouts, code) and what it does not lower, by IR class."""

from __future__ import annotations

from tilus.ir import inst as I
from tilus.ir import inst_cluster as C
from tilus.ir import inst_layout as LY
from tilus.ir import inst_lowbit as L
from tilus.ir import inst_memory as M
from tilus.ir import inst_prefetch as PF
from tilus.ir import inst_random as RN
from tilus.ir import inst_sync as SY
from tilus.ir.rules import RuleTable

#: Instructions the CUDA backend refuses, each with the reason given at the user's line (the
#: interpreter runs them). Shared by both tables: an instruction is lowered by both or neither.
NOT_LOWERED: dict[type, str] = {}

#: Layout inference: ``fn(inference, stmt, inst, group)`` records the layout facts of one
#: instruction (``tilus.backends.cuda.layout.rules``).
LAYOUT_RULES = RuleTable("CUDA layout inference", NOT_LOWERED)

#: Code generation: ``fn(ctx, inst, expr)`` emits the C++ of one instruction
#: (``tilus.backends.cuda.codegen``).
CODEGEN_RULES = RuleTable("CUDA code generation", NOT_LOWERED)

#: The oldest target each lowered instruction builds for (``tilus.target`` names), as the CUDA
#: backend lowers it; checked once before code generation (``tilus.backends.cuda.targets``).
MIN_TARGET = RuleTable("CUDA minimum target", NOT_LOWERED)
_SM80 = "sm_80"  # the oldest target tilus builds for: mma.sync, ldmatrix, bar.sync, ld/st
for _cls in (
    I.AllocRegister,
    I.AllocShared,
    I.FreeShared,
    I.GlobalView,
    I.SliceTensor,
    I.PermuteTensor,
    I.LoadGlobal,
    I.StoreGlobal,
    I.LoadShared,
    I.StoreShared,
    I.AssignTensor,
    I.StoreElement,
    I.CastTensor,
    I.ElementwiseBinary,
    I.ElementwiseUnary,
    I.Where,
    I.Dot,
    I.Sync,
    I.Printf,
    RN.Random,
    I.Reduce,
    I.Scan,
    I.ReshapeTensor,
    I.PrintTensor,
    M.CopyAsync,  # cp.async and its groups (sm_80)
    M.CopyAsyncCommitGroup,
    M.CopyAsyncWaitGroup,
    M.CopyAsyncWaitAll,
    M.Atomic,  # atom/red (bf16 add needs sm_90: NVRTC refuses it for older targets)
    M.ScatterStore,
    M.LockSemaphore,  # ld.acquire.gpu / st.release.gpu (sm_70)
    M.ReleaseSemaphore,
    M.GlobalTensorAlloc,
    L.ViewTensor,  # register bit moves only
    LY.AnnotateLayout,  # no code: a seed of layout inference
    LY.Repeat,  # register copies
):
    MIN_TARGET.add(_cls, _SM80)
for _cls in (
    I.MBarrierAlloc,  # the init is fenced with fence.mbarrier_init (sm_90)
    I.MBarrierArrive,  # mbarrier.arrive.release.cta (the .sem/.scope forms are sm_90)
    I.MBarrierArriveExpectTx,  # expect_tx (sm_90)
    I.MBarrierWait,  # mbarrier.try_wait.parity (sm_90)
    I.TmaGlobalToShared,  # cp.async.bulk.tensor (sm_90)
    I.TmaSharedToGlobal,
    I.TmaCommitGroup,  # cp.async.bulk.commit_group / wait_group (sm_90)
    I.TmaWaitGroup,
    I.FenceProxyAsync,  # fence.proxy.async (sm_90)
):
    MIN_TARGET.add(_cls, "sm_90")
for _cls in (I.WgmmaFence, I.WgmmaMma, I.WgmmaCommitGroup, I.WgmmaWaitGroup, I.SetMaxNReg):
    MIN_TARGET.add(_cls, "sm_90a")  # wgmma.* and setmaxnreg are sm_90a features
for _cls in (  # barrier.cluster, mapa, .shared::cluster arrives, .multicast::cluster (sm_90)
    C.ClusterSync,
    C.MapSharedAddr,
    C.MBarrierArriveExpectTxRemote,
    C.MBarrierArriveExpectTxMulticast,
    C.TmaGlobalToSharedMulticast,
):
    MIN_TARGET.add(_cls, "sm_90")
for _cls in (SY.NamedBarrierSync, SY.NamedBarrierArrive):  # bar.sync / bar.arrive a, b
    MIN_TARGET.add(_cls, _SM80)
MIN_TARGET.add(PF.TmaPrefetch, "sm_90")  # cp.async.bulk.prefetch.tensor (sm_90)
