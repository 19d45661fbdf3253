"""Register tiles: declarations, element access, elementwise instructions, scalar element reads."""

# Register loops have constant trip counts and are fully unrolled (or emitted straight-line), so
# every register index is a constant and ptxas keeps tiles in registers (no LDL/STL). Dynamic
# indices into small replicated tiles become select chains (reads) and guarded writes.

from __future__ import annotations

from tilus.backends.cuda.codegen.half import F16_OPS, PAIR_OPS
from tilus.backends.cuda.codegen.loops import LOOP_MIN, fitted_expr, local_coord_exprs
from tilus.backends.cuda.codegen.scalar import HALF, const, ctype, from_float, minmax, to_float
from tilus.backends.cuda.ptx.registry import Fragment
from tilus.backends.cuda.tables import CODEGEN_RULES
from tilus.dtypes import uint32
from tilus.ir import inst as I
from tilus.ir.cscalar import convert as cconvert
from tilus.ir.cscalar import wrap
from tilus.ir.expr import Const
from tilus.ir.layout.derived import broadcast_map
from tilus.ir.tensor import TensorVar

rule = CODEGEN_RULES.rule

UNARY_F32 = {
    "exp": "expf", "exp2": "exp2f", "log": "logf", "log2": "log2f", "sqrt": "sqrtf",
    "rsqrt": "rsqrtf", "sin": "sinf", "cos": "cosf", "tanh": "tanhf", "round": "rintf",
    "floor": "floorf", "ceil": "ceilf", "tan": "tanf", "asin": "asinf", "acos": "acosf",
    "atan": "atanf", "sinh": "sinhf", "cosh": "coshf", "asinh": "asinhf", "acosh": "acoshf",
    "atanh": "atanhf", "trunc": "truncf",
}  # fmt: skip
BINARY_FUNCS = {"max": "tl_max", "min": "tl_min"}


def _approx(name: str, ptx: str) -> Fragment:
    text = (
        f"__device__ __forceinline__ float {name}(float x) {{\n"
        f'  float r; asm("{ptx}.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x)); return r;\n'
        "}\n"
    )
    return Fragment(name, "ldst", text)


#: exp2/log2 of float32 (and 16-bit floats, computed in float) as the hardware's MUFU.EX2 and
#: MUFU.LG2 (PTX ISA ex2/lg2 .approx: about 2 ulp; subnormals flushed); a kernel that uses
#: them gets the helper in its prelude.
FAST_F32 = {
    "exp2": ("tl_ex2", _approx("tl_ex2", "ex2")),
    "log2": ("tl_lg2", _approx("tl_lg2", "lg2")),
}


def layout_of(ctx, t: TensorVar):
    """The register layout of a tile (raises if it has none)."""
    try:
        return ctx.plan.registers[t]
    except KeyError:
        raise ctx.error(f"register tile %{t.name} has no layout") from None


def row_len(layout) -> int:
    """Registers per row of the declared C array (wgmma accumulators: one row per m64 tile)."""
    if layout.kind == "wgmma_acc":
        return layout.local_size // layout.locals[0].extent
    return layout.local_size


