"""Statements: scalars, structured control flow, thread groups and barriers; instruction dispatch."""

from __future__ import annotations

import dataclasses
from collections import Counter

from tilus.backends.cuda.codegen import (  # noqa: F401 - register rules
    async_copy,
    atomics,
    global_views,
    hopper,
    layouts,
    memory,
    mma,
    named_barriers,
    random,
)
from tilus.backends.cuda.codegen import registers as R
from tilus.backends.cuda.codegen.convert import row_major, through_shared
from tilus.backends.cuda.codegen.scalar import ExprPrinter, UnsupportedDtype, ctype
from tilus.backends.cuda.layout import Group
from tilus.backends.cuda.tables import CODEGEN_RULES
from tilus.ir import inst as I
from tilus.ir.enums import TensorKind, Unroll
from tilus.ir.expr import Const, TensorElement
from tilus.ir.rules import NotLowered
from tilus.ir.stmt import (
    AssignStmt,
    BreakStmt,
    DeclareStmt,
    ForStmt,
    IfStmt,
    InstStmt,
    ReturnStmt,
    SeqStmt,
    ThreadGroupStmt,
    WhileStmt,
)
from tilus.ir.tensor import TensorVar
from tilus.ir.visit import own_nodes
from tilus.ir.visit import walk as walk_nodes
from tilus.passes.walk import walk

rule = CODEGEN_RULES.rule

MAX_NAMED_BARRIERS = 15  # ids 1..15; id 0 is __syncthreads()


@rule(I.Sync)
def _sync(ctx, inst, expr):
    g = ctx.group
    if g.size == 1:
        ctx.emit("// sync() of a single thread: nothing to wait for")
    elif g.begin == 0 and g.size == ctx.fn.num_threads:
        ctx.emit("__syncthreads();")
    elif g.size == 32 and g.begin % 32 == 0:
        ctx.emit("__syncwarp();")
    elif g.size % 32 == 0 and g.begin % 32 == 0:
        key = (g.begin, g.size)
        if key not in ctx.named_barriers:
            # the ids the kernel's own named barriers use are not free for sync()
            taken = set(ctx.named_barriers.values()) | named_barriers.user_ids(ctx)
            free = [i for i in range(1, MAX_NAMED_BARRIERS + 1) if i not in taken]
            if not free:
                raise ctx.error(
                    "too many distinct thread groups use sync() beside the kernel's named "
                    "barriers (15 hardware barrier ids in all)"
                )
            ctx.named_barriers[key] = free[0]
        ctx.emit(f"tl_bar_sync({ctx.named_barriers[key]}, {g.size});")
    elif g.begin // 32 == (g.begin + g.size - 1) // 32:  # lanes of one warp: a masked barrier
        ctx.emit(f"__syncwarp({((1 << g.size) - 1) << (g.begin % 32):#010x}u);")
    else:
        raise ctx.error(
            f"sync() in threads [{g.begin}, {g.begin + g.size}): a group that is neither whole "
            "warps nor lanes of one warp cannot use a hardware barrier"
        )


@rule(I.SliceTensor)
def _slice(ctx, inst, expr):
    if inst.out.kind == TensorKind.SHARED:
        memory.shared_slice(ctx, inst, expr)
    elif inst.out.kind == TensorKind.REGISTER:
        from tilus.backends.cuda.codegen.convert import slice_register

        slice_register(ctx, inst, expr)
    elif inst.out.kind == TensorKind.GLOBAL:
        global_views.slice_global(ctx, inst, expr)
    else:
        raise ctx.error(f"slicing a {inst.out.kind} tile is not supported")


@rule(I.PermuteTensor)
def _permute(ctx, inst, expr):
    if inst.out.kind == TensorKind.REGISTER:
        # the same registers under a permuted layout: an alias
        ctx.names[id(inst.out)] = ctx.name(inst.src)
        ctx.emit(f"// %{inst.out.name}: the registers of {ctx.name(inst.src)}, dims {inst.dims}")
        return
    if inst.out.kind == TensorKind.GLOBAL:
        global_views.permute_global(ctx, inst)
        return
    memory.shared_alias(ctx, inst, "transposed view")


@rule(I.Printf)
def _printf(ctx, inst, expr):
    args = []
    for a in inst.args:
        code = expr(a)
        dt = a.dtype
        if dt.name in ("float16", "bfloat16", "float32"):
            from tilus.backends.cuda.codegen.scalar import to_float

            code = f"(double){to_float(code, dt)}"
        args.append(code)
    fmt = inst.fmt.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    lead = "true" if ctx.group.size == 1 else f"threadIdx.x == {ctx.group.begin}"
    ctx.emit(f'if ({lead}) printf("{fmt}"{"".join(", " + a for a in args)});')


@rule(I.AllocShared)
def _alloc_shared(ctx, inst, expr):
    off = ctx.smem.offsets[inst.out]
    ctx.emit(f"// %{inst.out.name}: shared bytes [{off}, {off + inst.out.nbytes})")


