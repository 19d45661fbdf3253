"""Layout rules: the layout facts each instruction implies (``LAYOUT_RULES``, by IR class)."""

from __future__ import annotations

from tilus.backends.cuda.layout.inference import err, free_vars
from tilus.backends.cuda.layout.plan import Group, SharedView, TmaMap
from tilus.backends.cuda.layout.reads import result_used
from tilus.backends.cuda.tables import LAYOUT_RULES
from tilus.dtypes import uint32
from tilus.errors import at
from tilus.ir import inst as I
from tilus.ir import inst_cluster as C
from tilus.ir import inst_lowbit as L
from tilus.ir import inst_memory as M
from tilus.ir import inst_prefetch as PF
from tilus.ir import inst_random as RN
from tilus.ir import inst_sync as SY
from tilus.ir.enums import TensorKind, VarKind
from tilus.ir.expr import Const, Expr, Var
from tilus.ir.layout import SharedLayout, choose_swizzle, replicated
from tilus.ir.layout.derived import broadcast_layout, reduce_layout, view_layout
from tilus.ir.layout.mma import choose_warps, mma_atom, supported_pairs
from tilus.ir.layout.register import blocked, permute, wgmma_acc
from tilus.ir.tensor import TensorVar

rule = LAYOUT_RULES.rule


@rule(
    I.FreeShared,
    I.Sync,
    I.Printf,
    I.MBarrierArrive,
    I.MBarrierArriveExpectTx,
    I.MBarrierWait,
    I.TmaCommitGroup,
    I.TmaWaitGroup,
    I.WgmmaFence,
    I.WgmmaCommitGroup,
    I.WgmmaWaitGroup,
    I.FenceProxyAsync,
    I.SetMaxNReg,
)
def _no_layout(inf, stmt, inst, g: Group):
    """Instructions on scalars, barriers or whole groups: no tile layout to decide."""


# --- shared tiles and views ------------------------------------------------------------------


@rule(I.AllocShared)
def _alloc_shared(inf, stmt, inst, g):
    t = inst.out
    eb = t.dtype.nbits // 8
    sw = choose_swizzle(t.shape[-1] * eb) if t.ndim >= 2 else 0
    if not sw and t.ndim >= 2 and t in inf.blockable and t.shape[-1] * eb % 128 == 0:
        sw = 128  # wide rows as 128-byte column blocks: conflict-free, TMA-movable
    if sw and t.shape[-2] % 8:
        sw = 0
    given = inf.user_shared.get(t)  # annotate_layout / shared_tensor(layout=) decide
    layout = given[0] if given is not None else SharedLayout(tuple(t.shape), eb, sw)
    inf.plan.shared[t] = SharedView(t, layout, ())


@rule(I.SliceTensor)
def _slice(inf, stmt, inst, g):
    if inst.src.kind == TensorKind.REGISTER:  # x[i], x[:, j]: through shared memory, any layouts
        inf.no_perm(stmt, inst.src)
        inf.use(inst.src, g, stmt)
        inf.define(inst.out, g, stmt)
        inf.converts.append((inst, g))
        return
    if inst.src.kind == TensorKind.GLOBAL:  # a view: pointer, shape and strides (codegen)
        if inst.src in inf.plan.strided or inst.indices[-1] is not None:
            inf.plan.strided.add(inst.out)
        return
    if inst.src.kind != TensorKind.SHARED:
        raise err(stmt, f"slice of a {inst.src.kind} tile is not supported by the CUDA backend")
    v = inf.shared_view(inst.src, stmt)
    idx = list(inst.indices)
    if v.perm is not None:
        raise err(stmt, "slicing a permuted shared view is not supported yet")
    k = 0
    while k < len(idx) and idx[k] is not None:
        k += 1
    if any(i is not None for i in idx[k:]):
        raise err(
            stmt,
            "shared slices must index leading dims only (e.g. s[stage] or s[stage, 0])",
        )
    nidx = len(v.index) + k
    if v.layout.swizzle and nidx > len(v.layout.shape) - 2:
        raise err(stmt, "indexing inside the rows of a swizzled shared tile")
    inf.plan.shared[inst.out] = SharedView(v.root, v.layout, v.index + tuple(idx[:k]))


