"""Pass: a ``fence.proxy.async`` before each TMA load into shared bytes read or written generically.

A TMA load writes shared memory through the *async proxy*; ``load_shared``, ``store_shared``,
``copy_async`` and the other tile instructions access it through the *generic proxy*. The PTX
memory model orders accesses of two proxies to the same bytes only through a proxy fence: an
mbarrier or a ``sync()`` that orders the threads' generic reads of a ring slot before the
thread that refills it is not enough on its own. On an H100 the W4A16 mma.sync kernel's ring
(readers ``ld.shared``/``ldmatrix``, a TMA refill after an empty-slot mbarrier) lost a warp's
reads to the next copy in about one launch in four (bench/results r94-r96) until the issuing
thread fenced after its wait.

This pass makes that fence part of the language instead of a rule every kernel must
remember. A TMA load ``L`` gets a ``fence.proxy_async()`` right before it (in the issuing
thread, after whatever wait or ``sync()`` ordered the other accesses before it) when some
generic access may run before ``L``: any access to the tile itself or a view of it (the thread
groups of a warp-specialized kernel run side by side, whatever their order in the text), or an
access to a tile placed on the same bytes after a ``free_shared`` that comes earlier in program
order or sits in a loop around both. Kernels whose TMA tiles only the async proxy reads (WGMMA operands, TMA
stores) get no fence. One fence covers a run of TMA loads with no wait, ``sync()`` or generic
access between them. The interpreter checks the rule independently (``races.check_shared``).
"""

from __future__ import annotations

import dataclasses

from tilus.ir import inst as I
from tilus.ir import inst_cluster as C
from tilus.ir import inst_layout as LY
from tilus.ir import inst_lowbit as L
from tilus.ir.function import Function
from tilus.ir.stmt import AssignStmt, DeclareStmt, ForStmt, InstStmt, SeqStmt, Stmt, WhileStmt, seq
from tilus.ir.tensor import TensorVar
from tilus.ir.visit import field_names, fields
from tilus.passes.shared_memory import ALIGN, SharedPlan

_VIEWS = (I.SliceTensor, I.PermuteTensor, I.ReshapeTensor, L.ViewTensor, C.MapSharedAddr)
_NO_ACCESS = (I.AllocShared, I.FreeShared, LY.AnnotateLayout)
# operands the async proxy accesses (the others of these instructions are registers/global)
_ASYNC_FIELDS = {
    I.TmaGlobalToShared: ("dst",),
    C.TmaGlobalToSharedMulticast: ("dst",),
    I.TmaSharedToGlobal: ("src",),
    I.WgmmaMma: ("a", "b"),
}
# instructions after which an earlier fence still covers the next TMA load: they neither
# acquire (a wait, a sync) nor access shared memory generically
_KEEPS_FENCE = (
    I.TmaGlobalToShared,
    I.MBarrierArriveExpectTx,
    I.MBarrierArrive,
    I.TmaCommitGroup,
    C.MBarrierArriveExpectTxRemote,
    C.MBarrierArriveExpectTxMulticast,
    LY.AnnotateLayout,
) + _VIEWS


def _tensor_fields(inst):
    for name, v in fields(inst):
        if isinstance(v, TensorVar):
            yield name, v


class _Scan:
    """Shared roots, and for each instruction its position and enclosing loops."""

    def __init__(self, fn: Function):
        self.root: dict = {}  # a shared tile or view -> the AllocShared.out it views
        self.generic: list = []  # (root, position, loops) of generic-proxy accesses
        self.loads: list = []  # (statement, root, position, loops) of TMA loads
        self.pos = 0
        self._stmt(fn.body, ())

    def _stmt(self, s: Stmt, loops: tuple):
        if type(s) is InstStmt:
            self._inst(s, loops)
            return
        inner = loops + (id(s),) if isinstance(s, (ForStmt, WhileStmt)) else loops
        for name in field_names(type(s)):
            v = getattr(s, name)
            if isinstance(v, Stmt):
                self._stmt(v, inner)
            elif isinstance(v, tuple):
                for x in v:
                    if isinstance(x, Stmt):
                        self._stmt(x, inner)

    def _inst(self, s: InstStmt, loops: tuple):
        inst = s.inst
        self.pos += 1
        if isinstance(inst, I.AllocShared):
            self.root[inst.out] = inst.out
            return
        if isinstance(inst, _VIEWS):
            src = getattr(inst, "src", None)
            if src in self.root:
                self.root[inst.out] = self.root[src]
            return
        if isinstance(inst, _NO_ACCESS):
            return
        asyncf = _ASYNC_FIELDS.get(type(inst), ())
        for name, v in _tensor_fields(inst):
            r = self.root.get(v)
            if r is None:
                continue
            if name not in asyncf:
                self.generic.append((r, self.pos, loops))
            elif isinstance(inst, I.TmaGlobalToShared):
                self.loads.append((s, r, self.pos, loops))


def _overlap(a, b, smem: SharedPlan) -> bool:
    if a is b:
        return True
    oa, ob = smem.offsets.get(a), smem.offsets.get(b)
    if oa is None or ob is None:
        return False
    ea = oa + -(-max(a.nbytes, 1) // ALIGN) * ALIGN  # the planner's rounded sizes
    eb = ob + -(-max(b.nbytes, 1) // ALIGN) * ALIGN
    return oa < eb and ob < ea


def _needs_fence(scan: _Scan, smem: SharedPlan) -> set:
    """The ids of the TMA load statements some generic access may precede."""
    out = set()
    for s, r, pos, loops in scan.loads:
        for g, gpos, gloops in scan.generic:
            # the tile itself: any access (thread groups run side by side, whatever their
            # order in the text); another tile on the same bytes (after a free_shared): one
            # that runs before, earlier in the text or in a loop around both
            if g is r or ((gpos < pos or set(gloops) & set(loops)) and _overlap(g, r, smem)):
                out.add(id(s))
                break
    return out


def _block(s: Stmt, need: set) -> Stmt:
    """``s`` as a statement list with the fences inserted (one per run of loads)."""
    items = s.stmts if isinstance(s, SeqStmt) else (s,)
    out, fenced, changed = [], False, False
    for x in items:
        if type(x) is InstStmt:
            inst = x.inst
            if id(x) in need and not fenced:
                out.append(InstStmt(x.loc, I.FenceProxyAsync("shared")))
                fenced = changed = True
            out.append(x)
            if isinstance(inst, I.FenceProxyAsync):
                fenced = fenced or inst.space == "shared"
            elif not isinstance(inst, _KEEPS_FENCE):
                fenced = False
        elif isinstance(x, (DeclareStmt, AssignStmt)):
            out.append(x)  # scalars: no shared access, no acquire
        else:
            y = _descend(x, need)
            changed = changed or y is not x
            out.append(y)
            fenced = False
    return seq(out) if changed else s


def _descend(s: Stmt, need: set) -> Stmt:
    changes = {}
    for name in field_names(type(s)):
        v = getattr(s, name)
        if isinstance(v, Stmt):
            nv = _block(v, need)
            if nv is not v:
                changes[name] = nv
    return dataclasses.replace(s, **changes) if changes else s


def insert_proxy_fences(fn: Function, smem: SharedPlan) -> Function:
    """``fn`` with a ``fence.proxy_async()`` before each TMA load that needs one (see the
    module docstring); ``fn`` itself when none does."""
    scan = _Scan(fn)
    if not scan.loads or not scan.generic:
        return fn
    need = _needs_fence(scan, smem)
    if not need:
        return fn
    return dataclasses.replace(fn, body=_block(fn.body, need))
