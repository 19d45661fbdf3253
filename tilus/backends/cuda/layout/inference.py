"""Layout inference: the walk, equivalence classes of tiles, and the final layout choice."""

from __future__ import annotations

from tilus.backends.cuda.layout.blocks import blockable_tiles
from tilus.backends.cuda.layout.plan import Group, LayoutPlan, SharedView, err, free_vars
from tilus.backends.cuda.layout.reduction import scratch_bytes
from tilus.backends.cuda.layout.reshape import moves_in_place, register_permutation
from tilus.backends.cuda.tables import LAYOUT_RULES
from tilus.errors import TilusCompileError, at
from tilus.ir import inst as I
from tilus.ir.enums import TensorKind, VarKind
from tilus.ir.expr import TensorElement
from tilus.ir.function import Function
from tilus.ir.inst_layout import AnnotateLayout
from tilus.ir.layout import RegisterLayout, blocked, replicated
from tilus.ir.layout.derived import broadcast_map
from tilus.ir.layout.ops import same_layout
from tilus.ir.layout.register import permute
from tilus.ir.rules import NotLowered
from tilus.ir.stmt import InstStmt, SeqStmt, ThreadGroupStmt
from tilus.ir.tensor import RegisterTensor, TensorVar
from tilus.ir.visit import own_nodes
from tilus.passes.register_budget import tile_registers_message
from tilus.passes.walk import children, instructions

#: Derivations an instruction may break by converting its registers through shared memory.
CONVERTIBLE = ("cast", "reshape")
#: Most 32-bit registers one tile may take per thread before it surely spills.
MAX_TILE_REGISTERS = 192
#: Tiles up to this many elements that no instruction distributes are kept whole per thread.
SMALL_TILE = 64


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