@rule(I.PermuteTensor)
def _permute(inf, stmt, inst, g):
    if inst.src.kind == TensorKind.REGISTER:
        inf.perms[inst.out] = (inst.src, tuple(inst.dims))
        return
    if inst.src.kind == TensorKind.GLOBAL:  # a view with permuted shape and strides
        if inst.src in inf.plan.strided or inst.dims[-1] != len(inst.dims) - 1:
            inf.plan.strided.add(inst.out)
        return
    if inst.src.kind != TensorKind.SHARED:
        raise err(stmt, f"permute of a {inst.src.kind} tile is not supported by the CUDA backend")
    v = inf.shared_view(inst.src, stmt)
    if v.perm is not None:
        raise err(stmt, "permuting a permuted shared view is not supported yet")
    inf.plan.shared[inst.out] = SharedView(v.root, v.layout, v.index, tuple(inst.dims))


@rule(I.GlobalView)
def _global_view(inf, stmt, inst, g):
    bad = set()
    exprs = [inst.ptr] + [s for s in inst.out.shape if isinstance(s, Expr)]
    exprs += list(inst.strides or ())
    for e in exprs:
        free_vars(e, bad)
    bad = {v for v in bad if v.kind != VarKind.PARAM}
    if bad:
        names = ", ".join(sorted(v.name for v in bad))
        raise err(
            stmt,
            f"global_view %{inst.out.name}: its pointer, shape and strides must be "
            f"expressions over kernel parameters, but they read {names}",
        )
    inf.plan.gviews[inst.out] = inst


# --- register tiles --------------------------------------------------------------------------


@rule(I.MBarrierAlloc)
def _mbarrier_alloc(inf, stmt, inst, g):
    inf.check_barrier_alloc(stmt)
    inf.plan.barriers.add(inst.out)
    inf.define(inst.out, g, stmt)


@rule(I.AllocRegister)
def _defines(inf, stmt, inst, g):
    """A new register tile with no layout requirement of its own."""
    inf.define(inst.out, g, stmt)


