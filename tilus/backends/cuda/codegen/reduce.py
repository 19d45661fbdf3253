"""Reductions of register tiles (in registers, warp shuffles, shared memory) and reshapes."""

# A reduction over dim d runs in up to three stages, read off the source layout:
#   1. within a thread: the registers whose digits differ only along d (a pairwise tree);
#   2. across lanes: each thread digit along d that lies inside a warp (a power of two) is a
#      butterfly of __shfl_xor_sync, after which every lane holds the combined value;
#   3. across warps: the thread digits along d above the lanes write their partial results to
#      a shared scratch area (slot per digit value); with up to 32 slots (a power of two) lane
#      l of every warp reads slot l and a butterfly combines them, else every thread combines
#      the slots in slot order. Either way every thread that holds an output element combines
#      the same values the same way, so the replicas of the result (see
#      ``tilus.ir.layout.derived``) are equal.

from __future__ import annotations

import math

from tilus.backends.cuda.codegen import memory
from tilus.backends.cuda.codegen import registers as R
from tilus.backends.cuda.codegen.convert import row_major, through_shared
from tilus.backends.cuda.codegen.half import HALF_ADD, HALF_FMA, PAIR_OPS
from tilus.backends.cuda.codegen.loops import LOOP_MIN, fitted_expr
from tilus.backends.cuda.codegen.scalar import HALF, ctype, from_float, minmax, to_float
from tilus.backends.cuda.layout.reduction import thread_stages
from tilus.backends.cuda.layout.reshape import moves_in_place, register_permutation
from tilus.backends.cuda.tables import CODEGEN_RULES
from tilus.ir import inst as I
from tilus.ir.enums import TensorKind
from tilus.ir.layout.derived import reduce_layout

rule = CODEGEN_RULES.rule


def reduce_parity(begin: int, size: int) -> str:
    """The C name of the 0/1 choice between thread group ``(begin, size)``'s two reduction
    scratch areas (flipped by each reduction across warps)."""
    return f"tl_rpar_{begin}_{size}"


#: Identity-free combine of two accumulators, by op (``T`` the accumulator's C type).
COMBINE = {
    "sum": "({a} + {b})",
    "max": "tl_max<{T}>({a}, {b})",  # float: tl_fmax (see combine)
    "min": "tl_min<{T}>({a}, {b})",
    "any": "({a} | {b})",
    "all": "({a} & {b})",
}


class HalfAcc(str):
    """The C type of a 16-bit float accumulator (its bits, ``uint16_t``); ``fn`` is the C
    function that adds two of them rounded (one f16/bf16 instruction)."""

    def __new__(cls, fn: str):
        obj = super().__new__(cls, "uint16_t")
        obj.fn = fn
        return obj


def combine(op: str, a: str, b: str, T: str) -> str:
    """C code combining accumulators ``a`` and ``b`` of C type ``T`` by ``op``."""
    if isinstance(T, HalfAcc):
        return f"{T.fn}({a}, (uint16_t)({b}))"
    if op in ("max", "min"):
        return minmax(op, T, a, b)
    return COMBINE[op].format(a=a, b=b, T=T)


def acc_type(op: str, dtype) -> str:
    """The C type partial results are combined in (16-bit floats in float, bools as int)."""
    if op in ("any", "all") or dtype.kind == "bool":
        return "int"
    if dtype.name in HALF:
        return "float"
    if op == "sum" and dtype.is_integer() and dtype.nbits < 64:
        return "long long" if dtype.nbits > 32 else "int"
    return ctype(dtype)


def _lane_mask(g) -> str:
    if g.size >= 32:
        return "0xffffffffu"
    return f"{((1 << g.size) - 1) << (g.begin % 32):#010x}u"


def _tree(ctx, codes, op, T) -> str:
    """Pairwise combine of C expressions (emitting temporaries level by level)."""
    while len(codes) > 1:
        nxt = []
        for k in range(0, len(codes) - 1, 2):
            nxt.append(combine(op, codes[k], codes[k + 1], T))
        if len(codes) % 2:
            nxt.append(codes[-1])
        if len(nxt) > 1:
            names = []
            for c in nxt:
                n = ctx.fresh("p")
                ctx.emit(f"const {T} {n} = {c};")
                names.append(n)
            nxt = names
        codes = nxt
    return codes[0]


