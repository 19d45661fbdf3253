"""Pass: choose register and shared-memory layouts (and TMA tensor maps) for the CUDA backend."""

from __future__ import annotations

from dataclasses import dataclass, field

from tilus.errors import TilusCompileError
from tilus.ir import inst as I
from tilus.ir.expr import Expr, Var
from tilus.ir.function import Function
from tilus.ir.layout import RegisterLayout, SharedLayout, blocked, choose_swizzle, replicated
from tilus.ir.layout.register import mma_a, mma_b, mma_c, mma_warps, permute, wgmma_acc
from tilus.ir.stmt import InstStmt, SeqStmt, ThreadGroupStmt
from tilus.ir.tensor import TensorVar
from tilus.passes.walk import children, instructions, operands

#: Most 32-bit registers one tile may take per thread before it surely spills.
MAX_TILE_REGISTERS = 192
#: Tiles up to this many elements that no instruction distributes are kept whole per thread.
SMALL_TILE = 64


@dataclass(frozen=True)
class Group:
    """A thread group: absolute first thread and size; ``elected`` for single_thread()."""

    begin: int
    size: int
    elected: bool = False


@dataclass(frozen=True)
class SharedView:
    """A shared tile as a view of an allocation: leading integer indices, then a permutation."""

    root: TensorVar
    layout: SharedLayout  # of the root allocation
    index: tuple  # index expressions into the root's leading dims
    perm: tuple | None = None  # dims permutation applied to the indexed tile


@dataclass(frozen=True)
class TmaMap:
    """One TMA tensor map: a global view, the box it moves (outermost first), the swizzle."""

    gview: TensorVar
    box: tuple[int, ...]
    swizzle: int


@dataclass
class LayoutPlan:
    """Layouts of every tile of a function, the owning group of register tiles, TMA maps."""

    registers: dict = field(default_factory=dict)  # register TensorVar -> RegisterLayout
    owner: dict = field(default_factory=dict)  # register TensorVar -> Group
    shared: dict = field(default_factory=dict)  # shared TensorVar -> SharedView
    barriers: set = field(default_factory=set)  # MBarrierAlloc outputs
    gviews: dict = field(default_factory=dict)  # global TensorVar -> GlobalView inst
    tmaps: list = field(default_factory=list)  # TmaMap, in first-use order
    tmap_of: dict = field(default_factory=dict)  # TMA inst -> index into tmaps


class _UnionFind:
    def __init__(self):
        self.parent: dict = {}

    def find(self, x):
        """The class representative of ``x``."""
        self.parent.setdefault(x, x)
        while self.parent[x] is not x:
            self.parent[x] = self.parent[self.parent[x]]
            x = self.parent[x]
        return x

    def union(self, a, b):
        """Merge the classes of ``a`` and ``b`` (they get one layout)."""
        ra, rb = self.find(a), self.find(b)
        if ra is not rb:
            self.parent[rb] = ra


def free_vars(e, out: set) -> None:
    """Collect the variables an expression reads."""
    if isinstance(e, Var):
        out.add(e)
    for x in operands(e):
        free_vars(x, out)


def _err(stmt, msg):
    return TilusCompileError(f"CUDA backend: {msg}", stmt.loc if stmt is not None else None)


