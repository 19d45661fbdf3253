"""Atomics (``atom``/``red``) and scatter stores: one access per register of the value tile."""

from __future__ import annotations

import math

from tilus.backends.cuda.codegen.memory import _address, _shared_elem, shared_offset, swizzled
from tilus.backends.cuda.codegen.registers import declare, elem, emit_thread_coords, layout_of
from tilus.backends.cuda.codegen.scalar import ctype
from tilus.backends.cuda.layout.reads import result_used
from tilus.backends.cuda.ptx import atomics as A
from tilus.backends.cuda.tables import CODEGEN_RULES
from tilus.backends.cuda.workspace import ALIGN, workspace_layout
from tilus.ir import inst_memory as M
from tilus.ir.enums import TensorKind
from tilus.ir.tensor import TensorVar

rule = CODEGEN_RULES.rule


def _primary(ctx, layout) -> str:
    """C condition true in one thread per element: the replica digits of the thread are 0."""
    tid = ctx.tid(ctx.group)
    conds, below = [], 1
    for f in reversed(layout.threads):
        if f.dim < 0 and f.extent > 1:
            conds.append(f"(({tid} / {below}) % {f.extent}) == 0")
        below *= f.extent
    return " && ".join(conds)


def _element_addresses(ctx, inst, values, indices, dim):
    """Per register of ``values``: (C address, C in-bounds condition). Emits temporaries."""
    dst = inst.dst
    layout = layout_of(ctx, values)
    for t in (indices, getattr(inst, "compare", None), getattr(inst, "out", None)):
        if t is not None and layout_of(ctx, t) != layout:
            raise ctx.error(f"tiles %{values.name} and %{t.name} have different layouts")
    base = (
        emit_thread_coords(ctx, layout, ctx.group)
        if ctx.group.size > 1
        else ["0"] * len(values.shape)
    )
    pbase = None
    if dst.kind == TensorKind.GLOBAL:
        name, shape, strides = ctx.gview_info[dst]
        if indices is None and all(str(s).isdigit() for s in strides):
            # one pointer to the thread's first element, the registers at constant offsets
            # from it: per element a 64-bit address each (spilled 64 x 256 fp32 tiles) becomes
            # an immediate offset of the access
            pbase = ctx.fresh("pa")
            ctx.emit(f"{ctype(dst.dtype)}* const {pbase} = {name} + {_address(base, strides)};")
    else:
        view = ctx.plan.shared[dst]
        shape = [str(n) for n in dst.shape]
        off = shared_offset(ctx, dst)
    out = []
    for i in range(layout.local_size):
        lc = layout.local_coords(i)
        coords = [c if b == "0" else (f"{b} + {c}" if c else b) for b, c in zip(base, lc)]
        coords = [str(c) for c in coords]
        conds = []
        if indices is not None:
            j = ctx.fresh("j")
            ctx.emit(f"const int64_t {j} = (int64_t)({elem(ctx, indices, i)});")
            coords[dim] = j
            conds.append(f"{j} >= 0 && {j} < (int64_t)({shape[dim]})")
        for d, c in enumerate(coords):
            if d != dim or indices is None:
                if not (isinstance(dst.shape[d], int) and dst.shape[d] == values.shape[d]):
                    conds.append(f"(uint32_t)({c}) < (uint32_t)({shape[d]})")
        if pbase is not None:
            const = sum(int(c) * int(st) for c, st in zip(lc, strides))
            addr = f"(void*)({pbase} + {const})" if const else f"(void*)({pbase})"
        elif dst.kind == TensorKind.GLOBAL:
            addr = f"(void*)({name} + {_address(coords, strides)})"
        else:
            lin = _shared_elem(view, coords)
            addr = f"tl_smem + {swizzled(ctx, view.layout.swizzle, dst, off, lin)}"
        out.append((addr, " && ".join(conds)))
    return layout, out


def _negate(code: str, dtype) -> str:
    if dtype.name in ("float16", "bfloat16"):
        return f"(uint16_t)({code} ^ 0x8000u)"
    return f"({ctype(dtype)})(-({code}))"


