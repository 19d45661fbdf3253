"""Interpreter rules of the Hopper instructions: mbarriers, TMA and WGMMA (asynchronous)."""

from __future__ import annotations

import numpy as np

from tilus.backends.interp import races
from tilus.backends.interp.cluster import barrier_at
from tilus.backends.interp.hopper import MBarrier, WgmmaOp
from tilus.backends.interp.numeric import convert
from tilus.backends.interp.packed import PackedGlobalView
from tilus.backends.interp.rules import box_index, read_box, rule, scal, shared
from tilus.backends.interp.sched import Wait
from tilus.errors import TilusRuntimeError
from tilus.ir import inst as I
from tilus.ir import inst_prefetch as PF
from tilus.ir.enums import MemScope, TensorKind


@rule(I.MBarrierAlloc)
def _mbarrier_alloc(task, inst, loc):
    base = task.cta.program.smem.barrier_offsets[inst.out]
    addrs = []
    for i, c in enumerate(inst.counts):
        n = int(scal(task, c, loc))
        if msg := I.MBarrierAlloc.count_error(n):
            raise TilusRuntimeError(f"mbarrier {inst.out.name}[{i}]: {msg}", loc)
        addr = base + 8 * i
        task.cta.units.barriers[addr] = MBarrier(inst.out.name, i, n, n, key=task.cta.new_key())
        addrs.append(addr)
    task.env[inst.out] = np.array(addrs, dtype=np.uint32)


def _bar(task, inst, loc):
    """(block, mbarrier) of an arrive: a cluster-scope arrive may name a peer's barrier
    through a shared::cluster address (``interp/cluster.py``)."""
    cluster_scope = inst.scope == MemScope.CLUSTER
    return barrier_at(task, scal(task, inst.barrier, loc), cluster_scope, loc, inst.NAME)


@rule(I.MBarrierArrive)
def _mbarrier_arrive(task, inst, loc):
    cta, bar = _bar(task, inst, loc)
    n = task.size * int(scal(task, inst.count, loc))  # every thread of the group arrives
    races.join(bar.vc, races.release(task))
    if bar.arrive(n, loc, task.label):
        cta.units.phase_completed(bar, loc)
        cta.wake(bar)


@rule(I.MBarrierArriveExpectTx)
def _mbarrier_arrive_expect_tx(task, inst, loc):
    cta, bar = _bar(task, inst, loc)
    bar.expect_tx(task.size * int(scal(task, inst.tx_bytes, loc)), loc)
    races.join(bar.vc, races.release(task))
    if bar.arrive(task.size, loc, task.label):
        cta.units.phase_completed(bar, loc)
        cta.wake(bar)


@rule(I.MBarrierWait)
def _mbarrier_wait(task, inst, loc):
    # try_wait works on the block's own barriers only (shared::cta)
    _, bar = barrier_at(task, scal(task, inst.barrier, loc), False, loc, "mbarrier.wait")
    yield Wait(bar, int(scal(task, inst.phase, loc)) & 1, loc)


def read_tma_box(task, inst, dst, loc):
    """The box a TMA load reads (at issue in this model), zero-filled out of bounds."""
    g = task.env[inst.src]
    offs = [int(scal(task, o, loc)) for o in inst.offsets]
    index = box_index(g.arr, offs, inst.dims, dst.arr.shape)
    data = read_box(g, offs, inst.dims, dst.arr.shape, inst.dst.dtype, index)
    if index[0] is not None:
        region = g.arr[index[0] + (...,)]
        races.access_global(task, region, False, loc, "tma.global_to_shared", g.name)
    return data


@rule(I.TmaGlobalToShared)
def _tma_g2s(task, inst, loc):
    dst = shared(task, inst.dst, loc)
    data = read_tma_box(task, inst, dst, loc)
    bar = task.cta.units.barrier(scal(task, inst.mbarrier, loc), loc)
    nbytes = dst.arr.size * inst.dst.dtype.nbits // 8
    task.cta.units.issue_tma(task, dst, data, bar, nbytes, loc)


@rule(I.TmaSharedToGlobal)
def _tma_s2g(task, inst, loc):
    src = shared(task, inst.src, loc)
    task.cta.units.check_read(src, loc, "tma.shared_to_global")
    races.check_shared(task, src, False, races.ASYNC, loc, "tma.shared_to_global")
    g = task.env[inst.dst]
    offs = [int(scal(task, o, loc)) for o in inst.offsets]
    gidx, tidx = box_index(g.arr, offs, inst.dims, src.arr.shape)
    grec = None
    if gidx is not None:
        region = g.arr[gidx + (...,)]  # a view even when every dim is indexed
        grec = races.access_global(
            task, region, True, loc, "tma.shared_to_global", g.name, pending=True
        )
        order = sorted(range(len(inst.dims)), key=lambda k: inst.dims[k])
        vals = convert(np.transpose(src.arr[tidx], order), inst.dst.dtype)
        if isinstance(g, PackedGlobalView):
            g.write(region, vals)
        else:
            region[...] = vals
    task.cta.units.store_issued(_bulk_owner(task), src, loc, grec)