@rule(I.Reduce)
def reduce_(ctx, inst, expr):
    """``out = op(src, dim)``: in registers, then shuffles, then shared memory across warps."""
    src, out, op, dim = inst.src, inst.out, inst.op, inst.dim
    ls, lo = R.layout_of(ctx, src), R.layout_of(ctx, out)
    if reduce_layout(ls, dim, inst.keepdim) != lo:
        raise ctx.error(f"the layout of %{out.name} is not the reduced layout of %{src.name}")
    g = ctx.group
    T = acc_type(op, src.dtype) if inst.acc is None else _half_acc(ctx, inst.acc)
    masks, slots = thread_stages(ls, dim, g.size)
    R.declare(ctx, out)
    nslots = math.prod(e for e, _ in slots)
    across = f", {nslots} warp slots through shared memory" if slots else ""
    ctx.emit(
        f"// {op} over dim {dim}: {ls.local_size} -> {lo.local_size} per thread, "
        f"{len(masks)} lane shuffles{across}"
    )
    ctx.open("")
    # stage 1: registers of one output element
    where = {lo.local_coords(j): j for j in range(lo.local_size)}
    groups: list[list[int]] = [[] for _ in range(lo.local_size)]
    for i in range(ls.local_size):
        c = list(ls.local_coords(i))
        c[dim] = 0
        if not inst.keepdim:
            del c[dim]
        groups[where[tuple(c)]].append(i)
    acc = ctx.fresh("acc")
    ctx.emit(f"{T} {acc}[{lo.local_size}];")
    fused = ctx.fused_products.get(id(inst))
    if fused is not None:  # sum(a * b): the products fused into the additions
        _, maps = R._maps(ctx, src, fused)
        for j, regs in enumerate(groups):
            ctx.emit(f"{acc}[{j}] = {_fma_chain(ctx, src, fused, maps, regs, T)};")
    elif isinstance(T, HalfAcc):
        for j, regs in enumerate(groups):
            ctx.emit(f"{acc}[{j}] = {_pair_tree(ctx, src, regs, T)};")
    elif not _in_thread_loop(ctx, src, groups, acc, op, T):
        for j, regs in enumerate(groups):
            codes = [f"({T})({to_float(R.elem(ctx, src, i), src.dtype)})" for i in regs]
            ctx.emit(f"{acc}[{j}] = {_tree(ctx, codes, op, T)};")
    # stage 2: butterflies within the warp
    if masks:
        mask = _lane_mask(g)
        j = R.unrolled(ctx, lo.local_size)
        for m in masks:
            other = f"__shfl_xor_sync({mask}, {acc}[{j}], {m})"
            ctx.emit(f"{acc}[{j}] = {combine(op, f'{acc}[{j}]', other, T)};")
        ctx.close()
    # stage 3: slots in shared memory across warps
    if slots:
        _cross_warps(ctx, inst, lo, g, slots, masks, acc, T)
    conv = from_float if out.dtype.name in HALF and not isinstance(T, HalfAcc) else None
    loop = lo.local_size >= LOOP_MIN
    for j in [R.unrolled(ctx, lo.local_size)] if loop else range(lo.local_size):
        v = f"{acc}[{j}]"
        if conv is not None:
            v = conv(v, out.dtype)
        elif out.dtype.kind == "bool":
            v = f"({v} != 0)"
        elif T != ctype(out.dtype):
            v = f"({ctype(out.dtype)})({v})"
        ctx.emit(f"{R.elem(ctx, out, j)} = {v};")
    if loop:
        ctx.close()
    ctx.close()


def _half_acc(ctx, dtype) -> HalfAcc:
    """The accumulator of a sum rounded to ``dtype`` at every step (its scalar add's helper
    joins the kernel's prelude)."""
    name = "float16" if dtype.name == "float16" else "bfloat16"
    fn, frag = HALF_ADD[name]
    if frag not in ctx.fragments:
        ctx.fragments.append(frag)
    return HalfAcc(fn)


def _pair_tree(ctx, src, regs, T) -> str:
    """Stage 1 of a 16-bit float sum: the registers ``regs`` of ``src`` added two pairs at a
    time (registers 2i, 2i + 1 as one f16x2 operand) level by level, then the two halves of
    the last pair. Returns the C expression of the sum."""
    codes = [R.elem(ctx, src, i) for i in regs]
    if len(codes) < 4:
        return _tree(ctx, codes, "sum", T)
    name, frag = PAIR_OPS[(src.dtype.name, "+")]
    if frag not in ctx.fragments:
        ctx.fragments.append(frag)
    pairs = [(codes[k], codes[k + 1]) for k in range(0, len(codes) - 1, 2)]
    last = codes[-1] if len(codes) % 2 else None
    while len(pairs) > 1:
        nxt = []
        for k in range(0, len(pairs) - 1, 2):
            lo, hi = ctx.fresh("p"), ctx.fresh("p")
            ctx.emit(f"uint16_t {lo}, {hi};")
            ctx.emit(f"{name}({lo}, {hi}, {', '.join(pairs[k])}, {', '.join(pairs[k + 1])});")
            nxt.append((lo, hi))
        if len(pairs) % 2:
            nxt.append(pairs[-1])
        pairs = nxt
    total = combine("sum", pairs[0][0], pairs[0][1], T)
    return total if last is None else combine("sum", total, last, T)