@rule(M.Atomic)
def atomic(ctx, inst, expr):
    """``atom`` per element (its old value into ``out``), or ``red`` when nothing reads the
    result and the ordering allows (``red`` has no acquire); one thread per replica."""
    dst, v = inst.dst, inst.values
    ret = (
        result_used(ctx.fn, inst)
        or inst.sem in ("acquire", "acq_rel")
        or inst.op in ("exch", "cas")
    )
    op = "add" if inst.op == "sub" else inst.op
    frag = A.atom(dst.kind, op, dst.dtype.name, inst.sem, inst.scope, ret)
    if frag not in ctx.fragments:
        ctx.fragments.append(frag)
    declare(ctx, inst.out)
    ctx.open("")
    layout, addrs = _element_addresses(ctx, inst, v, inst.indices, inst.dim)
    prim = _primary(ctx, layout)
    g = ctx.group
    in_warp = g.size <= 32 and g.begin % 32 + g.size <= 32
    if ret and prim and not in_warp:
        raise ctx.error(
            f"the result of this atomic is used, but %{v.name} is replicated over the warps of "
            f"the group (each element is updated by one of its copies only); use a tile with "
            f"at least one element per thread, a single warp, or leave the result unused"
        )
    ct = ctype(dst.dtype)
    pairs = _packed_pairs(ctx, inst, layout) if not (ret and prim) else set()
    for i, (addr, ok) in enumerate(addrs):
        if i in pairs:
            _packed_add(ctx, inst, i, addrs, prim, ret)
            continue
        if i - 1 in pairs:
            continue
        b = elem(ctx, v, i)
        if inst.op == "sub":
            b = _negate(b, dst.dtype)
        args = f"{addr}, {elem(ctx, inst.compare, i)}, {b}" if inst.op == "cas" else f"{addr}, {b}"
        call = f"{frag.name}({args})"
        cond = " && ".join(x for x in (prim, ok) if x)
        if ret and prim:  # one copy updates; the warp shares its old value with the others
            r = ctx.fresh("r")
            ctx.emit(f"{ct} {r} = 0;")
            ctx.emit(f"if ({cond}) {r} = {call};")
            ctx.emit(f"{elem(ctx, inst.out, i)} = {_shfl(ctx, layout, r, dst.dtype)};")
            continue
        stmt = f"{elem(ctx, inst.out, i)} = {call};" if ret else f"{call};"
        ctx.emit(f"if ({cond}) {stmt}" if cond else stmt)
    ctx.close()


def _packed_pairs(ctx, inst, layout) -> set:
    """Registers ``i`` whose element and that of ``i + 1`` are neighbours along a contiguous
    last dim of an f16/bf16 ``dst``: one ``.f16x2``/``.bf16x2`` add updates both."""
    dst = inst.dst
    if inst.op not in ("add", "sub") or inst.indices is not None:
        return set()
    if dst.dtype.name not in ("float16", "bfloat16"):
        return set()
    if dst.kind == TensorKind.GLOBAL:
        if ctx.gview_info[dst][2][-1] != "1":
            return set()
    elif ctx.plan.shared[dst].perm is not None:
        return set()
    out, i, n = set(), 0, layout.local_size
    while i + 1 < n:
        a, b = layout.local_coords(i), layout.local_coords(i + 1)
        if a[:-1] == b[:-1] and b[-1] == a[-1] + 1:
            out.add(i)
            i += 2
        else:
            i += 1
    return out


def _packed_add(ctx, inst, i, addrs, prim, ret):
    """Registers ``i`` and ``i + 1`` by one paired add when both are in bounds and the pair
    is 4-byte aligned (checked at run time: views may start anywhere), else one by one."""
    dst, v = inst.dst, inst.values
    frag = A.atom_pair(dst.kind, dst.dtype.name, inst.sem, inst.scope, ret)
    one = A.atom(dst.kind, "add", dst.dtype.name, inst.sem, inst.scope, ret)
    for f in (frag, one):
        if f not in ctx.fragments:
            ctx.fragments.append(f)
    (a0, ok0), (a1, ok1) = addrs[i], addrs[i + 1]
    vals = [elem(ctx, v, i), elem(ctx, v, i + 1)]
    if inst.op == "sub":
        vals = [_negate(x, dst.dtype) for x in vals]
    cast = "(uint32_t)" if dst.kind == TensorKind.SHARED else "(uint64_t)"
    both = " && ".join(x for x in (prim, ok0, ok1, f"({cast}({a0}) & 3) == 0") if x)
    packed = f"(uint32_t)({vals[0]}) | ((uint32_t)({vals[1]}) << 16)"
    ctx.open(f"if ({both})")
    if ret:
        r = ctx.fresh("r")
        ctx.emit(f"const uint32_t {r} = {frag.name}({a0}, {packed});")
        ctx.emit(f"{elem(ctx, inst.out, i)} = (uint16_t)({r} & 0xffffu);")
        ctx.emit(f"{elem(ctx, inst.out, i + 1)} = (uint16_t)({r} >> 16);")
    else:
        ctx.emit(f"{frag.name}({a0}, {packed});")
    ctx.close()
    ctx.open("else")
    for k, (addr, ok) in enumerate(((a0, ok0), (a1, ok1))):
        call = f"{one.name}({addr}, {vals[k]})"
        stmt = f"{elem(ctx, inst.out, i + k)} = {call};" if ret else f"{call};"
        cond = " && ".join(x for x in (prim, ok) if x)
        ctx.emit(f"if ({cond}) {stmt}" if cond else stmt)
    ctx.close()


