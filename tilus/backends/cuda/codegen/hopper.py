"""Hopper instructions: mbarriers, TMA bulk tensor copies, WGMMA, proxy fences."""

from __future__ import annotations

from tilus.backends.cuda.codegen import registers as R
from tilus.backends.cuda.codegen.memory import shared_offset
from tilus.backends.cuda.ptx import mbarrier as M
from tilus.backends.cuda.ptx import wgmma as W
from tilus.backends.cuda.tables import CODEGEN_RULES
from tilus.ir import inst as I
from tilus.ir.enums import MemScope, MemSem, TensorKind
from tilus.ir.expr import Const
from tilus.ir.layout import wgmma_acc
from tilus.passes.register_budget import entry_registers

rule = CODEGEN_RULES.rule


@rule(I.MBarrierAlloc)
def mbarrier_alloc(ctx, inst, expr):
    """Barriers are initialized at kernel entry; here only a note."""
    off = ctx.smem.barrier_offsets[inst.out]
    ctx.emit(f"// {len(inst.counts)} mbarrier(s) at shared offset {off} (initialized at entry)")


def _sem(inst) -> str:
    return "release" if inst.sem == MemSem.RELEASE else "relaxed"


@rule(I.MBarrierArrive)
def mbarrier_arrive(ctx, inst, expr):
    """Every thread of the group arrives (``count`` times); at cluster scope the barrier is a
    shared::cluster address (its own block's or a peer's, from ``map_shared_addr``)."""
    bar = expr(inst.barrier)
    if inst.scope == MemScope.CLUSTER:
        ctx.emit(f"tl_mbar_arrive_cluster_count_{_sem(inst)}({bar}, {expr(inst.count)});")
    elif isinstance(inst.count, Const) and inst.count.value == 1:
        ctx.emit(f"tl_mbar_arrive({bar});")
    else:
        ctx.emit(f"tl_mbar_arrive_count({bar}, {expr(inst.count)});")


@rule(I.MBarrierArriveExpectTx)
def mbarrier_arrive_expect_tx(ctx, inst, expr):
    """Every thread of the group adds the expected bytes and arrives."""
    if inst.scope == MemScope.CLUSTER:
        bar, tx = expr(inst.barrier), expr(inst.tx_bytes)
        ctx.emit(f"tl_mbar_arrive_expect_tx_cluster_{_sem(inst)}({bar}, {tx});")
        return
    ctx.emit(f"tl_mbar_arrive_expect_tx({expr(inst.barrier)}, {expr(inst.tx_bytes)});")


@rule(I.MBarrierWait)
def mbarrier_wait(ctx, inst, expr):
    """Spin on try_wait.parity until the phase of that parity has completed (at cluster
    scope it acquires what peer blocks released)."""
    if inst.scope == MemScope.CLUSTER:
        fn = f"tl_mbar_wait_parity_cluster_{'acquire' if inst.sem == MemSem.ACQUIRE else 'relaxed'}"
        ctx.emit(f"{fn}({expr(inst.barrier)}, (uint32_t)({expr(inst.phase)}));")
        return
    if inst.suspend_ns is not None:  # try_wait with a suspend-time hint
        frag = M.wait_suspend("acquire" if inst.sem == MemSem.ACQUIRE else "relaxed")
        if frag.name not in {f.name for f in ctx.fragments}:
            ctx.fragments.append(frag)
        bar, ph = expr(inst.barrier), expr(inst.phase)
        ctx.emit(f"{frag.name}({bar}, (uint32_t)({ph}), {int(inst.suspend_ns)}u);")
        return
    fn = "tl_mbar_wait_parity" if inst.sem == MemSem.ACQUIRE else "tl_mbar_wait_parity_relaxed"
    ctx.emit(f"{fn}({expr(inst.barrier)}, (uint32_t)({expr(inst.phase)}));")


def issue_once(ctx, body: list[str]):
    """Issue once per group: directly in a single thread, by an elected lane in a warp."""
    g = ctx.group
    if g.size == 1:
        for line in body:
            ctx.emit(line)
    elif g.size == 32 and g.begin % 32 == 0:
        ctx.open("if (tl_elect_one())")
        for line in body:
            ctx.emit(line)
        ctx.close()
    else:
        raise ctx.error("TMA copies are issued by one thread or one whole warp")


def tma_boxes(ctx, inst, tile, expr):
    """Per TMA box of the copy: (shared address, coordinates innermost first). A tile stored in
    column blocks (see SharedLayout) moves as one box per block."""
    layout = ctx.plan.shared[tile].layout
    base = shared_offset(ctx, tile)
    coords = [f"(int32_t)({expr(o)})" for o in reversed(inst.offsets)]
    out = []
    for j in range(layout.col_blocks):
        addr = f"tl_smem + {base}" + (f" + {j * layout.block_bytes}u" if j else "")
        inner = coords[0] + (f" + {j * layout.block_cols}" if j else "")
        out.append((addr, ", ".join([inner, *coords[1:]])))
    return out