def _bulk_owner(task):
    # Bulk async-groups belong to the issuing thread. elect.sync elects the same lane for the
    # same mask every time (PTX ISA 9.7.13.12), so every single_thread() of one group is the
    # same thread: its groups outlive one single_thread() block (a persistent kernel waits for
    # a tile's store just before it rewrites the tile) and must be waited for by the time the
    # enclosing group ends.
    return task.parent if task.elected and task.parent is not None else task


@rule(I.TmaCommitGroup)
def _tma_commit(task, inst, loc):
    task.cta.units.store_commit(_bulk_owner(task))


@rule(I.TmaWaitGroup)
def _tma_wait(task, inst, loc):
    # global memory is written at issue in this model; what waiting protects is the shared source
    task.cta.units.store_wait(task, _bulk_owner(task), inst.n, inst.read)


@rule(I.WgmmaFence)
def _wgmma_fence(task, inst, loc):
    st = task.wgmma_state()
    st.fenced = True
    st.written.clear()


@rule(I.WgmmaMma)
def _wgmma_mma(task, inst, loc):
    st = task.wgmma_state()
    b = shared(task, inst.b, loc)
    units = task.cta.units
    a_tile = a_regs = a = None
    if inst.a.kind == TensorKind.REGISTER:
        a_tile = inst.a
        if a_tile in st.written:
            raise TilusRuntimeError(
                f"wgmma.mma reads register tile `{a_tile.name}` as its A operand, written "
                f"after the last wgmma.fence() (PTX ISA 9.7.15.7.1: the fence orders register "
                f"writes before wgmma.mma_async reads them)",
                loc,
            )
        if a_tile not in task.env:
            raise TilusRuntimeError(
                f"wgmma operand a `{a_tile.name}` is used before it is defined in this thread "
                f"group",
                loc,
            )
        # read at issue (writes while in flight are refused); wgmmas in flight may share it
        a_regs = np.array(task.env[a_tile], copy=True)
    else:
        a = shared(task, inst.a, loc)
        units.check_read(a, loc, "wgmma.mma (operand a)")
        races.check_shared(task, a, False, races.ASYNC, loc, "wgmma.mma (operand a)")
    units.check_read(b, loc, "wgmma.mma (operand b)")
    races.check_shared(task, b, False, races.ASYNC, loc, "wgmma.mma (operand b)")
    if inst.d not in task.env:
        raise TilusRuntimeError(
            f"wgmma accumulator `{inst.d.name}` is used before it is defined in this thread group",
            loc,
        )
    if not st.fenced:
        raise TilusRuntimeError(
            f"wgmma.mma into `{inst.d.name}` without a wgmma.fence() since the accumulator was "
            f"last written or read by other instructions (PTX ISA 9.7.15.6.1: the fence orders "
            f"register accesses before wgmma.mma_async)",
            loc,
        )
    st.accumulators.add(inst.d)
    st.open.append(WgmmaOp(a, b, inst.d, loc, a_tile, a_regs))
    st.pending_acc[inst.d] = loc
    if a_tile is not None:
        st.pending_a[a_tile] = loc


@rule(I.WgmmaCommitGroup)
def _wgmma_commit(task, inst, loc):
    st = task.wgmma_state()
    if st.open:
        st.groups.append(st.open)
        st.open = []


@rule(I.WgmmaWaitGroup)
def _wgmma_wait(task, inst, loc):
    st = task.wgmma_state()
    units = task.cta.units
    while len(st.groups) > inst.n:
        for op in st.groups.pop(0):
            names = ((op.a, "wgmma.mma (operand a)"), (op.b, "wgmma.mma (operand b)"))
            for v, what in names:
                if v is not None:
                    units.check_read(v, op.loc, what)
                    races.record_shared(
                        v, False, races.ASYNC, task.key, task.epoch, op.loc, what, task.label
                    )
            acc = task.env[op.d]
            prod = op.a_values().astype(np.float32) @ op.b.arr.astype(np.float32)
            task.env[op.d] = (acc.astype(np.float32) + prod).astype(np.float32)
    st.retired()


@rule(I.SetMaxNReg)
def _setmaxnreg(task, inst, loc):
    pass  # registers are not modelled; the pass register_budget checks the requests


@rule(I.FenceProxyAsync)
def _fence_proxy_async(task, inst, loc):
    if inst.space == "shared":  # the global fence does not order shared memory
        # every block of the cluster: the fence orders for this thread's later async-proxy
        # writes (a multicast into a peer's tile too) the generic accesses ordered before it
        ctas = task.cta.cluster.ctas if task.cta.cluster is not None else [task.cta]
        races.fence_proxy_async(task, [a for c in ctas for a in c.shared.values()])


@rule(PF.TmaPrefetch)
def _tma_prefetch(task, inst, loc):
    # a cache hint: no effect on memory; the offsets are evaluated (and the box checked against
    # the tile like a load's) so that a bad prefetch fails here as it would on the GPU
    g = task.env[inst.src]
    like = shared(task, inst.like, loc)
    offs = [int(scal(task, o, loc)) for o in inst.offsets]
    box_index(g.arr, offs, inst.dims, like.arr.shape)
