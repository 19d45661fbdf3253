"""Interpreter rules of the cluster instructions: barrier.cluster, mapa, remote and multicast
arrives, multicast TMA loads (the model is described in ``interp/cluster.py``)."""

from __future__ import annotations

import numpy as np

from tilus.backends.interp import cluster as CL
from tilus.backends.interp import races
from tilus.backends.interp.rules import reg, rule, scal, shared
from tilus.backends.interp.rules_hopper import read_tma_box
from tilus.backends.interp.sched import ClusterWait, Sync
from tilus.ir import inst_cluster as C
from tilus.ir.tensor import TensorVar


@rule(C.ClusterSync)
def _cluster_sync(task, inst, loc):
    yield Sync(loc)  # the group's own forked groups reach it first (their threads are its)
    cl = task.cta.cluster
    if cl is None:  # a block without a cluster is a cluster of one
        return
    yield ClusterWait(cl.sync_arrive(task, loc), loc)


@rule(C.MapSharedAddr)
def _map_shared_addr(task, inst, loc):
    rank = int(scal(task, inst.rank, loc))
    CL.peer(task, rank, loc, "cluster.map_shared_addr")
    if isinstance(inst.src, TensorVar):
        src = reg(task, inst.src, loc).astype(np.int64)
    else:
        src = np.asarray(int(scal(task, inst.src, loc)), dtype=np.int64)
    out = ((rank + 1) << CL.RANK_SHIFT) | (src & CL.OFFSET_MASK)
    task.env[inst.out] = out.astype(np.uint32)


def _arrive(task, cta, bar, n: int, tx: int, loc):
    bar.expect_tx(tx, loc)
    races.join(bar.vc, races.release(task))
    if bar.arrive(n, loc, task.label):
        cta.units.phase_completed(bar, loc)
        cta.wake(bar)


@rule(C.MBarrierArriveExpectTxRemote)
def _arrive_remote(task, inst, loc):
    what = "mbarrier.arrive_and_expect_tx_remote"
    rank = int(scal(task, inst.rank, loc))
    cta = CL.peer(task, rank, loc, what)
    addr = int(scal(task, inst.barrier, loc))
    _, bar = CL.barrier_at(task, CL.mapped(addr, rank), True, loc, what)
    tx = int(scal(task, inst.tx_bytes, loc))
    _arrive(task, cta, bar, task.size, task.size * tx, loc)  # each thread arrives once


@rule(C.MBarrierArriveExpectTxMulticast)
def _arrive_multicast(task, inst, loc):
    what = "mbarrier.arrive_and_expect_tx_multicast"
    addr = int(scal(task, inst.barrier, loc))
    tx = int(scal(task, inst.tx_bytes, loc))
    for rank in CL.ranks_of(task, int(scal(task, inst.mask, loc)), loc, what):
        cta, bar = CL.barrier_at(task, CL.mapped(addr, rank), True, loc, what)
        _arrive(task, cta, bar, 1, tx, loc)  # one lane per destination rank


@rule(C.TmaGlobalToSharedMulticast)
def _tma_multicast(task, inst, loc):
    what = "tma.global_to_shared (multicast)"
    dst = shared(task, inst.dst, loc)
    data = read_tma_box(task, inst, dst, loc)
    addr = int(scal(task, inst.mbarrier, loc))
    nbytes = dst.arr.size * inst.dst.dtype.nbits // 8
    for rank in CL.ranks_of(task, int(scal(task, inst.mask, loc)), loc, what):
        cta, bar = CL.barrier_at(task, CL.mapped(addr, rank), True, loc, what)
        view = CL.peer_view(task, dst, cta, loc, what)
        cta.units.issue_tma(task, view, data.copy(), bar, nbytes, loc)