@rule(I.TmaGlobalToShared)
def tma_global_to_shared(ctx, inst, expr):
    """cp.async.bulk.tensor global -> shared, completing bytes on the mbarrier."""
    k = ctx.plan.tmap_of[inst]
    rank = inst.src.ndim
    bar = expr(inst.mbarrier)
    calls = [
        f"tl_tma_load_{rank}d({addr}, &tl_map{k}, {bar}, {coords});"
        for addr, coords in tma_boxes(ctx, inst, inst.dst, expr)
    ]
    issue_once(ctx, calls)


@rule(I.TmaSharedToGlobal)
def tma_shared_to_global(ctx, inst, expr):
    """cp.async.bulk.tensor shared -> global in the current bulk group."""
    k = ctx.plan.tmap_of[inst]
    rank = inst.dst.ndim
    calls = [
        f"tl_tma_store_{rank}d(&tl_map{k}, {addr}, {coords});"
        for addr, coords in tma_boxes(ctx, inst, inst.src, expr)
    ]
    issue_once(ctx, calls)


@rule(I.TmaCommitGroup)
def tma_commit_group(ctx, inst, expr):
    """cp.async.bulk.commit_group (by the issuing thread)."""
    issue_once(ctx, ["tl_tma_store_commit();"])


@rule(I.TmaWaitGroup)
def tma_wait_group(ctx, inst, expr):
    """cp.async.bulk.wait_group[.read] n (by the issuing thread)."""
    kind = "tl_tma_store_wait_read" if inst.read else "tl_tma_store_wait"
    issue_once(ctx, [f"{kind}<{inst.n}>();"])


@rule(I.WgmmaFence)
def wgmma_fence(ctx, inst, expr):
    """wgmma.fence.sync.aligned."""
    ctx.emit("tl_wgmma_fence();")


@rule(I.WgmmaCommitGroup)
def wgmma_commit_group(ctx, inst, expr):
    """wgmma.commit_group.sync.aligned."""
    ctx.emit("tl_wgmma_commit_group();")


@rule(I.WgmmaWaitGroup)
def wgmma_wait_group(ctx, inst, expr):
    """wgmma.wait_group.sync.aligned n, then pin the accumulators after it.

    The wait's asm names no registers, so without the pins the compiler may hoist reads of an
    accumulator (a cast, a store) above the wait and read values the tensor cores have not
    written yet. An empty volatile asm that reads and writes each accumulator register keeps
    every later access after the wait. (The pins emit no PTX: ptxas never sees them.)
    """
    ctx.emit(f"tl_wgmma_wait_group<{inst.n}>();")
    for t in ctx.wgmma_accs.values():
        if not ctx.in_scope(t):
            continue
        layout = R.layout_of(ctx, t)
        i = R.unrolled(ctx, layout.local_size)
        ctx.emit(f'asm volatile("" : "+f"({R.elem(ctx, t, i)}) :: "memory");')
        ctx.close()


#: tilus dtype name -> the wgmma input type (``W.INPUT_K`` has K per instruction of each).
WGMMA_PTX_TYPES = {
    "float16": "f16",
    "bfloat16": "bf16",
    "float8_e4m3": "e4m3",
    "float8_e5m2": "e5m2",
}

_PROXY_FENCES = {"shared": "tl_fence_proxy_async", "global": "tl_fence_proxy_async_global"}


@rule(I.FenceProxyAsync)
def fence_proxy_async(ctx, inst, expr):
    """fence.proxy.async.shared::cta or fence.proxy.async.global."""
    fn = _PROXY_FENCES.get(inst.space)
    if fn is None:
        raise ctx.error(f"fence.proxy_async has no lowering for space {inst.space!r}")
    ctx.emit(f"{fn}();")


@rule(I.SetMaxNReg)
def setmaxnreg(ctx, inst, expr):
    """setmaxnreg.inc or .dec: raise or lower from the count the block starts with."""
    start = entry_registers(ctx.fn.num_threads)
    if inst.count > start:
        ctx.emit(f"tl_setmaxnreg_inc<{inst.count}>();")
    elif inst.count < start:
        ctx.emit(f"tl_setmaxnreg_dec<{inst.count}>();")
    else:
        ctx.emit(f"// setmaxnreg {inst.count}: the count the block starts with")


def wgmma_operand_tile(view, dtype, k_major: bool):
    """The descriptor geometry of a wgmma shared operand: its leaf (the last two dims of the
    view) stored in ``view.layout``'s column blocks; K rows of an MN-major B when not
    ``k_major``. Every 8-row atom of a block is one descriptor step."""
    leaf = view.layout.slice(len(view.layout.shape) - 2)
    rows, cols = leaf.shape
    eb = dtype.nbits // 8
    if k_major:
        return W.KMajorTile(rows=rows, cols=cols, dtype_bytes=eb, swizzle=leaf.swizzle)
    return W.MNMajorTile(rows=rows, cols=cols, dtype_bytes=eb, swizzle=leaf.swizzle)


