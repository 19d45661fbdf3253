"""Thread-block clusters: barrier.cluster, mapa, arrivals on peer barriers, TMA multicast."""

from __future__ import annotations

from tilus.backends.cuda.codegen import registers as R
from tilus.backends.cuda.codegen.hopper import issue_once, tma_boxes
from tilus.backends.cuda.tables import CODEGEN_RULES
from tilus.ir import inst_cluster as C
from tilus.ir.enums import MemSem
from tilus.ir.expr import Const, TensorElement
from tilus.ir.tensor import TensorVar

rule = CODEGEN_RULES.rule


@rule(C.ClusterSync)
def cluster_sync(ctx, inst, expr):
    """barrier.cluster.arrive.release + barrier.cluster.wait.acquire (every thread)."""
    ctx.emit("tl_cluster_sync();")


@rule(C.MapSharedAddr)
def map_shared_addr(ctx, inst, expr):
    """``out[i] = mapa(src[i], rank)``; every thread holds the whole result."""
    out, src = inst.out, inst.src
    R.declare(ctx, out)
    rank = expr(inst.rank)
    reg = R.register_of(R.layout_of(ctx, out), out)
    for k in range(out.size):
        if isinstance(src, TensorVar):
            idx = []
            rest = k
            for n in reversed(src.shape):
                idx.append(rest % n)
                rest //= n
            elem = TensorElement(src, tuple(Const(i, src.dtype) for i in reversed(idx)), src.dtype)
            addr = expr(elem)
        else:
            addr = expr(src)
        ctx.emit(f"{R.elem(ctx, out, reg[k])} = tl_mapa({addr}, (uint32_t)({rank}));")


def _sem(inst) -> str:
    return "release" if inst.sem == MemSem.RELEASE else "relaxed"


@rule(C.MBarrierArriveExpectTxRemote)
def arrive_remote(ctx, inst, expr):
    """Every thread: expect-tx and arrive on the peer's barrier at the same offset."""
    bar = f"tl_mapa({expr(inst.barrier)}, (uint32_t)({expr(inst.rank)}))"
    ctx.emit(f"tl_mbar_arrive_expect_tx_cluster_{_sem(inst)}({bar}, {expr(inst.tx_bytes)});")


@rule(C.MBarrierArriveExpectTxMulticast)
def arrive_multicast(ctx, inst, expr):
    """Lane r of the group arrives (with expect-tx) on rank r's barrier if bit r is set."""
    lane = ctx.fresh("lane")
    ctx.open("")
    ctx.emit(f"const uint32_t {lane} = (uint32_t){ctx.tid(ctx.group)};")
    ctx.open(f"if ({lane} < 16u && ((uint32_t)({expr(inst.mask)}) >> {lane} & 1u))")
    bar = f"tl_mapa({expr(inst.barrier)}, {lane})"
    ctx.emit(f"tl_mbar_arrive_expect_tx_cluster_{_sem(inst)}({bar}, {expr(inst.tx_bytes)});")
    ctx.close()
    ctx.close()


@rule(C.TmaGlobalToSharedMulticast)
def tma_global_to_shared_multicast(ctx, inst, expr):
    """cp.async.bulk.tensor ... .multicast::cluster: the box lands in every block of the mask."""
    k = ctx.plan.tmap_of[inst]
    rank = inst.src.ndim
    bar = expr(inst.mbarrier)
    mask = f"(uint16_t)({expr(inst.mask)})"
    calls = [
        f"tl_tma_load_{rank}d_multicast({addr}, &tl_map{k}, {bar}, {mask}, {coords});"
        for addr, coords in tma_boxes(ctx, inst, inst.dst, expr)
    ]
    issue_once(ctx, calls)