def _fma_chain(ctx, src, ops, maps, regs, T) -> str:
    """Stage 1 of ``sum(a * b)`` in a 16-bit float (``ops`` = (a, b), read through their
    broadcast ``maps`` onto ``src``'s registers ``regs``): one chain of pair FMAs over
    registers (2i, 2i + 1) (HFMA2: a product and an addition in one instruction, each half
    rounded once), then the two halves, then an odd last product by a scalar FMA."""
    dt = src.dtype.name
    (pair, pfrag), (one, ofrag) = HALF_FMA[dt]
    mul, mfrag = PAIR_OPS[(dt, "*")]
    for f in (pfrag, ofrag, mfrag):
        if f not in ctx.fragments:
            ctx.fragments.append(f)

    def read(k, i):
        m = maps[k]
        return R.elem(ctx, ops[k], i if m is None else m[i])

    if len(regs) == 1:
        return _one_product(ctx, dt, read(0, regs[0]), read(1, regs[0]))
    lo, hi = ctx.fresh("c"), ctx.fresh("c")
    ctx.emit(f"uint16_t {lo}, {hi};")
    for k in range(0, len(regs) - 1, 2):
        i0, i1 = regs[k], regs[k + 1]
        args = f"{read(0, i0)}, {read(0, i1)}, {read(1, i0)}, {read(1, i1)}"
        if k == 0:
            ctx.emit(f"{mul}({lo}, {hi}, {args});")
        else:
            ctx.emit(f"{pair}({lo}, {hi}, {args}, {lo}, {hi});")
    total = combine("sum", lo, hi, T)
    if len(regs) % 2:
        last = regs[-1]
        total = f"{one}({read(0, last)}, {read(1, last)}, {total})"
    return total


def _one_product(ctx, dt, a, b) -> str:
    """One 16-bit float product (rounded): a one-register sum of products."""
    mul, frag = PAIR_OPS[(dt, "*")]
    if frag not in ctx.fragments:
        ctx.fragments.append(frag)
    t = ctx.fresh("c")
    ctx.emit(f"uint16_t {t}, {t}_;")
    ctx.emit(f"{mul}({t}, {t}_, {a}, {a}, {b}, {b});")
    return t


#: Partial accumulators of the in-thread loop: independent chains the SM overlaps.
PARTIALS = 8


def _in_thread_loop(ctx, src, groups, acc, op, T) -> bool:
    """Stage 1 as loops (long rows per thread: see ``codegen.loops``): ``PARTIALS`` partial
    results per output element, each combining every ``PARTIALS``-th register, then a tree.
    Returns False (nothing emitted) when the registers do not have a closed form."""
    n = len(groups[0])
    if n < LOOP_MIN or n % PARTIALS or any(len(g) != n for g in groups):
        return False
    flat = [i for g in groups for i in g]
    j = ctx.fresh("j") if len(groups) > 1 else "0"
    q, r = ctx.fresh("q"), ctx.fresh("r")
    at = fitted_expr(flat, f"{j} * {n} + {r} + {q}" if len(groups) > 1 else f"{r} + {q}")
    if at is None:
        return False

    def read():
        return f"({T})({to_float(R.elem(ctx, src, f'({at})'), src.dtype)})"

    if len(groups) > 1:
        ctx.emit("#pragma unroll")
        ctx.open(f"for (int {j} = 0; {j} < {len(groups)}; ++{j})")
    p = ctx.fresh("part")
    ctx.emit(f"{T} {p}[{PARTIALS}];")
    ctx.emit("#pragma unroll")
    ctx.open(f"for (int {q} = 0; {q} < {PARTIALS}; ++{q})")
    ctx.emit(f"const int {r} = 0;")
    ctx.emit(f"{p}[{q}] = {read()};")
    ctx.close()
    ctx.emit("#pragma unroll")
    ctx.open(f"for (int {r} = {PARTIALS}; {r} < {n}; {r} += {PARTIALS})")
    ctx.emit("#pragma unroll")
    ctx.open(f"for (int {q} = 0; {q} < {PARTIALS}; ++{q})")
    ctx.emit(f"{p}[{q}] = {combine(op, f'{p}[{q}]', read(), T)};")
    ctx.close()
    ctx.close()
    codes = [f"{p}[{k}]" for k in range(PARTIALS)]
    ctx.emit(f"{acc}[{j}] = {_tree(ctx, codes, op, T)};")
    if len(groups) > 1:
        ctx.close()
    return True