@rule(I.WgmmaMma)
def wgmma_mma(ctx, inst, expr):
    """``d += a @ b``: one m64nNkK wgmma per (m64 tile, K step; K = 16 for f16/bf16, 32 for
    fp8: a K step is 32 bytes either way), B (and a shared A) by descriptor; a register A
    passes its fragment's four 32-bit registers per step. B is K-major (a transposed ``[N, K]``
    view) or, for 16-bit types, MN-major (a ``[K, N]`` tile, imm-trans-b)."""
    a, b, d = inst.a, inst.b, inst.d
    vb = ctx.plan.shared[b]
    m, k = a.shape
    n = b.shape[1]
    ab, bt = WGMMA_PTX_TYPES[a.dtype.name], WGMMA_PTX_TYPES[b.dtype.name]
    ks = W.input_k(ab, bt)
    regs_a = a.kind == TensorKind.REGISTER
    if regs_a and ks != 16:
        raise ctx.error(f"wgmma with a register A operand of {a.dtype} is not supported")
    b_k_major = vb.perm is not None
    frag = W.mma_async(
        n,
        ab,
        a_from="regs" if regs_a else "smem",
        trans_b=0 if b_k_major else 1,
        b_type=None if bt == ab else bt,
    )
    if frag.name not in {f.name for f in ctx.fragments}:
        ctx.fragments.append(frag)
    tb = wgmma_operand_tile(vb, b.dtype, b_k_major)
    layout = R.layout_of(ctx, d)
    ctx.wgmma_accs[id(d)] = d
    if layout.kind != "wgmma_acc":
        raise ctx.error(f"wgmma accumulator %{d.name} does not have the wgmma layout")
    if regs_a and R.layout_of(ctx, a) != wgmma_acc(m, k):
        raise ctx.error(
            f"wgmma register operand a %{a.name} does not have the A fragment layout "
            f"(the wgmma accumulator layout of [{m}, {k}])"
        )
    ctx.open("")
    if not regs_a:
        ta = wgmma_operand_tile(ctx.plan.shared[a], a.dtype, True)
        pa = ctx.fresh("da")
        ctx.emit(f"const uint32_t {pa} = tl_smem + {shared_offset(ctx, a)};")
    pb = ctx.fresh("db")
    ctx.emit(f"const uint32_t {pb} = tl_smem + {shared_offset(ctx, b)};")
    # each K step's descriptor is the tile's plus the step's offset in 16-byte units, added to
    # the low word only: the address field (14 bits, shared addresses < 256 KB) cannot carry,
    # so ptxas adds a 32-bit constant instead of rebuilding the field (shift, mask, or) or
    # adding 64 bits for every wgmma; the high word is a constant
    qb = ctx.fresh("qb")
    ctx.emit(
        f"const uint32_t {qb} = (uint32_t)tl_wgmma_desc_with_addr({tb.high_bits():#x}ull, {pb});"
    )
    if not regs_a:
        qa = ctx.fresh("qa")
        ctx.emit(
            f"const uint32_t {qa} = (uint32_t)tl_wgmma_desc_with_addr({ta.high_bits():#x}ull, {pa});"
        )
    packed = {}
    if regs_a:
        # every step's A words are packed before the issues, then fenced: packing between two
        # wgmma issues makes ptxas insert a warpgroup.arrive there and serialize every wgmma
        for kk in range(k // ks):
            for mt in range(m // 64):
                # registers 8kk..8kk+7 of row mt are a0..a7 of the k16 step, two per .b32
                base = mt * (k // 2) + 8 * kk
                words = [
                    f"(uint32_t){R.elem(ctx, a, base + 2 * j)} | "
                    f"((uint32_t){R.elem(ctx, a, base + 2 * j + 1)} << 16)"
                    for j in range(4)
                ]
                packed[kk, mt] = ctx.fresh("ra")
                ctx.emit(f"const uint32_t {packed[kk, mt]}[4] = {{{', '.join(words)}}};")
        ctx.emit("tl_wgmma_fence();")
    for kk in range(k // ks):
        kob = tb.k_offset(ks * kk)
        assert kob % 16 == 0, kob  # descriptors address 16-byte units
        desc_b = f"tl_wgmma_desc_join({tb.high_bits() >> 32:#x}u, {qb} + {kob // 16}u)"
        for mt in range(m // 64):
            if regs_a:
                a_arg = packed[kk, mt]
            else:
                aoff = ta.row_offset(64 * mt) + ta.k_offset(ks * kk)
                assert aoff % 16 == 0, aoff
                a_arg = f"tl_wgmma_desc_join({ta.high_bits() >> 32:#x}u, {qa} + {aoff // 16}u)"
            ctx.emit(f"{frag.name}({ctx.name(d)}[{mt}], {a_arg}, {desc_b}, 1);")
    ctx.close()