class _Inference:
    def __init__(self, fn: Function):
        self.fn = fn
        self.plan = LayoutPlan()
        self.uf = _UnionFind()
        self.anchor: dict = {}  # class root -> (layout, stmt)
        self.anchors: list = []  # (tensor, layout, stmt) requirements
        self.perms: dict = {}  # permuted register tile -> (source tile, dims)
        self.defs: dict = {}  # register tensor -> (Group, stmt) of its first definition
        self.uses: list = []  # (tensor, Group, stmt) where a distributed layout must match

    # --- walk --------------------------------------------------------------------------------
    def run(self) -> LayoutPlan:
        """Walk the function and assign every layout."""
        root = Group(0, self.fn.num_threads)
        self.blockable = _blockable_tiles(self.fn)
        self.walk(self.fn.body, root)
        self.assign()
        return self.plan

    def walk(self, s, g: Group, nested: bool = False):
        """Visit statements in order, tracking the thread group (and control-flow nesting)."""
        if isinstance(s, ThreadGroupStmt):
            if s.begin < 0:
                g = Group(g.begin, 1, True)
            else:
                g = Group(g.begin + s.begin, s.num_threads)
            self.walk(s.body, g, True)
            return
        if isinstance(s, InstStmt):
            if isinstance(s.inst, I.MBarrierAlloc):
                self.check_barrier_alloc(s, nested)
            self.inst(s, s.inst, g)
        inner = nested or not isinstance(s, SeqStmt)
        for c in children(s):
            self.walk(c, g, inner)

    def check_barrier_alloc(self, stmt, nested: bool):
        """Barriers are initialized once at kernel entry: the alloc must be at the top level,
        with counts known there (constants or parameters)."""
        if nested:
            raise _err(
                stmt,
                "mbarrier.alloc inside a loop, branch or thread group is not supported (barriers "
                "are initialized once at kernel entry); allocate them at the top of the kernel",
            )
        bad = set()
        for c in stmt.inst.counts:
            free_vars(c, bad)
        if any(v.kind != "param" for v in bad):
            raise _err(stmt, "mbarrier counts must be constants or kernel parameters")

    def define(self, t: TensorVar, g: Group, stmt):
        """Record the group a register tile is created in."""
        if t.kind == "register" and t not in self.defs:
            self.defs[t] = (g, stmt)
            self.uf.find(t)

    def use(self, t, g: Group, stmt):
        """Record a use that needs the tile's threads to be the current group's."""
        if isinstance(t, TensorVar) and t.kind == "register":
            self.uses.append((self.base(t)[0], g, stmt))

    def base(self, t):
        """A register tile with the permutations that made it undone: (source, dims or None)."""
        dims = None
        while t in self.perms:
            src, d = self.perms[t]
            dims = d if dims is None else tuple(d[i] for i in dims)
            t = src
        return t, dims

    def no_perm(self, stmt, t):
        """Reject elementwise uses of transposed register views."""
        if t in self.perms:
            raise _err(
                stmt,
                f"elementwise use of the transposed register tile %{t.name} is not supported "
                "yet (only dot operands may be transposed views)",
            )

    def set_anchor(self, t: TensorVar, layout: RegisterLayout, stmt):
        """Require a layout for a tile (through transposed views to their source)."""
        src, dims = self.base(t)
        if dims is not None:
            inv = [0] * len(dims)
            for k, d in enumerate(dims):
                inv[d] = k
            layout = permute(layout, inv)
        self.anchors.append((src, layout, stmt))

    def dot(self, stmt, inst, g: Group):
        """mma.sync fragment layouts for a dot's operands and accumulator."""
        m, k = inst.a.shape
        n = inst.b.shape[1]
        if inst.a.dtype.name not in ("float16", "bfloat16") or inst.out.dtype.name != "float32":
            raise _err(
                stmt,
                f"dot on the CUDA backend needs float16/bfloat16 operands and a float32 "
                f"accumulator (mma.sync), got {inst.a.dtype} -> {inst.out.dtype}",
            )
        if g.size % 32 or g.begin % 32:
            raise _err(stmt, "dot (mma.sync) needs a thread group of whole warps")
        w = mma_warps(g.size // 32, m, n)
        if w is None or k % 16:
            raise _err(
                stmt,
                f"dot [{m}, {k}] @ [{k}, {n}] does not tile into mma.sync m16n8k16 over "
                f"{g.size // 32} warps",
            )
        wm, wn = w
        for t in (inst.a, inst.b, inst.out) + ((inst.c,) if inst.c is not None else ()):
            self.use(t, g, stmt)
        self.define(inst.out, g, stmt)
        if inst.c is not None:
            self.uf.union(inst.out, inst.c)
        nw = g.size // 32
        self.set_anchor(inst.out, mma_c(m, n, wm, wn, nw), stmt)
        self.set_anchor(inst.a, mma_a(m, k, wm, wn, nw), stmt)
        self.set_anchor(inst.b, mma_b(k, n, wm, wn, nw), stmt)

    def resolve_anchors(self):
        """Attach the required layouts to the final equivalence classes."""
        for t, layout, stmt in self.anchors:
            r = self.uf.find(t)
            old = self.anchor.get(r)
            if old is not None and old[0] != layout:
                raise _err(stmt, f"tile %{t.name} needs two different register layouts")
            self.anchor[r] = (layout, stmt)

    def shared_view(self, t: TensorVar, stmt) -> SharedView:
        """The SharedView of a shared tile."""
        v = self.plan.shared.get(t)
        if v is None:
            raise _err(stmt, f"shared tile %{t.name} is not a view of an allocation")
        return v

    def inst(self, stmt, inst, g: Group):
        """Collect the layout facts one instruction implies."""
        p = self.plan
        if isinstance(inst, I.AllocShared):
            t = inst.out
            eb = t.dtype.nbits // 8
            sw = choose_swizzle(t.shape[-1] * eb) if t.ndim >= 2 else 0
            if not sw and t.ndim >= 2 and t in self.blockable and t.shape[-1] * eb % 128 == 0:
                sw = 128  # wide rows as 128-byte column blocks: conflict-free, TMA-movable
            if sw and t.shape[-2] % 8:
                sw = 0
            p.shared[t] = SharedView(t, SharedLayout(tuple(t.shape), eb, sw), ())
        elif isinstance(inst, I.SliceTensor) and inst.src.kind == "shared":
            v = self.shared_view(inst.src, stmt)
            idx = list(inst.indices)
            if v.perm is not None:
                raise _err(stmt, "slicing a permuted shared view is not supported yet")
            k = 0
            while k < len(idx) and idx[k] is not None:
                k += 1
            if any(i is not None for i in idx[k:]):
                raise _err(
                    stmt,
                    "shared slices must index leading dims only (e.g. s[stage] or s[stage, 0])",
                )
            nidx = len(v.index) + k
            if v.layout.swizzle and nidx > len(v.layout.shape) - 2:
                raise _err(stmt, "indexing inside the rows of a swizzled shared tile")
            p.shared[inst.out] = SharedView(v.root, v.layout, v.index + tuple(idx[:k]))
        elif isinstance(inst, I.PermuteTensor) and inst.src.kind == "shared":
            v = self.shared_view(inst.src, stmt)
            if v.perm is not None:
                raise _err(stmt, "permuting a permuted shared view is not supported yet")
            p.shared[inst.out] = SharedView(v.root, v.layout, v.index, tuple(inst.dims))
        elif isinstance(inst, I.PermuteTensor) and inst.src.kind == "register":
            self.perms[inst.out] = (inst.src, tuple(inst.dims))
        elif isinstance(inst, I.SliceTensor | I.PermuteTensor):
            raise _err(
                stmt, f"{inst.NAME} of a {inst.src.kind} tile is not supported by the CUDA backend"
            )
        elif isinstance(inst, I.GlobalView):
            bad = set()
            exprs = [inst.ptr] + [s for s in inst.out.shape if isinstance(s, Expr)]
            exprs += list(inst.strides or ())
            for e in exprs:
                free_vars(e, bad)
            bad = {v for v in bad if v.kind != "param"}
            if bad:
                names = ", ".join(sorted(v.name for v in bad))
                raise _err(
                    stmt,
                    f"global_view %{inst.out.name}: its pointer, shape and strides must be "
                    f"expressions over kernel parameters, but they read {names}",
                )
            p.gviews[inst.out] = inst
        elif isinstance(inst, I.MBarrierAlloc):
            p.barriers.add(inst.out)
            self.define(inst.out, g, stmt)
        elif isinstance(inst, I.AllocRegister):
            self.define(inst.out, g, stmt)
        elif isinstance(inst, I.CastTensor | I.AssignTensor):
            self.no_perm(stmt, inst.src)
            self.define(inst.out, g, stmt)
            self.use(inst.src, g, stmt)
            self.uf.union(inst.out, inst.src)
        elif isinstance(inst, I.ElementwiseBinary | I.Where | I.ElementwiseUnary):
            self.define(inst.out, g, stmt)
            ops = [getattr(inst, n) for n in ("a", "b", "cond", "x", "y") if hasattr(inst, n)]
            for o in ops:
                if isinstance(o, TensorVar):
                    self.no_perm(stmt, o)
                    self.use(o, g, stmt)
                    if o.shape != inst.out.shape:
                        raise _err(
                            stmt,
                            f"{inst.NAME} with broadcasting ({o.type_str()} to "
                            f"{inst.out.type_str()}) is not supported yet",
                        )
                    self.uf.union(inst.out, o)
        elif isinstance(inst, I.StoreElement):
            self.use(inst.out, g, stmt)
        elif isinstance(inst, I.LoadGlobal):
            self.define(inst.out, g, stmt)
        elif isinstance(inst, I.StoreGlobal):
            self.use(inst.src, g, stmt)
        elif isinstance(inst, I.LoadShared):
            self.define(inst.out, g, stmt)
        elif isinstance(inst, I.StoreShared):
            self.use(inst.src, g, stmt)
        elif isinstance(inst, I.WgmmaMma):
            self.wgmma(stmt, inst, g)
        elif isinstance(inst, I.TmaGlobalToShared | I.TmaSharedToGlobal):
            self.tma(stmt, inst)
        elif isinstance(inst, I.Dot):
            self.dot(stmt, inst, g)
        elif inst.NAME in ("reduce", "print_tensor", "reshape"):
            raise _err(stmt, f"{inst.NAME} is not supported by the CUDA backend yet")

    def wgmma(self, stmt, inst, g: Group):
        """Check the wgmma operands' shared layouts; the accumulator gets the wgmma layout."""
        a = self.shared_view(inst.a, stmt)
        b = self.shared_view(inst.b, stmt)
        if a.perm is not None or not a.layout.swizzle:
            raise _err(
                stmt,
                f"wgmma operand a %{inst.a.name} must be a K-major shared tile whose rows span "
                "32, 64 or 128 bytes (a [M, K] tile with K contiguous)",
            )
        if b.perm != (1, 0) or not b.layout.swizzle:
            raise _err(
                stmt,
                f"wgmma operand b %{inst.b.name} must be the transpose of a K-major shared tile "
                "[N, K] whose rows span 32, 64 or 128 bytes (as in s[stage].transpose())",
            )
        m, n = inst.d.shape
        if n > 256:
            raise _err(stmt, f"wgmma N={n} is over 256")
        self.define(inst.d, g, stmt)
        self.use(inst.d, g, stmt)
        self.set_anchor(inst.d, wgmma_acc(m, n), stmt)

    def tma(self, stmt, inst):
        """Check a TMA copy's box against the shared layout; register its tensor map."""
        p = self.plan
        load = isinstance(inst, I.TmaGlobalToShared)
        g, s = (inst.src, inst.dst) if load else (inst.dst, inst.src)
        v = self.shared_view(s, stmt)
        if v.perm is not None:
            raise _err(stmt, "a TMA copy to or from a permuted shared view is not supported")
        dims = tuple(inst.dims)
        if list(dims) != sorted(dims):
            raise _err(stmt, f"TMA dims={list(dims)} must be increasing (no transposed boxes)")
        if g not in p.gviews:
            raise _err(stmt, f"%{g.name} is not a global_view")
        if not (isinstance(p.gviews[g].ptr, Var) and p.gviews[g].ptr.kind == "param"):
            raise _err(stmt, "TMA needs a global_view directly over a pointer parameter")
        if p.gviews[g].strides is not None:
            raise _err(stmt, "TMA on a global_view with explicit strides is not supported yet")
        # cuTensorMapEncodeTiled: every global stride but the innermost is a multiple of 16
        # bytes; with compile-time inner extents that is known here, before any launch
        stride = g.dtype.nbits // 8
        for d in range(g.ndim - 1, 0, -1):
            n = g.shape[d]
            if not isinstance(n, int):
                break
            stride *= n
            if stride % 16:
                raise _err(
                    stmt,
                    f"TMA needs every global stride but the innermost to be a multiple of 16 "
                    f"bytes; %{g.name} of shape [{', '.join(str(x) if isinstance(x, int) else '?' for x in g.shape)}] "
                    f"({g.dtype}) has a dim-{d - 1} stride of {stride} bytes",
                )
        box = [1] * g.ndim
        for d, n in zip(dims, s.shape):
            box[d] = n
        sw = v.layout.swizzle
        box[-1] = v.layout.block_cols if sw else box[-1]  # one box per column block
        if box[-1] * v.layout.elem_bytes % 16:
            raise _err(
                stmt,
                f"TMA box {box} of {g.dtype}: the innermost dim must span a multiple of 16 bytes",
            )
        if dims[-1] != g.ndim - 1 and box[-1] != 1:
            raise _err(stmt, "TMA boxes must include the innermost global dim")
        if sw and box[-1] * v.layout.elem_bytes != sw:
            raise _err(stmt, "TMA box rows do not match the shared tile's swizzle")
        key = TmaMap(g, tuple(box), sw)
        if key not in p.tmaps:
            p.tmaps.append(key)
        p.tmap_of[inst] = p.tmaps.index(key)

    # --- assignment --------------------------------------------------------------------------
    def assign(self):
        """Give every class of register tiles a layout and check the uses."""
        p = self.plan
        self.resolve_anchors()
        classes: dict = {}
        for t in self.defs:
            classes.setdefault(self.uf.find(t), []).append(t)
        for r, members in classes.items():
            t0 = members[0]
            g, stmt = self.defs[t0]
            anchor = self.anchor.get(r)
            if anchor is not None:
                layout = anchor[0]
                g = self.defs[t0][0]
                for t in members:
                    dg = self.defs[t][0]
                    if dg.size != layout.num_threads:
                        raise _err(
                            self.defs[t][1],
                            f"tile %{t.name} is created in a group of {dg.size} threads but "
                            f"its layout ({layout.kind}) spans {layout.num_threads}",
                        )
            elif t0 in p.barriers:
                layout = replicated(t0.shape, g.size)
            elif t0.size <= SMALL_TILE:
                layout = replicated(t0.shape, g.size)
            else:
                layout = blocked(t0.shape, g.size)
            for t in members:
                dg, dstmt = self.defs[t]
                if not layout.replicated and dg != g:
                    raise _err(
                        dstmt,
                        f"tile %{t.name} is created in a different thread group than the tiles "
                        "it is computed with",
                    )
                regs = layout.local_size * max(1, t.dtype.nbits // 32)
                if regs > MAX_TILE_REGISTERS:
                    raise _err(
                        dstmt,
                        f"tile %{t.name} ({t.type_str()}) needs {regs} registers per thread "
                        f"over {dg.size} threads (layout {layout.kind}); at most "
                        f"{MAX_TILE_REGISTERS} fit without spilling; use smaller tiles or more "
                        "threads",
                    )
                p.registers[t] = layout
                p.owner[t] = dg
        for t in self.perms:
            base, dims = self.base(t)
            if base in p.registers:
                p.registers[t] = permute(p.registers[base], dims)
                p.owner[t] = p.owner[base]
        for t, g, stmt in self.uses:
            layout = p.registers.get(t)
            if layout is None:
                raise _err(stmt, f"tile %{t.name} is used before it is defined")
            if not layout.replicated and (g.begin, g.size) != (p.owner[t].begin, p.owner[t].size):
                raise _err(
                    stmt,
                    f"tile %{t.name} is spread over threads [{p.owner[t].begin}, "
                    f"{p.owner[t].begin + p.owner[t].size}) but used by the group "
                    f"[{g.begin}, {g.begin + g.size})",
                )


#: What may use a shared tile stored in column blocks: element-wise copies and TMA, which
#: address it through ``SharedLayout``; wgmma descriptors and permuted views do not.
_BLOCKABLE_USES = (
    I.AllocShared,
    I.SliceTensor,
    I.LoadShared,
    I.StoreShared,
    I.TmaGlobalToShared,
    I.TmaSharedToGlobal,
    I.FreeShared,
)


def _blockable_tiles(fn: Function) -> set:
    """Shared allocations whose every use (through leading-dim slices) is in
    ``_BLOCKABLE_USES``: those with rows wider than 128 bytes get column blocks."""
    root: dict = {}
    bad: set = set()
    for _, inst in instructions(fn.body):
        if isinstance(inst, I.AllocShared):
            root[inst.out] = inst.out
            continue
        used = [v for _, value in inst.items() for v in _tensor_vars(value) if v in root]
        if isinstance(inst, I.SliceTensor) and inst.src in root:
            root[inst.out] = root[inst.src]
        elif not isinstance(inst, _BLOCKABLE_USES):
            bad.update(root[v] for v in used)
    return {t for t in root.values() if t not in bad}


def _tensor_vars(x):
    if isinstance(x, TensorVar):
        yield x
    elif isinstance(x, tuple | list):
        for y in x:
            yield from _tensor_vars(y)


def infer_layouts(fn: Function) -> LayoutPlan:
    """Choose the layout of every tile of ``fn``; raise TilusCompileError where none fits."""
    return _Inference(fn).run()