@rule(I.FreeShared)
def _free_shared(ctx, inst, expr):
    ctx.emit("// free_shared: nothing to do")


def _converted_operands(ctx, inst):
    """``inst`` with the operands layout inference converts at this use replaced by their
    copies, each written through shared memory first (``LayoutPlan.use_converts``)."""
    convs = ctx.plan.use_converts.get(inst)
    if not convs:
        return inst
    for _, src, copy in convs:
        through_shared(ctx, copy, src, copy, lambda c, sh=src.shape: row_major(c, sh))
    if isinstance(inst, I.WgmmaMma):  # registers wgmma reads are written before a fence
        CODEGEN_RULES.lookup(I.WgmmaFence)(ctx, None, None)
    return dataclasses.replace(inst, **{name: copy for name, _, copy in convs})


def warps_cond(g: Group) -> str:
    """The condition of warp-aligned group ``g`` on the warp-uniform warp index."""
    w0, w1 = g.begin // 32, (g.begin + g.size) // 32
    if w1 - w0 == 1:
        return f"tl_warp == {w0}"
    return f"tl_warp >= {w0} && tl_warp < {w1}" if w0 else f"tl_warp < {w1}"


class StmtEmitter:
    """Walks the function body and emits C++ statements."""

    def __init__(self, ctx):
        self.ctx = ctx
        self.expr = ExprPrinter(ctx, lambda e: R.element_read(ctx, e, self.expr))

    def stmt(self, s):
        """Emit one statement (errors point at it)."""
        ctx = self.ctx
        prev, ctx.stmt = ctx.stmt, s
        try:
            if not isinstance(s, WhileStmt):  # a while condition broadcasts in each test
                self._hoist_broadcasts(s)
            self._stmt(s)
        except UnsupportedDtype as e:  # at the innermost statement that names the dtype
            raise ctx.error(str(e)) from None
        finally:
            ctx.stmt = prev

    def _fuses(self, s, nxt) -> bool:
        """Whether ``s`` is ``t = a * b`` of 16-bit float tiles whose only use is the next
        statement, a sum of ``t`` in its own dtype: the sum then computes the products in
        its additions (pair FMAs, one rounding for each product and addition, as CUDA
        contracts float32 ``a * b + c``), recorded in ``ctx.fused_products``."""
        if not (isinstance(s, InstStmt) and isinstance(nxt, InstStmt)):
            return False
        mul, red = s.inst, nxt.inst
        if not (isinstance(mul, I.ElementwiseBinary) and mul.op == "*"):
            return False
        t = mul.out
        if not (isinstance(red, I.Reduce) and red.src is t and red.acc == t.dtype):
            return False
        ops = (mul.a, mul.b)
        if not all(isinstance(x, TensorVar) and x.dtype == t.dtype for x in ops):
            return False
        if t in ops or self._uses(t) != 2:  # defined here, read by the sum: nothing else
            return False
        self.ctx.fused_products[id(red)] = ops
        return True

    def _uses(self, t) -> int:
        """How often tile ``t`` occurs in the function (its definition included)."""
        counts = getattr(self, "_tile_counts", None)
        if counts is None:
            counts = self._tile_counts = Counter(
                id(n) for n in walk_nodes(self.ctx.fn.body) if isinstance(n, TensorVar)
            )
        return counts[id(t)]

    def _broadcast_reads(self, s) -> list:
        return [
            x for x in own_nodes(s) if isinstance(x, TensorElement) and x in self.ctx.plan.scratch
        ]

    def _hoist_broadcasts(self, s, comment: bool = True):
        """Broadcast the elements of tiles spread over threads that ``s`` reads before its
        code (their barriers then run where the whole group is, never inside a branch or
        loop an instruction's code opens); inner reads (in indices) first."""
        ctx = self.ctx
        reads = self._broadcast_reads(s)
        if not reads:
            return
        if comment:
            ctx.source_comment(s)
        for e in reversed(reads):
            ctx.broadcasts[e] = R.broadcast_element(ctx, e, self.expr)

    def _stmt(self, s):
        ctx, expr = self.ctx, self.expr
        if isinstance(s, SeqStmt):
            for k, x in enumerate(s.stmts):
                if self._fuses(x, s.stmts[k + 1] if k + 1 < len(s.stmts) else None):
                    ctx.source_comment(x)  # the product is computed inside the sum
                    continue
                self.stmt(x)
        elif isinstance(s, DeclareStmt):
            ctx.source_comment(s)
            init = f" = {expr(s.init)}" if s.init is not None else ""
            ctx.emit(f"{ctype(s.var.dtype)} {ctx.name(s.var)}{init};")
        elif isinstance(s, AssignStmt):
            ctx.source_comment(s)
            ctx.emit(f"{ctx.name(s.var)} = {expr(s.value)};")
        elif isinstance(s, InstStmt):
            try:
                emit = CODEGEN_RULES.lookup(s.inst)
            except NotLowered as e:
                raise ctx.error(f"{s.inst.NAME} is not supported: {e.reason}") from None
            ctx.source_comment(s)
            emit(ctx, _converted_operands(ctx, s.inst), expr)
        elif isinstance(s, ForStmt):
            self.for_stmt(s)
        elif isinstance(s, WhileStmt):
            ctx.source_comment(s)
            if self._broadcast_reads(s):  # the condition's broadcasts run before each test
                ctx.open("while (true)")
                self._hoist_broadcasts(s, comment=False)
                ctx.emit(f"if (!({expr(s.cond)})) break;")
            else:
                ctx.open(f"while ({expr(s.cond)})")
            self.stmt(s.body)
            ctx.close()
        elif isinstance(s, IfStmt):
            ctx.source_comment(s)
            ctx.open(f"if ({expr(s.cond)})")
            self.stmt(s.then_body)
            if s.else_body is not None:
                ctx.reopen("} else {")
                self.stmt(s.else_body)
            ctx.close()
        elif isinstance(s, BreakStmt):
            ctx.emit("break;")
        elif isinstance(s, ReturnStmt):
            ctx.emit("return;")
        elif isinstance(s, ThreadGroupStmt):
            self.thread_group(s)
        else:
            raise ctx.error(f"statement {type(s).__name__} is not supported by the CUDA backend")

    def for_stmt(self, s: ForStmt):
        """A counted loop; ``unroll`` becomes ``#pragma unroll``.

        Python semantics: the bound is evaluated once (hoisted unless constant), and rebinding
        the loop variable in the body lasts one iteration (a hidden counter then drives it).
        """
        ctx, expr = self.ctx, self.expr
        ctx.source_comment(s)
        ct = ctype(s.var.dtype)
        stop = expr(s.stop)
        opened = False
        if not isinstance(s.stop, Const):
            ctx.open("")
            opened = True
            end = ctx.fresh("end")
            ctx.emit(f"const {ct} {end} = {stop};")
            stop = end
        rebinds = any(isinstance(x, AssignStmt) and x.var is s.var for x in walk(s.body))
        v = ctx.name(s.var)
        k = ctx.fresh("k") if rebinds else v
        if s.unroll is Unroll.ALL:
            ctx.emit("#pragma unroll")
        elif isinstance(s.unroll, int):
            ctx.emit(f"#pragma unroll {s.unroll}")
        cmp = "<" if s.step > 0 else ">"
        inc = f"{k} += {s.step}" if s.step != 1 else f"++{k}"
        ctx.open(f"for ({ct} {k} = {expr(s.start)}; {k} {cmp} {stop}; {inc})")
        if rebinds:
            ctx.emit(f"{ct} {v} = {k};")
        self.stmt(s.body)
        ctx.close()
        if opened:
            ctx.close()

    def thread_group(self, s: ThreadGroupStmt):
        """A warp-uniform branch on the group's thread range (elect.sync for one thread)."""
        ctx = self.ctx
        parent = ctx.group
        ctx.source_comment(s)
        by_warp = False  # the condition reads tl_warp: the thread range is assumed inside
        if s.begin < 0:
            g = Group(parent.begin, 1, True)
            if parent.size == 1:
                cond = None
            elif parent.size % 32 == 0 and parent.begin % 32 == 0:
                warp = "tl_warp" if ctx.warp_uniform else "threadIdx.x / 32"
                cond = f"{warp} == {parent.begin // 32} && tl_elect_one()"
            else:
                cond = f"threadIdx.x == {parent.begin}"
            what = "single_thread: one elected thread"
        else:
            g = Group(parent.begin + s.begin, s.num_threads)
            if g.begin == parent.begin and g.size == parent.size:
                cond = None
            elif g.size == 1:
                cond = f"threadIdx.x == {g.begin}"
            elif ctx.warp_uniform and g.begin % 32 == 0 and g.size % 32 == 0:
                cond = warps_cond(g)
                by_warp = True
            else:
                lo = f"threadIdx.x >= {g.begin} && " if g.begin > 0 else ""
                cond = f"{lo}threadIdx.x < {g.begin + g.size}"
            what = f"threads [{g.begin}, {g.begin + g.size})"
        ctx.open(f"if ({cond})" if cond else "")
        ctx.lines[-1] += f"  // {what}"
        if by_warp:  # the thread range, for the compiler's folds
            lo = f"threadIdx.x >= {g.begin}u && " if g.begin > 0 else ""
            ctx.emit(f"__builtin_assume({lo}threadIdx.x < {g.begin + g.size}u);")
        ctx.groups.append(g)
        try:
            self.stmt(s.body)
        finally:
            ctx.groups.pop()
        ctx.close()