@rule(I.LoadShared)
def _load_shared(inf, stmt, inst, g):
    """A new register tile; unless something else rules, vectorized as a global load is (16
    bytes a thread along the rows: one 128-bit shared load each)."""
    inf.define(inst.out, g, stmt)
    inf.io_bytes[inst.out] = max(1, inst.out.dtype.nbits // 8)


@rule(I.LoadGlobal)
def _load_global(inf, stmt, inst, g):
    """A new register tile; its class is vectorized for memory unless something else rules."""
    inf.define(inst.out, g, stmt)
    inf.io_bytes[inst.out] = max(1, inst.out.dtype.nbits // 8)


@rule(I.StoreGlobal, I.StoreShared)
def _stores(inf, stmt, inst, g):
    inf.use(inst.src, g, stmt)
    inf.io_bytes[inst.src] = max(1, inst.src.dtype.nbits // 8)


@rule(I.StoreElement)
def _store_element(inf, stmt, inst, g):
    inf.use(inst.out, g, stmt)


@rule(I.AssignTensor)
def _same_layout(inf, stmt, inst, g):
    """The output takes the layout of its source."""
    inf.no_perm(stmt, inst.src)
    inf.define(inst.out, g, stmt)
    inf.use(inst.src, g, stmt)
    inf.uf.union(inst.out, inst.src)


@rule(RN.Random)
def _random(inf, stmt, inst, g):
    """Random numbers take the layout of their offsets."""
    inf.no_perm(stmt, inst.offset)
    inf.define(inst.out, g, stmt)
    inf.use(inst.offset, g, stmt)
    inf.uf.union(inst.out, inst.offset)


@rule(I.CastTensor)
def _cast(inf, stmt, inst, g):
    """The output takes the layout of its source unless something else fixes it (an mma
    operand made from an accumulator): then the cast goes through shared memory."""
    inf.no_perm(stmt, inst.src)
    inf.define(inst.out, g, stmt)
    inf.use(inst.src, g, stmt)
    inf.derive(inst.out, inst.src, lambda lo: lo, stmt, "cast")
    inf.converts.append((inst, g))


@rule(I.ElementwiseBinary, I.Where, I.ElementwiseUnary)
def _elementwise(inf, stmt, inst, g):
    inf.define(inst.out, g, stmt)
    ops = [(getattr(inst, n), n) for n in ("a", "b", "cond", "x", "y") if hasattr(inst, n)]
    for o, field in ops:
        if isinstance(o, TensorVar):
            inf.use(o, g, stmt)
            if o in inf.perms and o.shape == inst.out.shape:
                # a transposed view: the result is laid out as the view (the source's
                # registers seen with dims permuted), so no register moves
                base, dims = inf.base(o)
                inf.derive(inst.out, base, lambda lo, d=dims: permute(lo, d), stmt, "transpose")
                continue
            if o in inf.perms:
                # a transposed view broadcast: its source takes the layout the view needs
                # (the result's with the broadcast dims collapsed, dims permuted back); the
                # "broadcast" check on the view itself holds whatever the source got
                base, dims = inf.base(o)
                inv = tuple(sorted(range(len(dims)), key=lambda k: dims[k]))
                shape = o.shape
                inf.derive(
                    base,
                    inst.out,
                    lambda lo, s=shape, v=inv: permute(broadcast_layout(lo, s), v),
                    stmt,
                    "transposed broadcast",
                )
                inf.derive(
                    o, inst.out, lambda lo, s=shape: broadcast_layout(lo, s), stmt, "broadcast"
                )
                continue
            inf.no_perm(stmt, o)
            if o.shape == inst.out.shape:
                inf.operand_union(inst.out, o, stmt, field, g)
            else:  # the operand's layout is the result's with the broadcast dims collapsed
                inf.define(o, g, stmt)
                shape = o.shape
                inf.derive(
                    o, inst.out, lambda lo, s=shape: broadcast_layout(lo, s), stmt, "broadcast"
                )


@rule(I.Reduce)
def _reduce(inf, stmt, inst, g):
    """The result's layout is the source's with the reduced dim collapsed."""
    inf.use(inst.src, g, stmt)
    inf.define(inst.out, g, stmt)
    inf.reduces.append((inst, g))
    d, keep = inst.dim, inst.keepdim
    base, dims = inf.base(inst.src)  # a transposed view reduces its source's registers
    if dims is None:
        inf.derive(inst.out, base, lambda lo: reduce_layout(lo, d, keep), stmt, "reduce")
    else:
        inf.derive(
            inst.out, base, lambda lo: reduce_layout(permute(lo, dims), d, keep), stmt, "reduce"
        )


@rule(I.Scan)
def _scan(inf, stmt, inst, g):
    """The result is laid out as the source; the scan reads the tile from shared memory."""
    inf.no_perm(stmt, inst.src)
    inf.use(inst.src, g, stmt)
    inf.define(inst.out, g, stmt)
    inf.uf.union(inst.out, inst.src)
    inf.converts.append((inst, g))


@rule(I.PrintTensor)
def _print_tensor(inf, stmt, inst, g):
    """The group's first thread prints the tile: a register tile gathered in shared memory, a
    shared one through its layout, a global view through its strides."""
    t = inst.tensor
    if t.kind == TensorKind.SHARED:
        inf.shared_view(t, stmt)
        return
    if t.kind != TensorKind.REGISTER:
        return
    inf.no_perm(stmt, t)
    inf.use(t, g, stmt)
    inf.converts.append((inst, g))


# --- tensor cores ----------------------------------------------------------------------------


@rule(I.Dot)
def _dot(inf, stmt, inst, g: Group):
    """mma.sync fragment layouts for a dot's operands and accumulator; the warp split is the
    one with the fewest fragment registers per thread."""
    m, k = inst.a.shape
    n = inst.b.shape[1]
    atom = mma_atom(inst.a.dtype, inst.out.dtype)
    if atom is None:
        raise err(
            stmt,
            f"dot on the CUDA backend has no mma.sync form for {inst.a.dtype} operands into a "
            f"{inst.out.dtype} accumulator (it has {supported_pairs()})",
        )
    if inst.c is not None and inst.c.dtype != inst.out.dtype:
        raise err(
            stmt,
            f"dot accumulator c is {inst.c.dtype} but the result is {inst.out.dtype}; mma.sync "
            "accumulates in one dtype",
        )
    if g.size % 32 or g.begin % 32:
        raise err(stmt, "dot (mma.sync) needs a thread group of whole warps")
    nw = g.size // 32
    w = choose_warps(nw, m, n, k, inst.a.dtype.nbits, inst.out.dtype.nbits)
    if w is None or k % atom.k:
        raise err(
            stmt,
            f"dot [{m}, {k}] @ [{k}, {n}] does not tile into mma.sync m16n8k{atom.k} over "
            f"{nw} warps",
        )
    wm, wn = w
    for t in (inst.a, inst.b, inst.out) + ((inst.c,) if inst.c is not None else ()):
        inf.use(t, g, stmt)
    inf.define(inst.out, g, stmt)
    if inst.c is not None:
        inf.uf.union(inst.out, inst.c)
    la, lb, lc = atom.layouts(m, n, k, wm, wn, nw)
    inf.set_anchor(inst.out, lc, stmt, why=f"the mma.sync accumulator of [{m}, {n}]")
    inf.set_anchor(inst.a, la, stmt, use=(g, "a"))
    inf.set_anchor(inst.b, lb, stmt, use=(g, "b"))


@rule(I.WgmmaMma)
def _wgmma(inf, stmt, inst, g: Group):
    """Check the wgmma operands' shared layouts; the accumulator gets the wgmma layout, a
    register A operand the A fragment (the accumulator layout of an [M, K] tile)."""
    b = inf.shared_view(inst.b, stmt)
    m, k = inst.a.shape
    if inst.a.kind == TensorKind.REGISTER:
        if inst.a in inf.perms:
            raise err(
                stmt,
                f"wgmma register operand a %{inst.a.name} is a transposed view; the A fragment "
                "holds an [M, K] tile as it is (transpose the data before, or keep A in shared "
                "memory)",
            )
        inf.use(inst.a, g, stmt)
        # read-only: a tile whose class has another fixed layout gets a converted copy here
        why = f"the wgmma A fragment of [{m}, {k}]"
        inf.set_anchor(inst.a, wgmma_acc(m, k), stmt, why=why, use=(g, "a"))
    else:
        _wgmma_shared_a(inf, stmt, inst)
    if b.perm not in ((1, 0), None) or not b.layout.swizzle:
        raise err(
            stmt,
            f"wgmma operand b %{inst.b.name} must be the transpose of a K-major shared tile "
            "[N, K] whose rows span 32, 64 or 128 bytes (as in s[stage].transpose()), or an "
            "MN-major [K, N] tile of such rows (N contiguous, as V in P @ V)",
        )
    m, n = inst.d.shape
    if n > 256:
        raise err(stmt, f"wgmma N={n} is over 256")
    inf.define(inst.d, g, stmt)
    inf.use(inst.d, g, stmt)
    inf.set_anchor(inst.d, wgmma_acc(m, n), stmt, why=f"the wgmma accumulator of [{m}, {n}]")


def _wgmma_shared_a(inf, stmt, inst):
    a = inf.shared_view(inst.a, stmt)
    if a.perm is not None or not a.layout.swizzle:
        raise err(
            stmt,
            f"wgmma operand a %{inst.a.name} must be a K-major shared tile whose rows span "
            "32, 64 or 128 bytes (a [M, K] tile with K contiguous)",
        )


# --- TMA -------------------------------------------------------------------------------------


@rule(I.TmaGlobalToShared, I.TmaSharedToGlobal)
def _tma(inf, stmt, inst, g):
    """Check a TMA copy's box against the shared layout; register its tensor map."""
    p = inf.plan
    load = isinstance(inst, I.TmaGlobalToShared)
    gv, s = (inst.src, inst.dst) if load else (inst.dst, inst.src)
    v = inf.shared_view(s, stmt)
    if v.perm is not None:
        raise err(stmt, "a TMA copy to or from a permuted shared view is not supported")
    dims = tuple(inst.dims)
    if list(dims) != sorted(dims):
        raise err(stmt, f"TMA dims={list(dims)} must be increasing (no transposed boxes)")
    if gv not in p.gviews:
        raise err(stmt, f"%{gv.name} is not a global_view")
    if not (isinstance(p.gviews[gv].ptr, Var) and p.gviews[gv].ptr.kind == VarKind.PARAM):
        raise err(stmt, "TMA needs a global_view directly over a pointer parameter")
    if p.gviews[gv].strides is not None:
        raise err(stmt, "TMA on a global_view with explicit strides is not supported yet")
    # cuTensorMapEncodeTiled: every global stride but the innermost is a multiple of 16
    # bytes; with compile-time inner extents that is known here, before any launch
    stride = gv.dtype.nbits // 8
    for d in range(gv.ndim - 1, 0, -1):
        n = gv.shape[d]
        if not isinstance(n, int):
            break
        stride *= n
        if stride % 16:
            shape = ", ".join(str(x) if isinstance(x, int) else "?" for x in gv.shape)
            raise err(
                stmt,
                f"TMA needs every global stride but the innermost to be a multiple of 16 "
                f"bytes; %{gv.name} of shape [{shape}] ({gv.dtype}) has a dim-{d - 1} stride "
                f"of {stride} bytes",
            )
    box = [1] * gv.ndim
    for d, n in zip(dims, s.shape):
        box[d] = n
    sw = v.layout.swizzle
    box[-1] = v.layout.block_cols if sw else box[-1]  # one box per column block
    if box[-1] * v.layout.elem_bytes % 16:
        raise err(
            stmt,
            f"TMA box {box} of {gv.dtype}: the innermost dim must span a multiple of 16 bytes",
        )
    if dims[-1] != gv.ndim - 1 and box[-1] != 1:
        raise err(stmt, "TMA boxes must include the innermost global dim")
    if sw and box[-1] * v.layout.elem_bytes != sw:
        raise err(stmt, "TMA box rows do not match the shared tile's swizzle")
    key = TmaMap(gv, tuple(box), sw)
    if key not in p.tmaps:
        p.tmaps.append(key)
    p.tmap_of[inst] = p.tmaps.index(key)


# --- asynchronous copies (cp.async) ----------------------------------------------------------


@rule(M.CopyAsyncCommitGroup, M.CopyAsyncWaitGroup, M.CopyAsyncWaitAll)
def _cp_async_groups(inf, stmt, inst, g):
    """Per-thread group bookkeeping: no tile layout."""


@rule(M.CopyAsync)
def _copy_async(inf, stmt, inst, g):
    """The rows must be contiguous in global memory; the shared view must not be permuted."""
    v = inf.shared_view(inst.dst, stmt)
    if v.perm is not None:
        raise err(stmt, "copy_async into a permuted shared view is not supported")
    gv = inf.plan.gviews.get(inst.src)  # a global_view, or a row-major global_tensor
    st = gv.strides if gv is not None else None
    if inst.src in inf.plan.strided or (
        st is not None and not (isinstance(st[-1], Const) and st[-1].value == 1)
    ):
        raise err(
            stmt,
            "copy_async needs a global tensor whose innermost stride is 1 (rows move as "
            "contiguous 4/8/16-byte chunks)",
        )


# --- atomics and scatter stores --------------------------------------------------------------


@rule(M.Atomic, M.ScatterStore)
def _atomic(inf, stmt, inst, g):
    """The old values, indices and compare values take the layout of the values."""
    if inst.dst.kind == TensorKind.SHARED:
        inf.shared_view(inst.dst, stmt)
    tiles = [getattr(inst, n, None) for n in ("values", "indices", "compare")]
    for t in tiles:
        if t is not None:
            inf.no_perm(stmt, t)
            inf.use(t, g, stmt)
            inf.uf.union(inst.values, t)
    out = getattr(inst, "out", None)
    if out is not None:
        inf.define(out, g, stmt)
        inf.uf.union(out, inst.values)
        v = inst.values
        if result_used(inf.fn, inst):
            # each element is updated by one thread and only that thread gets its old value:
            # spread the tile over the threads (a small or vectorized default would give the
            # warps copies of it)
            inf.set_anchor(v, blocked(v.shape, g.size), stmt, soft=True)


@rule(M.LockSemaphore, M.ReleaseSemaphore, M.GlobalTensorAlloc)
def _semaphore(inf, stmt, inst, g):
    """Scalars in one thread, a workspace pointer: no tile layout."""


# --- thread-block clusters -------------------------------------------------------------------

LAYOUT_RULES.add(C.TmaGlobalToSharedMulticast, _tma)  # the box and map rules of any TMA load


@rule(C.ClusterSync, C.MBarrierArriveExpectTxRemote, C.MBarrierArriveExpectTxMulticast)
def _cluster_no_layout(inf, stmt, inst, g):
    """Instructions on barriers and whole groups: no tile layout to decide."""


@rule(C.MapSharedAddr)
def _map_shared_addr(inf, stmt, inst, g):
    """Every thread maps every address: the result (and a source tile that is not the
    barriers' address tile) is held whole by each thread."""
    inf.define(inst.out, g, stmt)
    inf.set_anchor(inst.out, replicated(inst.out.shape, g.size), stmt)
    src = inst.src
    if isinstance(src, TensorVar):
        inf.use(src, g, stmt)
        if src not in inf.plan.barriers:
            inf.set_anchor(src, replicated(src.shape, g.size), stmt)


# --- bit reinterpretation (self.view) ------------------------------------------------------------


@rule(L.ViewTensor)
def _view(inf, stmt, inst, g):
    """The output's layout follows from the source's (no data moves)."""
    src, out = inst.src, inst.out
    inf.no_perm(stmt, src)
    inf.use(src, g, stmt)
    inf.define(out, g, stmt)
    sb, db = src.dtype.nbits, out.dtype.nbits

    def derive(lo):
        r = view_layout(lo, sb, db, out.shape)
        if r is None:
            raise err(
                stmt,
                f"view of %{src.name} as {out.dtype}: in its layout a thread's registers along "
                f"the last dim are not runs of whole {out.dtype} elements, so the view would "
                "not keep each thread's bits",
            )
        return r

    inf.derive(out, src, derive, stmt, "view")
    if inst.layout is not None:
        # the program's layout for the output; the source's follows from it (the forward
        # derivation is still checked, so each thread keeps its bits in register order)
        dg = inf.defs.get(inf.base(src)[0])
        if dg is not None and dg[0].size != inst.layout.num_threads:
            raise err(
                stmt,
                f"the layout given to the view spans {inst.layout.num_threads} threads but "
                f"%{src.name} is created by a group of {dg[0].size} (at {at(dg[1].loc)})",
            )
        inf.set_anchor(out, inst.layout, stmt, user=True)

        def back(lo):
            r = view_layout(lo, db, sb, src.shape)
            if r is None or view_layout(r, sb, db, out.shape) != lo:
                raise err(
                    stmt,
                    f"the layout given to the view of %{src.name} as {out.dtype} does not keep "
                    f"each thread's bits: its registers along the last dim are not runs of "
                    f"whole {src.dtype} elements",
                )
            return r

        inf.derive(src, out, back, stmt, "view")


# --- named barriers (inst_sync) ----------------------------------------------------------------
rule(SY.NamedBarrierSync, SY.NamedBarrierArrive)(_no_layout)


# --- L2 prefetch (inst_prefetch) -------------------------------------------------------------


@rule(PF.TmaPrefetch)
def _tma_prefetch(inf, stmt, inst, g):
    """The box of a TMA load into ``like``: the same checks and the same tensor map."""
    load = I.TmaGlobalToShared(inst.src, inst.like, inst.offsets, inst.dims, Const.of(0, uint32))
    _tma(inf, stmt, load, g)
    inf.plan.tmap_of[inst] = inf.plan.tmap_of.pop(load)