def declare(ctx, t: TensorVar):
    """Declare the per-thread array of a register tile (once: ``out=`` tiles are reused)."""
    if id(t) in ctx.declared:
        return
    ctx.declared.add(id(t))
    ctx.decl_scope[id(t)] = tuple(ctx.blocks)
    layout = layout_of(ctx, t)
    n, rl = layout.local_size, row_len(layout)
    if t.dtype.nbits % 8:  # sub-byte: the thread's elements packed into words (lowbit.py)
        n, rl, ct = -(-n * t.dtype.nbits // 32), 1, "uint32_t"
    else:
        ct = ctype(t.dtype)
    g = ctx.plan.owner.get(t)
    where = f"threads [{g.begin}, {g.begin + g.size})" if g is not None else "the group"
    spread = "every thread holds it whole" if layout.replicated else f"over {where}"
    ctx.emit(f"// %{t.name} {list(t.shape)}: {layout.kind} layout, {n} per thread, {spread}")
    if layout.kind == "wgmma_acc" and t.dtype.nbits % 8 == 0:  # packed words stay flat
        ctx.emit(f"{ct} {ctx.name(t)}[{n // rl}][{rl}];")
    else:
        ctx.emit(f"{ct} {ctx.name(t)}[{n}];")


def elem(ctx, t: TensorVar, i) -> str:
    """The C lvalue of register ``i`` of tile ``t`` (``i`` an int, or a loop variable name)."""
    layout = layout_of(ctx, t)
    rl = row_len(layout)
    if layout.kind == "wgmma_acc":
        if isinstance(i, str):
            return f"{ctx.name(t)}[{i} / {rl}][{i} % {rl}]"
        return f"{ctx.name(t)}[{i // rl}][{i % rl}]"
    return f"{ctx.name(t)}[{i}]"


def unrolled(ctx, n: int):
    """Open a fully unrolled loop over ``n`` registers; returns the index variable name.

    The trip count is a constant, so ptxas unrolls it and every register index is constant.
    """
    i = ctx.fresh("i")
    ctx.emit("#pragma unroll")
    ctx.open(f"for (int {i} = 0; {i} < {n}; ++{i})")
    return i


def thread_coords(ctx, layout, group, tid: str | None = None) -> list[str]:
    """Per-dim C expressions of the calling thread's (or thread ``tid``'s) coordinate
    contribution."""
    tid = ctx.tid(group) if tid is None else tid
    out = [[] for _ in layout.shape]
    inner = 1
    facs = []
    for f in reversed(layout.threads):
        facs.append((f, inner))
        inner *= f.extent
    for f, below in facs:
        if f.dim < 0 or f.extent == 1:
            continue
        d = tid if below == 1 else f"({tid} / {below})"
        if below * f.extent < inner:
            d = f"({d} % {f.extent})"
        out[f.dim].append(d if f.stride == 1 else f"{d} * {f.stride}")
    return [" + ".join(x) if x else "0" for x in out]


def emit_thread_coords(ctx, layout, group) -> list[str]:
    """Emit ``const int`` temporaries for the thread's coordinates; return their names."""
    names = []
    for code in thread_coords(ctx, layout, group):
        if code == "0":
            names.append("0")
        else:
            n = ctx.fresh("c")
            ctx.emit(f"const int {n} = {code};")
            names.append(n)
    return names


def coord(base: str, k) -> str:
    """``base + k`` tidied (``k`` an int or a C expression)."""
    if isinstance(k, str):
        if k == "0":
            return base
        return f"({k})" if base == "0" else f"{base} + ({k})"
    if base == "0":
        return str(k)
    return base if k == 0 else f"{base} + {k}"


def linear_index(t: TensorVar, indices) -> int | None:
    """Row-major index of constant ``indices``, or None when one is dynamic."""
    lin = 0
    for x, n in zip(indices, t.shape):
        if not isinstance(x, Const):
            return None
        lin = lin * n + int(x.value)
    return lin


def element_read(ctx, e, expr) -> str:
    """Code reading ``t[indices]`` of a replicated tile (or an mbarrier's address)."""
    t = e.tensor
    if t in ctx.plan.barriers:
        off = ctx.smem.barrier_offsets[t]
        (i,) = e.indices
        if isinstance(i, Const):  # a constant index folds into the offset (uint32 arithmetic)
            return f"(tl_smem + {wrap(off + 8 * cconvert(i.value, uint32), uint32)}u)"
        return f"(tl_smem + {off}u + 8u * (uint32_t)({expr(i)}))"
    layout = layout_of(ctx, t)
    if not layout.replicated:
        v = ctx.broadcasts.get(e)
        if v is None:
            raise ctx.error("internal: an element broadcast was not hoisted before its statement")
        return v
    reg = register_of(layout, t)
    lin = linear_index(t, e.indices)
    if lin is not None:
        return elem(ctx, t, reg[lin])
    idx = _dyn_index(t, e.indices, expr)
    code = elem(ctx, t, reg[t.size - 1])
    for k in reversed(range(t.size - 1)):
        code = f"({idx} == {k} ? {elem(ctx, t, reg[k])} : {code})"
    return code


def _owner_conds(ctx, layout, t, idx) -> list[str]:
    """Per register of ``layout``: the C condition that it holds element ``idx`` (C names)."""
    base = emit_thread_coords(ctx, layout, ctx.plan.owner.get(t, ctx.group))
    out = []
    for i in range(layout.local_size):
        conds = [
            f"{coord(b, k)} == {n}"
            for b, k, n, size in zip(base, layout.local_coords(i), idx, t.shape)
            if size > 1
        ]
        out.append(" && ".join(conds) or "true")
    return out


def broadcast_element(ctx, e, expr) -> str:
    """``t[indices]`` of a tile spread over threads: the threads holding the element write it
    to the group's shared scratch word, the group waits, and every thread reads it (the group
    also waits before writing: earlier readers of the scratch are done)."""
    t = e.tensor
    layout = layout_of(ctx, t)
    off = ctx.plan.scratch.get(e)
    if off is None:
        raise ctx.error("internal: no shared scratch was planned for this element read")
    idx = []
    for x in e.indices:
        n = ctx.fresh("ix")
        ctx.emit(f"const int {n} = {expr(x)};")
        idx.append(n)
    ct = ctype(t.dtype)
    buf, v = ctx.fresh("bc"), ctx.fresh("v")
    ctx.emit(f"{ct}* const {buf} = ({ct}*)(tl_smem_ptr + {ctx.reduce_base + off}u);")
    sync = CODEGEN_RULES.lookup(I.Sync)
    sync(ctx, None, None)
    for i, cond in enumerate(_owner_conds(ctx, layout, t, idx)):
        ctx.emit(f"if ({cond}) {buf}[0] = {elem(ctx, t, i)};")
    sync(ctx, None, None)
    ctx.emit(f"const {ct} {v} = {buf}[0];")
    return v


def register_of(layout, t: TensorVar) -> list[int]:
    """For a tile every thread holds whole: the register of each row-major element."""
    where = {layout.local_coords(j): j for j in range(layout.local_size)}
    out = []
    for k in range(t.size):
        c, rest = [], k
        for n in reversed(t.shape):
            c.append(rest % n)
            rest //= n
        out.append(where[tuple(reversed(c))])
    return out


def _dyn_index(t, indices, expr) -> str:
    parts = []
    stride = 1
    for x, n in reversed(list(zip(indices, t.shape))):
        parts.append(f"({expr(x)}) * {stride}" if stride != 1 else f"({expr(x)})")
        stride *= n
    return "(" + " + ".join(reversed(parts)) + ")"


@rule(I.StoreElement)
def store_element(ctx, inst, expr):
    """``t[i] = v``: on a replicated tile a direct (or, for a dynamic index, guarded) write; on
    a tile spread over threads every thread writes the registers it holds the element in."""
    t = inst.out
    layout = layout_of(ctx, t)
    v = ctx.fresh("v")
    ctx.emit(f"const {ctype(t.dtype)} {v} = {expr(inst.value)};")
    if not layout.replicated:
        idx = []
        for x in inst.indices:
            n = ctx.fresh("ix")
            ctx.emit(f"const int {n} = {expr(x)};")
            idx.append(n)
        for i, cond in enumerate(_owner_conds(ctx, layout, t, idx)):
            ctx.emit(f"if ({cond}) {elem(ctx, t, i)} = {v};")
        return
    reg = register_of(layout, t)
    lin = linear_index(t, inst.indices)
    if lin is not None:
        ctx.emit(f"{elem(ctx, t, reg[lin])} = {v};")
        return
    idx = ctx.fresh("i")
    ctx.emit(f"const int {idx} = {_dyn_index(t, inst.indices, expr)};")
    for k in range(t.size):
        ctx.emit(f"if ({idx} == {k}) {elem(ctx, t, reg[k])} = {v};")


@rule(I.AllocRegister)
def alloc_register(ctx, inst, expr):
    """Declare a tile and fill it with ``init`` (a scalar, or an expression of the axes)."""
    t = inst.out
    declare(ctx, t)
    if inst.init is None:
        return
    layout = layout_of(ctx, t)
    if not inst.axes:
        v = ctx.fresh("v")
        ctx.emit(f"const {ctype(t.dtype)} {v} = {expr(inst.init)};")
        i = unrolled(ctx, layout.local_size)
        ctx.emit(f"{elem(ctx, t, i)} = {v};")
        ctx.close()
        return
    base = emit_thread_coords(ctx, layout, ctx.plan.owner[t])
    if layout.local_size >= LOOP_MIN:  # one loop body, the axes from the register index
        i = unrolled(ctx, layout.local_size)
        for ax, b, k in zip(inst.axes, base, local_coord_exprs(layout, i)):
            ctx.emit(f"const int {ctx.name(ax)} = {coord(b, k)};")
        ctx.emit(f"{elem(ctx, t, i)} = {expr(inst.init)};")
        ctx.close()
        return
    for i in range(layout.local_size):
        lc = layout.local_coords(i)
        ctx.open("")
        for ax, b, k in zip(inst.axes, base, lc):
            ctx.emit(f"const int {ctx.name(ax)} = {coord(b, k)};")
        ctx.emit(f"{elem(ctx, t, i)} = {expr(inst.init)};")
        ctx.close()


def check_same(ctx, out, *srcs):
    """The layout of ``out``; raises unless every tile of ``srcs`` has it too."""
    lo = layout_of(ctx, out)
    for s in srcs:
        if isinstance(s, TensorVar) and layout_of(ctx, s) != lo:
            raise ctx.error(f"tiles %{out.name} and %{s.name} have different layouts")
    return lo


def _maps(ctx, out, ops):
    """Per operand: None (same layout as ``out``: register i is register i) or, for a
    broadcast operand, the list of its registers read for each register of ``out``."""
    lo = layout_of(ctx, out)
    maps = []
    for x in ops:
        if not isinstance(x, TensorVar) or layout_of(ctx, x) == lo:
            maps.append(None)
            continue
        m = broadcast_map(lo, layout_of(ctx, x), lo.num_threads)
        if m is None:
            raise ctx.error(
                f"%{x.name} ({layout_of(ctx, x).kind}) is not laid out like %{out.name} "
                f"({lo.kind}) with its broadcast dims collapsed"
            )
        maps.append(m)
    return lo, maps


def _each(ctx, layout, maps):
    """Loop over the registers: a constant-trip loop (returns the index variable and, per
    operand, None or its register index expression) when no operand is broadcast or every
    broadcast map has a closed form (big tiles), else None and the caller emits once per
    register (straight-line code)."""
    if all(m is None for m in maps):
        return unrolled(ctx, layout.local_size), [None] * len(maps)
    if layout.local_size < LOOP_MIN:
        return None, None
    i = ctx.fresh("i")
    exprs = [None if m is None else fitted_expr(m, i) for m in maps]
    if any(e is None and m is not None for e, m in zip(exprs, maps)):
        return None, None
    ctx.emit("#pragma unroll")
    ctx.open(f"for (int {i} = 0; {i} < {layout.local_size}; ++{i})")
    return i, exprs


def _at(ctx, x, i, m, pre):
    if not isinstance(x, TensorVar):
        return pre[id(x)]
    return elem(ctx, x, i if m is None else m[i])


def _at_loop(ctx, x, i, e, pre):
    if not isinstance(x, TensorVar):
        return pre[id(x)]
    return elem(ctx, x, i if e is None else f"({e})")


@rule(I.AssignTensor)
def assign(ctx, inst, expr):
    """Copy a tile into another of the same layout."""
    layout = check_same(ctx, inst.out, inst.src)
    n = layout.local_size
    if inst.out.dtype.nbits % 8:  # sub-byte: the same packed words
        n = max(1, -(-n * inst.out.dtype.nbits // 32))
        i = unrolled(ctx, n)
        ctx.emit(f"{ctx.name(inst.out)}[{i}] = {ctx.name(inst.src)}[{i}];")
        ctx.close()
        return
    i = unrolled(ctx, n)
    ctx.emit(f"{elem(ctx, inst.out, i)} = {elem(ctx, inst.src, i)};")
    ctx.close()


def _scalar_operands(ctx, ops, expr, op: str = ""):
    pre = {}
    for x in ops:
        if not isinstance(x, TensorVar):
            v = ctx.fresh("s")
            value = _bank_constant(ctx, x) if op in BITWISE else None
            ctx.emit(f"const {ctype(x.dtype)} {v} = {value or expr(x)};")
            pre[id(x)] = v
    return pre


#: Bitwise ops whose 32-bit literal operands are read from constant memory: ptxas folds an
#: expression's two literals (a mask and a key) into one LOP3 and rematerializes one of them
#: in a register before every use (an IMAD.MOV each, in unrolled dequantization loops), while
#: a constant-bank value is loaded once and kept (as the backend's own ``tl_i4k`` is).
BITWISE = ("&", "|", "^")


def _bank_constant(ctx, x) -> str | None:
    """``x`` read from a ``__constant__`` word when it is a 32-bit integer literal other than
    0 and ~0 (which fold away), else None."""
    if not (isinstance(x, Const) and x.dtype.kind in ("int", "uint") and x.dtype.nbits == 32):
        return None
    v = int(x.value) & 0xFFFFFFFF
    if v in (0, 0xFFFFFFFF):
        return None
    name = f"tl_kc_{v:08x}"
    frag = Fragment(name, "consts", f"__constant__ uint32_t {name} = {v:#010x}u;\n")
    if frag not in ctx.fragments:
        ctx.fragments.append(frag)
    return f"({ctype(x.dtype)}){name}"


def _declare_unless_same(ctx, out, ops):
    if not any(x is out for x in ops):
        declare(ctx, out)


@rule(I.ElementwiseBinary)
def binary(ctx, inst, expr):
    """Elementwise ``a op b`` (16-bit float ``* + -`` two at a time as f16x2/bf16x2
    instructions, the other 16-bit float ops computed in float and rounded: the same bits
    either way)."""
    out, a, b = inst.out, inst.a, inst.b
    ops = (a, b)
    layout, maps = _maps(ctx, out, ops)
    pre = _scalar_operands(ctx, ops, expr, inst.op)
    _declare_unless_same(ctx, out, ops)
    pair = PAIR_OPS.get((out.dtype.name, inst.op))
    if pair and all(v.dtype == out.dtype for v in ops) and layout.local_size >= 2:
        _binary_pairs(ctx, pair, layout, out, ops, maps, pre)
        return
    i, exprs = _each(ctx, layout, maps)
    if i is None:
        for k in range(layout.local_size):
            _binary_one(ctx, inst, k, *(_at(ctx, x, k, m, pre) for x, m in zip(ops, maps)))
        return
    _binary_one(ctx, inst, i, *(_at_loop(ctx, x, i, e, pre) for x, e in zip(ops, exprs)))
    ctx.close()


def _binary_pairs(ctx, pair, layout, out, ops, maps, pre):
    """A 16-bit float ``* + -`` two registers at a time (registers 2p and 2p + 1; an odd last
    one as a pair with itself): a loop over the pairs when every operand's registers have a
    closed form, else straight-line."""
    name, frag = pair
    if frag not in ctx.fragments:
        ctx.fragments.append(frag)
    n = layout.local_size

    def emit(i0, i1, reads):
        args = ", ".join(a for r in reads for a in r)
        ctx.emit(f"{name}({elem(ctx, out, i0)}, {elem(ctx, out, i1)}, {args});")

    p = ctx.fresh("p")
    lo, hi = f"2 * {p}", f"2 * {p} + 1"
    exprs = [None if m is None else (fitted_expr(m, lo), fitted_expr(m, hi)) for m in maps]
    if n >= 4 and all(e is None or None not in e for e in exprs):
        ctx.emit("#pragma unroll")
        ctx.open(f"for (int {p} = 0; {p} < {n // 2}; ++{p})")
        reads = []
        for x, e in zip(ops, exprs):
            if not isinstance(x, TensorVar):
                reads.append((pre[id(x)], pre[id(x)]))
            elif e is None:
                reads.append((elem(ctx, x, f"({lo})"), elem(ctx, x, f"({hi})")))
            else:
                reads.append((elem(ctx, x, f"({e[0]})"), elem(ctx, x, f"({e[1]})")))
        emit(f"({lo})", f"({hi})", reads)
        ctx.close()
        start = n - n % 2
    else:
        start = 0
    for k in range(start, n, 2):
        k1 = min(k + 1, n - 1)
        reads = [(_at(ctx, x, k, m, pre), _at(ctx, x, k1, m, pre)) for x, m in zip(ops, maps)]
        if k1 == k:  # the odd last register: computed twice into a scratch half
            t = ctx.fresh("h")
            ctx.emit(f"uint16_t {t};")
            args = ", ".join(a for r in reads for a in r)
            ctx.emit(f"{name}({elem(ctx, out, k)}, {t}, {args});")
        else:
            emit(k, k1, reads)


def _binary_one(ctx, inst, i, x, y):
    out, a = inst.out, inst.a
    odt = a.dtype if isinstance(a, TensorVar) else inst.b.dtype
    half = odt.name in HALF
    same = all(v.dtype.name == "float16" for v in (a, inst.b, out))
    if same and inst.op in F16_OPS:
        name, frag = F16_OPS[inst.op]
        if frag not in ctx.fragments:
            ctx.fragments.append(frag)
        ctx.emit(f"{elem(ctx, out, i)} = {name}({x}, {y});")
        return
    if half:
        x, y = to_float(x, odt), to_float(y, odt)
    if inst.op in BINARY_FUNCS:
        code = minmax(inst.op, "float" if half else ctype(odt), x, y)
    elif inst.op == "%" and odt.is_float():
        code = f"fmodf({x}, {y})"
    else:
        code = f"({x} {inst.op} {y})"
    if half and out.dtype.kind != "bool":
        code = from_float(code, odt)
    ctx.emit(f"{elem(ctx, out, i)} = {code};")


@rule(I.ElementwiseUnary)
def unary(ctx, inst, expr):
    """Elementwise ``f(a)``."""
    out, a = inst.out, inst.a
    layout = check_same(ctx, out, a)
    _declare_unless_same(ctx, out, (a,))
    dt = a.dtype
    half = dt.name in HALF
    i = unrolled(ctx, layout.local_size)
    x = elem(ctx, a, i)
    if half:
        x = to_float(x, dt)
    op = inst.op
    if op == "neg":
        code = f"(-{x})"
    elif op == "not":
        code = f"(!{x})"
    elif op == "bitnot":
        code = f"(~{x})"
    elif op == "abs":
        code = f"tl_abs<{'float' if half else ctype(dt)}>({x})"
    elif op == "square":
        code = f"({x} * {x})"
    elif op in ("isnan", "isinf") and dt.is_float():
        code = f"{op}({x})"
    elif op in FAST_F32 and dt.name in ("float32", *HALF):
        name, frag = FAST_F32[op]
        if frag not in ctx.fragments:
            ctx.fragments.append(frag)
        code = f"{name}({x})"
    elif op in UNARY_F32 and (dt.is_float()):
        fname = UNARY_F32[op] if dt.name != "float64" else UNARY_F32[op][:-1]
        code = f"{fname}({x})"
    elif op in ("round", "floor", "ceil"):
        code = x
    else:
        raise ctx.error(f"unary {op} on {dt} is not supported by the CUDA backend")
    if half and op not in ("not", "isnan", "isinf"):
        code = from_float(code, dt)
    ctx.emit(f"{elem(ctx, out, i)} = {code};")
    ctx.close()


@rule(I.Where)
def where(ctx, inst, expr):
    """Elementwise ``cond ? x : y``."""
    out = inst.out
    ops = (inst.cond, inst.x, inst.y)
    layout, maps = _maps(ctx, out, ops)
    pre = _scalar_operands(ctx, ops, expr)
    _declare_unless_same(ctx, out, ops)
    i, exprs = _each(ctx, layout, maps)
    if i is None:
        for k in range(layout.local_size):
            c, x, y = (_at(ctx, o, k, m, pre) for o, m in zip(ops, maps))
            ctx.emit(f"{elem(ctx, out, k)} = {c} ? {x} : {y};")
        return
    c, x, y = (_at_loop(ctx, o, i, e, pre) for o, e in zip(ops, exprs))
    ctx.emit(f"{elem(ctx, out, i)} = {c} ? {x} : {y};")
    ctx.close()


def zero(dtype) -> str:
    """The literal zero of ``dtype``."""
    return const(0, dtype)