def _cross_warps(ctx, inst, lo, g, slots, masks, acc, T):
    out = inst.out
    sync = CODEGEN_RULES.lookup(I.Sync)
    nslots = math.prod(e for e, _ in slots)
    off = ctx.plan.scratch.get(inst)
    if off is None:
        raise ctx.error("internal: no shared scratch was planned for this reduction")
    tid = ctx.tid(g)
    slot, mul = [], 1
    for e, b in reversed(slots):
        slot.append(f"(({tid} / {b}) % {e}) * {mul}" if mul != 1 else f"(({tid} / {b}) % {e})")
        mul *= e
    sname = ctx.fresh("slot")
    ctx.emit(f"const int {sname} = {' + '.join(reversed(slot))};")
    base = R.emit_thread_coords(ctx, lo, g)
    strides = [math.prod(out.shape[k + 1 :]) for k in range(out.ndim)]
    buf = ctx.fresh("red")
    half = ctx.plan.reduce_halves[(g.begin, g.size)]
    par = reduce_parity(g.begin, g.size)
    at = f"tl_smem_ptr + {ctx.reduce_base + off}u + {par} * {half}u"
    ctx.emit(f"{T}* const {buf} = ({T}*)({at});")
    ctx.emit(f"{par} ^= 1u;  // the next reduction uses the other area")
    lin = []
    for j in range(lo.local_size):
        parts = [
            f"({R.coord(b, k)}) * {s}" if s != 1 else f"({R.coord(b, k)})"
            for b, k, s in zip(base, lo.local_coords(j), strides)
        ]
        lin.append(" + ".join(parts) or "0")
    # no barrier first: the last reader of this area read it before the barrier of the
    # reduction in between (through the other area)
    if lane_parallel(g, nslots, masks):
        # each element's slots side by side; the lanes that hold the same output element (they
        # differ only in the reduced dim's lane bits, ``masks``) read one slot each and a
        # butterfly over those bits gives each the same total (each step combines two equal
        # sets commutatively, so all lanes and warps agree): one conflict-free load a warp
        # instead of ``nslots`` loads a thread
        bits = masks[: int(math.log2(nslots))]
        for j in range(lo.local_size):
            ctx.emit(f"{buf}[({lin[j]}) * {nslots} + {sname}] = {acc}[{j}];")
        sync(ctx, None, None)
        lane = ctx.fresh("lane")
        sub = " | ".join(
            f"((({tid} >> {int(math.log2(m))}) & 1) << {k})" for k, m in enumerate(bits)
        )
        ctx.emit(f"const int {lane} = {sub};")
        for j in range(lo.local_size):
            ctx.emit(f"{acc}[{j}] = {buf}[({lin[j]}) * {nslots} + {lane}];")
            for m in bits:
                other = f"__shfl_xor_sync(0xffffffffu, {acc}[{j}], {m})"
                ctx.emit(f"{acc}[{j}] = {combine(inst.op, f'{acc}[{j}]', other, T)};")
        return
    for j in range(lo.local_size):
        ctx.emit(f"{buf}[{sname} * {out.size} + {lin[j]}] = {acc}[{j}];")
    sync(ctx, None, None)
    for j in range(lo.local_size):
        codes = [f"{buf}[{s * out.size} + {lin[j]}]" for s in range(nslots)]
        ctx.emit(f"{acc}[{j}] = {_tree(ctx, codes, inst.op, T)};")


def lane_parallel(g, nslots: int, masks) -> bool:
    """Whether a cross-warp stage reads its slots one a lane and shuffles (whole warps, a
    power-of-two number of slots no more than the lanes that share an output element)
    instead of every thread reading every slot."""
    whole_warps = g.size % 32 == 0 and g.begin % 32 == 0
    pow2 = nslots >= 2 and nslots & (nslots - 1) == 0
    return whole_warps and pow2 and nslots <= 1 << len(masks)


@rule(I.ReshapeTensor)
def reshape(ctx, inst, expr):
    """Add or drop size-1 dims (or reshape a row-major replicated tile): a register copy; a
    shared view reshaped within whole rows: the same bytes."""
    src, out = inst.src, inst.out
    if out.kind == TensorKind.SHARED:
        memory.shared_alias(ctx, inst, f"reshaped view {list(out.shape)}")
        return
    ls, lo = R.layout_of(ctx, src), R.layout_of(ctx, out)
    if not moves_in_place(inst, ls, lo):
        perm = register_permutation(inst, ls, lo)
        if perm is None:  # elements change threads: through shared memory
            through_shared(ctx, inst, src, out, lambda c: row_major(c, out.shape))
            return
        # every element stays in its thread: the registers renamed (no instruction)
        R.declare(ctx, out)
        ctx.emit(f"// %{src.name} -> %{out.name}: the same registers in another order")
        for j, i in enumerate(perm):
            ctx.emit(f"{R.elem(ctx, out, j)} = {R.elem(ctx, src, i)};")
        return
    R.declare(ctx, out)
    i = R.unrolled(ctx, lo.local_size)
    ctx.emit(f"{R.elem(ctx, out, i)} = {R.elem(ctx, src, i)};")
    ctx.close()