class _Inference:
    def __init__(self, fn: Function):
        self.fn = fn
        self.plan = LayoutPlan()
        self.uf = _UnionFind()
        self.anchor: dict = {}  # class root -> (layout, stmt)
        self.anchors: list = []  # (tensor, layout, stmt, rank, why, conversion) requirements
        self.user_shared: dict = {}  # shared allocation -> (SharedLayout, stmt) it was given
        self.user_reg: dict = {}  # register tile -> stmt of the annotation that pinned it
        self.perms: dict = {}  # permuted register tile -> (source tile, dims)
        self.defs: dict = {}  # register tensor -> (Group, stmt) of its first definition
        self.uses: list = []  # (tensor, Group, stmt) where a distributed layout must match
        self.nested = False  # whether the instruction being visited is inside control flow
        self.derived: list = []  # (target, source, fn(source layout) -> layout, stmt, how)
        self.reduces: list = []  # (Reduce inst, Group)
        self.converts: list = []  # (cast/reshape/slice inst, Group) that may move registers
        self.elem_reads: list = []  # (TensorElement, Group, stmt) of register tiles
        self.io_bytes: dict = {}  # register tile -> element bytes of a global load/store of it
        self.operand_edges: list = []  # (result, operand, stmt, field, Group): see join_operands
        self.use_copies: list = []  # (copy tile, Group) converted at a use

    # --- walk --------------------------------------------------------------------------------
    def run(self) -> LayoutPlan:
        """Walk the function and assign every layout."""
        root = Group(0, self.fn.num_threads)
        self.blockable = blockable_tiles(self.fn)
        self.collect_shared_annotations()
        self.walk(self.fn.body, root)
        self.assign()
        self.plan_scratch()
        return self.plan

    def plan_scratch(self):
        """Shared scratch across warps: one area per thread group (groups may work at the
        same time), as large as the group's largest use needs; the uses of one group reuse it
        (each waits for the group before writing). The reductions have their own two areas
        a group, used in turn: a reduction's trailing barrier comes after every thread has
        read the one before, so the next reduction of the other area needs no leading one."""
        need: dict = {}
        halves: dict = {}
        for inst, g in self.reduces:
            n = scratch_bytes(self.plan.registers[inst.src], inst, g.size)
            if n:
                halves.setdefault((g.begin, g.size), []).append(inst)
                key = (g.begin, g.size)
                self.plan.reduce_halves[key] = max(self.plan.reduce_halves.get(key, 0), n)
        for inst, g in self.converts:
            regs = self.plan.registers
            if isinstance(inst, I.PrintTensor | I.Scan):
                src = inst.tensor if isinstance(inst, I.PrintTensor) else inst.src
                n = src.size * (max(1, src.dtype.nbits // 8) if src.dtype.nbits % 8 == 0 else 4)
                need.setdefault((g.begin, g.size), []).append((inst, -(-n // 4) * 4))
                continue
            src, out = inst.src, inst.out
            if isinstance(inst, I.SliceTensor) or not (
                moves_in_place(inst, regs[src], regs[out])
                or register_permutation(inst, regs[src], regs[out]) is not None
            ):
                n = src.size * max(1, src.dtype.nbits // 8)
                need.setdefault((g.begin, g.size), []).append((inst, n))
        for copy, g in self.use_copies:
            n = copy.size * max(1, copy.dtype.nbits // 8)
            need.setdefault((g.begin, g.size), []).append((copy, n))
        for e, g, stmt in self.elem_reads:
            if self.elem_read_scratch(e, g, stmt):
                need.setdefault((g.begin, g.size), []).append((e, 8))
        at = 0
        for insts in need.values():
            for inst, _ in insts:
                self.plan.scratch[inst] = at
            at += -(-max(n for _, n in insts) // 16) * 16
        for key, insts in halves.items():
            half = -(-self.plan.reduce_halves[key] // 16) * 16
            self.plan.reduce_halves[key] = half
            for inst in insts:
                self.plan.scratch[inst] = at
            at += 2 * half
        self.plan.scratch_bytes = at

    def elem_read_scratch(self, e, g: Group, stmt) -> bool:
        """Whether element read ``e`` of a tile spread over threads needs a shared word (its
        owners write it there, the group waits and reads it); refuse the forms where that
        barrier cannot run (a while condition broadcasts before each test)."""
        t = e.tensor
        layout = self.plan.registers.get(t)
        if t in self.plan.barriers or layout is None or layout.replicated:
            return False
        owner = self.plan.owner[t]
        if (g.begin, g.size) != (owner.begin, owner.size) or g.elected:
            raise err(
                stmt,
                f"reading one element of %{t.name} (spread over threads [{owner.begin}, "
                f"{owner.begin + owner.size})) in the group [{g.begin}, {g.begin + g.size}) "
                "is not supported: the element is broadcast with a barrier of the tile's group",
            )
        return True

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
            self.nested = nested
            self.inst(s, s.inst, g)
        for x in own_nodes(s):
            if isinstance(x, TensorElement) and x.tensor.kind == TensorKind.REGISTER:
                self.elem_reads.append((x, g, s))
        inner = nested or not isinstance(s, SeqStmt)
        for c in children(s):
            self.walk(c, g, inner)

    def collect_shared_annotations(self):
        """The layouts given to shared tiles (annotate_layout, shared_tensor(layout=)): the
        allocation takes them wherever the annotation is; two that differ are refused."""
        from tilus.ir.layout.shared_ops import with_elem_bytes

        for stmt, inst in instructions(self.fn.body):
            if not isinstance(inst, AnnotateLayout) or inst.tensor.kind != TensorKind.SHARED:
                continue
            t = inst.tensor
            layout = with_elem_bytes(inst.layout, max(1, t.dtype.nbits // 8))
            why = "has strides or an XOR swizzle no hardware swizzle matches" * layout.general
            if why or layout.perm is not None:
                raise err(
                    stmt,
                    f"the shared layout given to %{t.name} {why or 'stores its dims permuted'}"
                    "; the CUDA backend lowers row-major (optionally swizzled) layouts only",
                )
            old = self.user_shared.get(t)
            if old is not None and old[0] != layout:
                raise err(
                    stmt,
                    f"shared tile %{t.name} is given two different layouts (here and at "
                    f"{at(old[1].loc)})",
                )
            self.user_shared.setdefault(t, (layout, stmt))

    def user_note(self, inst) -> str:
        """Where the layouts an instruction's operands were given by the user come from."""
        notes = []
        for _, v in inst.items():
            if not isinstance(v, TensorVar):
                continue
            view = self.plan.shared.get(v)
            if view is not None and view.root in self.user_shared:
                notes.append(
                    f"the layout of %{v.name} was given at {at(self.user_shared[view.root][1].loc)}"
                )
            elif v.kind == TensorKind.REGISTER and self.base(v)[0] in self.user_reg:
                notes.append(
                    f"the layout of %{v.name} was given at {at(self.user_reg[self.base(v)[0]].loc)}"
                )
        return "; ".join(notes)

    def check_barrier_alloc(self, stmt):
        """Barriers are initialized once at kernel entry: the alloc must be at the top level,
        with counts known there (constants or parameters)."""
        if self.nested:
            raise err(
                stmt,
                "mbarrier.alloc inside a loop, branch or thread group is not supported (barriers "
                "are initialized once at kernel entry); allocate them at the top of the kernel",
            )
        bad = set()
        for c in stmt.inst.counts:
            free_vars(c, bad)
        if any(v.kind != VarKind.PARAM for v in bad):
            raise err(stmt, "mbarrier counts must be constants or kernel parameters")

    def define(self, t: TensorVar, g: Group, stmt):
        """Record the group a register tile is created in."""
        if t.kind == TensorKind.REGISTER and t not in self.defs:
            self.defs[t] = (g, stmt)
            self.uf.find(t)

    def use(self, t, g: Group, stmt):
        """Record a use that needs the tile's threads to be the current group's."""
        if isinstance(t, TensorVar) and t.kind == TensorKind.REGISTER:
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
            raise err(
                stmt,
                f"elementwise use of the transposed register tile %{t.name} is not supported "
                "yet (only dot operands may be transposed views)",
            )

    def set_anchor(
        self,
        t: TensorVar,
        layout: RegisterLayout,
        stmt,
        why: str = "",
        user: bool = False,
        soft: bool = False,
        use=None,
    ):
        """Require a layout for a tile (through transposed views to their source); ``why``
        names the requirement in the error when another one conflicts; ``user``: given by the
        program (annotate_layout, register_tensor(layout=)); ``soft``: a preference any other
        requirement overrides; ``use`` (group, field): a read-only operand of ``stmt``'s
        instruction, converted at the use when its class ends up with another fixed layout."""
        src, dims = self.base(t)
        wanted = layout
        if dims is not None:
            inv = [0] * len(dims)
            for k, d in enumerate(dims):
                inv[d] = k
            layout = permute(layout, inv)
        if user:
            self.user_reg.setdefault(src, stmt)
        conv = None if use is None else (t, wanted, use[0], use[1])
        self.anchors.append((src, layout, stmt, 2 if user else 0 if soft else 1, why, conv))

    def resolve_anchors(self):
        """Attach the required layouts to the final equivalence classes: fixed ones first,
        then those of read-only operands, which get a converted copy on a conflict with
        another instruction's. A layout the user gave is never replaced: an instruction that
        needs another one is refused (an equal one, built differently, is taken in the
        instruction's form, which codegen knows)."""
        order = [a for a in self.anchors if a[5] is None] + [a for a in self.anchors if a[5]]
        for t, layout, stmt, rank, why, conv in order:
            r, user = self.uf.find(t), rank == 2
            old = self.anchor.get(r)
            if old is not None and old[0] != layout and min(rank, old[3]) == 0:
                if rank > old[3]:
                    self.anchor[r] = (layout, stmt, user, rank, why)
                continue  # a preference gives way
            if old is not None and old[0] != layout:
                if not (user or old[2]):
                    if conv is not None:
                        self.convert_at_use(stmt, conv)
                        continue
                    whys = " and ".join(w for w in (old[4], why) if w)
                    detail = f" ({whys})" if whys else ""
                    raise err(
                        stmt,
                        f"tile %{t.name} needs two different register layouts{detail}; a "
                        "tile that two instructions write in place in different layouts is "
                        "not converted: give each its own tile and combine the two with an "
                        "elementwise op (which converts an operand through shared memory)",
                    )
                if not same_layout(old[0], layout):
                    first = "given" if old[2] else "needed"
                    raise err(
                        stmt,
                        f"tile %{t.name}: the register layout {'given' if user else 'needed'} "
                        f"here differs from the one {first} at {at(old[1].loc)} (tiles computed "
                        "together share one layout)",
                    )
                if user:
                    continue  # keep the instruction's equal layout
            self.anchor[r] = (layout, stmt, user, rank, why)

    def operand_union(self, out, o, stmt, field: str, g: Group):
        """An elementwise result and a same-shape operand share a layout, unless each is
        fixed to another one (see ``join_operands``)."""
        self.operand_edges.append((out, o, stmt, field, g))

    def join_operands(self):
        """Union each elementwise result with its same-shape operands, in program order; an
        operand whose class has another fixed layout than the result's (an mma.sync result
        added to a wgmma accumulator, neither given by the user) gets a copy converted to
        the result's layout at that instruction instead."""
        fixed: dict = {}  # class root -> (layout, given by the user)
        for t, layout, _stmt, rank, _why, conv in self.anchors:
            if conv is None and rank:
                r = self.uf.find(t)
                old = fixed.get(r)
                fixed[r] = (old[0] if old else layout, rank == 2 or bool(old and old[1]))
        for out, o, stmt, field, g in self.operand_edges:
            ro, rt = self.uf.find(o), self.uf.find(out)
            fo, ft = fixed.get(ro), fixed.get(rt)
            if ro is not rt and fo and ft and fo[0] != ft[0] and not (fo[1] or ft[1]):
                self.convert_at_use(stmt, (o, ft[0], g, field))
                continue
            self.uf.union(out, o)
            if fo or ft:
                fixed[self.uf.find(out)] = ft or fo

    def convert_at_use(self, stmt, conv):
        """Give operand ``field`` of ``stmt``'s instruction a copy of its tile in the layout
        the instruction needs (written through shared memory just before it)."""
        t, layout, g, name = conv
        copy = RegisterTensor(f"{t.name}_cv", t.dtype, t.shape)
        self.plan.registers[copy] = layout
        self.plan.owner[copy] = g
        self.plan.use_converts.setdefault(stmt.inst, []).append((name, t, copy))
        self.use_copies.append((copy, g))

    def shared_view(self, t: TensorVar, stmt) -> SharedView:
        """The SharedView of a shared tile."""
        v = self.plan.shared.get(t)
        if v is None:
            raise err(stmt, f"shared tile %{t.name} is not a view of an allocation")
        return v

    def inst(self, stmt, inst, g: Group):
        """Collect the layout facts one instruction implies (its rule in ``LAYOUT_RULES``)."""
        try:
            rule = LAYOUT_RULES.lookup(inst)
        except NotLowered as e:
            raise err(
                stmt, f"{inst.NAME} is not supported by the CUDA backend: {e.reason}"
            ) from None
        try:
            rule(self, stmt, inst, g)
        except TilusCompileError as e:
            note = self.user_note(inst)
            if not note:
                raise
            raise TilusCompileError(f"{e.msg} ({note})", e.loc, e.notes) from None

    def derive(self, target, source, fn, stmt, how: str):
        """Require ``layout(target) == fn(layout(source))`` (``how``: "reduce", "reshape", or
        "broadcast", which only needs every thread to hold the operand elements it reads)."""
        self.derived.append((target, source, fn, stmt, how))

    def default_layout(self, r, members, g):
        """The layout of a class no instruction constrains (vectorized when it is loaded from
        or stored to global memory: 16 bytes per thread along the last dim)."""
        t0 = members[0]
        io = [self.io_bytes[t] for t in members if t in self.io_bytes]
        if t0 in self.plan.barriers:
            return replicated(t0.shape, g.size)
        if (t0.size <= SMALL_TILE and not io) or not t0.shape:  # 0-d: nothing to spread
            return replicated(t0.shape, g.size)
        return blocked(t0.shape, g.size, 16 // min(io) if io else 1)

    def class_layouts(self, classes) -> dict:
        """Class root -> layout: anchors, then what derivations imply, then defaults."""
        out = {r: self.anchor[r][0] for r in classes if r in self.anchor}
        targets = {self.uf.find(t) for t, *_ in self.derived}
        for t, s, _fn, _stmt, how in self.derived:
            # a sub-byte tile cast into a required layout (a dequantized wgmma A fragment)
            # takes that layout itself when nothing else fixes it: the backend does not
            # convert sub-byte layouts, and loading it so keeps the cast in registers
            rt, rs = self.uf.find(t), self.uf.find(s)
            if how == "cast" and s.dtype.nbits < 8 and rt in out and rs not in out:
                if rs not in targets:
                    out[rs] = out[rt]
        for r, members in classes.items():
            if r not in out and r not in targets:
                out[r] = self.default_layout(r, members, self.defs[members[0]][0])
        pending = [r for r in classes if r not in out]
        while pending:
            progress = True
            while progress:
                progress = False
                for t, s, fn, stmt, how in self.derived:
                    rt, rs = self.uf.find(t), self.uf.find(s)
                    if rt not in out and rs in out:
                        layout = fn(out[rs])
                        if layout is None and how in CONVERTIBLE:
                            # no layout keeps the registers in place: the instruction moves
                            # them through shared memory into the class's own layout
                            members = classes[rt]
                            layout = self.default_layout(rt, members, self.defs[members[0]][0])
                        elif layout is None:
                            raise err(
                                stmt,
                                f"no register layout of %{t.name} follows from "
                                f"that of %{s.name} (a layout conversion is needed)",
                            )
                        out[rt] = layout
                        progress = True
            pending = [r for r in classes if r not in out]
            if pending:  # a cycle of derivations: break it with a default
                r = pending[0]
                out[r] = self.default_layout(r, classes[r], self.defs[classes[r][0]][0])
        return out

    def reown(self):
        """A tile made by ``register_tensor`` in an enclosing group and used only inside one
        thread group belongs to that group (the tutorial style: the accumulator is created
        before ``with self.thread_group(...)``); its threads are the group's, the other
        threads of the enclosing group only run the register-only initialization. A tile
        used by two groups keeps the first and the second use is refused (``reowned``)."""
        self.reowned: dict = {}  # tile -> (Group, stmt) of its first use, when re-owned
        first: dict = {}  # tile -> (Group, stmt) of its first use
        groups: dict = {}  # tile -> the distinct groups of its uses
        for t, g, stmt in self.uses:
            first.setdefault(t, (g, stmt))
            groups.setdefault(t, set()).add(g)
        for t, (g, stmt) in first.items():
            dg, dstmt = self.defs.get(t, (None, None))
            if dg is None or g == dg or not isinstance(dstmt.inst, I.AllocRegister):
                continue
            inner = [u for u in groups[t] if u != dg]
            if any(u.elected for u in inner) or len(inner) != len(groups[t]):
                continue  # used by the creating group itself, or by one elected thread
            if not all(
                dg.begin <= u.begin and u.begin + u.size <= dg.begin + dg.size for u in inner
            ):
                continue
            self.defs[t] = (g, dstmt)
            self.reowned[t] = (g, stmt)

    def check_derived(self):
        """Every derivation holds for the final layouts (else a conversion would be needed)."""
        p = self.plan
        for t, s, fn, stmt, how in self.derived:
            lt, ls = p.registers.get(t), p.registers.get(s)
            if lt is None or ls is None:
                continue
            if how in CONVERTIBLE or how == "transposed broadcast":
                ok = True  # converts when the layouts differ; or a view's check follows
            elif how == "broadcast":
                ok = broadcast_map(ls, lt, ls.num_threads) is not None
            else:
                ok = fn(ls) == lt
            if not ok:
                given = [
                    f"the layout of %{x.name} was given at {at(self.user_reg[x].loc)}"
                    for x in (t, s)
                    if x in self.user_reg
                ]
                raise err(
                    stmt,
                    f"{how}: tile %{t.name} has a register layout ({lt.kind}) that does not "
                    f"match %{s.name} ({ls.kind}); converting register layouts is not supported "
                    "yet" + (f" ({'; '.join(given)})" if given else ""),
                )

    # --- assignment --------------------------------------------------------------------------
    def assign(self):
        """Give every class of register tiles a layout and check the uses."""
        p = self.plan
        self.join_operands()
        self.resolve_anchors()
        self.reown()
        classes: dict = {}
        for t in self.defs:
            classes.setdefault(self.uf.find(t), []).append(t)
        layouts = self.class_layouts(classes)
        for r, members in classes.items():
            t0 = members[0]
            g, stmt = self.defs[t0]
            anchor = self.anchor.get(r)
            layout = layouts[r]
            if anchor is not None:
                g = self.defs[t0][0]
                for t in members:
                    dg = self.defs[t][0]
                    if dg.size != layout.num_threads:
                        raise err(
                            self.defs[t][1],
                            f"tile %{t.name} is created in a group of {dg.size} threads but "
                            f"its layout ({layout.kind}) spans {layout.num_threads}"
                            + (
                                f" (the layout {'given' if anchor[2] else 'needed'} at "
                                f"{at(anchor[1].loc)})"
                            ),
                        )
            for t in members:
                dg, dstmt = self.defs[t]
                if not layout.replicated and dg != g:
                    raise err(
                        dstmt,
                        f"tile %{t.name} is created in a different thread group than the tiles "
                        "it is computed with",
                    )
                msg = tile_registers_error(t, layout, dg.size)
                if msg:
                    raise err(dstmt, msg)
                p.registers[t] = layout
                p.owner[t] = dg
        for t in self.perms:
            base, dims = self.base(t)
            if base in p.registers:
                p.registers[t] = permute(p.registers[base], dims)
                p.owner[t] = p.owner[base]
        self.check_derived()
        for t, g, stmt in self.uses:
            layout = p.registers.get(t)
            if layout is None:
                raise err(stmt, f"tile %{t.name} is used before it is defined")
            if not layout.replicated and (g.begin, g.size) != (p.owner[t].begin, p.owner[t].size):
                if t in self.reowned:
                    first_g, first_stmt = self.reowned[t]
                    raise err(
                        stmt,
                        f"tile %{t.name} is used by two thread groups: threads "
                        f"[{first_g.begin}, {first_g.begin + first_g.size}) at line "
                        f"{_line(first_stmt)} and [{g.begin}, {g.begin + g.size}) here at line "
                        f"{_line(stmt)}; a register tile belongs to the one group that uses it "
                        "(create one tile per group)",
                    )
                raise err(
                    stmt,
                    f"tile %{t.name} is spread over threads [{p.owner[t].begin}, "
                    f"{p.owner[t].begin + p.owner[t].size}) but used by the group "
                    f"[{g.begin}, {g.begin + g.size})",
                )


def _line(stmt) -> str:
    return str(stmt.loc.line) if stmt is not None and stmt.loc is not None else "?"


def tile_registers_error(t: TensorVar, layout: RegisterLayout, num_threads: int) -> str | None:
    """Why register tile ``t`` in ``layout`` over ``num_threads`` threads cannot be held in
    registers without spilling (None when it can)."""
    nbits = t.dtype.nbits
    if nbits % 8:  # sub-byte tiles are packed 32-bit words
        regs = -(-layout.local_size * nbits // 32)
    elif nbits == 16:  # ptxas keeps two halves in a register
        regs = -(-layout.local_size // 2)
    else:  # a register an element (8-bit ones too: ptxas seldom packs bytes)
        regs = layout.local_size * max(1, nbits // 32)
    if regs <= MAX_TILE_REGISTERS:
        return None
    return tile_registers_message(
        t,
        regs,
        num_threads,
        f"at most {MAX_TILE_REGISTERS} fit without spilling",
        f"layout {layout.kind}",
    )


def infer_layouts(fn: Function) -> LayoutPlan:
    """Choose the layout of every tile of ``fn``; raise TilusCompileError where none fits."""
    return _Inference(fn).run()