def _shfl(ctx, layout, r: str, dtype) -> str:
    """``r`` of the thread's primary copy (replica digits 0), by a shuffle within the warp."""
    g = ctx.group
    tid = ctx.tid(g)
    rep, below = [], 1
    for f in reversed(layout.threads):
        if f.dim < 0 and f.extent > 1:
            rep.append(f"(({tid} / {below}) % {f.extent}) * {below}")
        below *= f.extent
    lane = f"(({g.begin % 32} + {tid} - {' - '.join(rep)}) & 31)"
    mask = "0xffffffffu" if g.size == 32 else f"{((1 << g.size) - 1) << (g.begin % 32):#x}u"
    ct = ctype(dtype)
    if ct in ("float", "double"):
        return f"__shfl_sync({mask}, {r}, {lane})"
    wide = "long long" if dtype.nbits == 64 else "unsigned"
    return f"({ct})__shfl_sync({mask}, ({wide}){r}, {lane})"


@rule(M.ScatterStore)
def scatter_store(ctx, inst, expr):
    """A plain store per element at its scattered position (one thread per replica)."""
    dst, v = inst.dst, inst.values
    ctx.open("")
    layout, addrs = _element_addresses(ctx, inst, v, inst.indices, inst.dim)
    prim = _primary(ctx, layout)
    ct = ctype(dst.dtype)
    for i, (addr, ok) in enumerate(addrs):
        if dst.kind == TensorKind.GLOBAL:
            store = f"*(({ct}*){addr}) = {elem(ctx, v, i)};"
        else:
            store = f"*(({ct}*)(tl_smem_ptr + ({addr} - tl_smem))) = {elem(ctx, v, i)};"
        cond = " && ".join(x for x in (prim, ok) if x)
        ctx.emit(f"if ({cond}) {store}" if cond else store)
    ctx.close()


@rule(M.LockSemaphore)
def lock_semaphore(ctx, inst, expr):
    """Spin with acquire loads until the value is there."""
    if A.SEMAPHORES not in ctx.fragments:
        ctx.fragments.append(A.SEMAPHORES)
    ctx.emit(
        f"tl_sem_wait_eq((const int*)({_sem_addr(ctx, inst, expr)}), (int)({expr(inst.value)}));"
    )


@rule(M.ReleaseSemaphore)
def release_semaphore(ctx, inst, expr):
    """A gpu-scope fence, then the release store."""
    if A.SEMAPHORES not in ctx.fragments:
        ctx.fragments.append(A.SEMAPHORES)
    ctx.emit(f"tl_sem_store((int*)({_sem_addr(ctx, inst, expr)}), (int)({expr(inst.value)}));")


def _sem_addr(ctx, inst, expr) -> str:
    """The semaphore's address: the pointer, or the one element of a global tile."""
    if isinstance(inst.sem, TensorVar):
        return ctx.gview_info[inst.sem][0]
    return expr(inst.sem)


@rule(M.GlobalTensorAlloc)
def global_tensor(ctx, inst, expr):
    """A row-major view at the tensor's offset in the launch workspace."""
    t = inst.out
    off = workspace_layout(ctx.fn)[0][inst]
    ct = ctype(t.dtype)
    shape = [str(n) for n in t.shape]
    strides = [str(math.prod(t.shape[d + 1 :])) for d in range(t.ndim)]
    ctx.gview_info[t] = (ctx.name(t), shape, strides)
    ctx.aligned_bases[ctx.name(t)] = math.gcd(off, ALIGN)  # the workspace starts aligned
    ctx.emit(f"{ct}* const {ctx.name(t)} = ({ct}*)(tl_workspace + {off});")
