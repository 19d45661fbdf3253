"""Shared and global memory: views, slices, and elementwise loads/stores with bounds checks."""

from __future__ import annotations

import math
import sys

from tilus.backends.cuda.codegen import ldmatrix, lowbit_rules
from tilus.backends.cuda.codegen import registers as R
from tilus.backends.cuda.codegen import vector as V
from tilus.backends.cuda.codegen.half import split_word
from tilus.backends.cuda.codegen.loops import LOOP_MIN, local_coord_exprs
from tilus.backends.cuda.codegen.scalar import ctype
from tilus.backends.cuda.ptx.ldst import GUARDED_SUFFIX
from tilus.backends.cuda.tables import CODEGEN_RULES
from tilus.dtypes import uint32
from tilus.ir import inst as I
from tilus.ir.cscalar import convert as cconvert
from tilus.ir.cscalar import wrap
from tilus.ir.expr import Const, Expr
from tilus.ir.tensor import TensorVar

rule = CODEGEN_RULES.rule


@rule(I.GlobalView)
def global_view(ctx, inst, expr):
    """``T* g = ptr;`` and the view's shape and strides as C expressions."""
    t = inst.out
    shape = [expr(s) if isinstance(s, Expr) else str(s) for s in t.shape]
    if inst.strides is not None:
        strides = [f"(int64_t)({expr(s)})" for s in inst.strides]
    else:
        strides, acc = [], "1"
        for s in reversed(shape):
            strides.append(acc)
            a, b = V.static_int(acc), V.static_int(s)
            if a is not None and b is not None:  # a literal: the vector paths read it
                acc = str(a * b)
            else:
                acc = s if acc == "1" else f"{acc} * (int64_t)({s})"
        strides = [x if x == "1" else f"(int64_t)({x})" for x in reversed(strides)]
    ctx.gview_info[t] = (ctx.name(t), shape, strides)
    if any(
        inst.ptr is p for p in ctx.fn.params
    ):  # a pointer argument: its launch-checked alignment
        ctx.aligned_bases[ctx.name(t)] = ctx.fn.pointer_align
    ct = "uint8_t" if t.dtype.nbits % 8 else ctype(t.dtype)  # sub-byte: the packed bytes
    ctx.emit(f"{ct}* const {ctx.name(t)} = ({ct}*)({expr(inst.ptr)});")


def shared_offset(ctx, t: TensorVar) -> str:
    """The byte offset (from the aligned shared base) of a shared tile or view, as C code."""
    if t in ctx.smem.offsets:
        return f"{ctx.smem.offsets[t]}u"
    if t in ctx.shared_names:
        return ctx.shared_names[t]
    raise ctx.error(f"shared tile %{t.name} is used outside the scope it was made in")


def shared_slice(ctx, inst, expr):
    """A view of a shared tile: ``const uint32_t v = base + index * stride;``."""
    view = ctx.plan.shared[inst.out]
    strides = view.layout.strides_bytes()
    base, terms, align = ctx.smem.offsets[view.root], "", 0
    for i, x in enumerate(view.index):
        if isinstance(x, Const):  # fold constant indices into the base (uint32 arithmetic)
            base = wrap(base + cconvert(x.value, uint32) * strides[i], uint32)
        else:
            terms += f" + (uint32_t)({expr(x)}) * {strides[i]}u"
            align = math.gcd(align, strides[i])
    code = f"{base}u{terms}"
    name = ctx.name(inst.out)
    ctx.shared_names[inst.out] = name
    ctx.shared_align[inst.out] = _pow2(math.gcd(align, base))
    ctx.emit(f"const uint32_t {name} = {code};")


def shared_alias(ctx, inst, what: str):
    """A view of a shared tile at the same bytes (a transpose, a reshape within whole rows):
    ``const uint32_t v = <the source's offset>;``."""
    name = ctx.name(inst.out)
    ctx.shared_names[inst.out] = name
    ctx.shared_align[inst.out] = offset_align(ctx, inst.src)
    ctx.emit(f"const uint32_t {name} = {shared_offset(ctx, inst.src)};  // {what}")


def _pow2(n: int) -> int:
    """The largest power of two dividing ``n`` (a large one for 0)."""
    return n & -n if n else 1 << 30


def offset_align(ctx, t: TensorVar) -> int:
    """A power of two that divides the byte offset of shared tile or view ``t`` (1 if none is
    known)."""
    if t in ctx.smem.offsets:
        return _pow2(ctx.smem.offsets[t])
    return ctx.shared_align.get(t, 1)


def swizzled(ctx, w: int, t: TensorVar, off: str, lin: str) -> str:
    """The swizzled byte offset ``tl_swz<w>(off + lin)`` of element offset ``lin`` in shared
    tile ``t`` (at ``off``). The swizzle XORs bits 7 and up into bits 4-6, a pattern that
    repeats every ``8 w`` bytes; when ``off`` is a whole number of repeats (a ring slot chosen
    at run time: its index times the slot's size) it is written ``off + tl_swz<w>(lin)``,
    whose swizzle depends on the lane and constants only, so ptxas computes it once outside
    the loop instead of two ALU instructions an access in it."""
    if w and offset_align(ctx, t) % (8 * w) == 0:
        return f"tl_swz<{w}>({lin})" if off == "0u" else f"{off} + tl_swz<{w}>({lin})"
    return f"tl_swz<{w}>({off} + {lin})"


def _tile_base(ctx, layout, offsets, expr):
    base = R.emit_thread_coords(ctx, layout, ctx.group)
    offs = []
    for o in offsets:
        n = ctx.fresh("o")
        ctx.emit(f"const int {n} = {expr(o)};")
        offs.append(n)
    return base, offs


def _global_index(offs, base, dims, lc):
    """Per global dim: the C index expression of one element."""
    idx = list(offs)
    for k, d in enumerate(dims):
        c = R.coord(base[k], lc[k])
        idx[d] = f"{offs[d]} + {c}" if c != "0" else offs[d]
    return idx


def _in_bounds(idx, shape) -> str:
    conds = [f"(uint32_t)({idx[d]}) < (uint32_t)({shape[d]})" for d in range(len(shape))]
    return " && ".join(conds)


def _address(idx, strides) -> str:
    parts = []
    for i, s in zip(idx, strides):
        parts.append(f"(int64_t)({i})" if s == "1" else f"(int64_t)({i}) * {s}")
    return " + ".join(parts) or "0"  # a 0-d view: its one element


@rule(I.LoadGlobal)
def load_global(ctx, inst, expr):
    """Each thread loads its registers; out-of-bounds elements read zero."""
    out, g = inst.out, inst.src
    if out.dtype.nbits % 8:
        return lowbit_rules.load_global(ctx, inst, expr, sys.modules[__name__])
    layout = R.layout_of(ctx, out)
    R.declare(ctx, out)
    name, shape, strides = ctx.gview_info[g]
    ctx.open("")
    base, offs = _tile_base(ctx, layout, inst.offsets, expr)
    hint = V.cache_hint(ctx, inst.cache)

    def scalar(i):
        idx = _global_index(offs, base, inst.dims, _local(layout, i))
        ok = _in_bounds(idx, shape) or "true"
        ctx.emit(
            f"{R.elem(ctx, out, i)} = ({ok}) ? {name}[{_address(idx, strides)}] : "
            f"{R.zero(out.dtype)};"
        )

    # kernels with redirected stores (wgmma in flight) load element by element: the vector
    # path's branch or its selects (a zeroed word a register) would add registers there
    w = 0 if ctx.smem.redirect_stores else V.vector_width(ctx, out, layout, inst.dims, strides,
                                                          len(shape))  # fmt: skip
    if not w:
        if not inst.dims:
            for i in range(layout.local_size):
                scalar(i)
        else:
            _load_by_rows(ctx, inst, layout, (name, shape, strides), base, offs)
        ctx.close()
        return
    al = V.base_alignment(ctx, name, strides, inst.offsets[-1], w)

    def runs(path):
        if layout.local_size >= LOOP_MIN:  # one loop over the runs (see codegen.loops)
            i = _runs(ctx, layout, w)
            idx = _global_index(offs, base, inst.dims, _local(layout, i))
            ok = _in_bounds(idx[:-1], shape[:-1]) or "true"
            ptr = f"{name} + {_address(idx, strides)}"
            V.load_run(ctx, out, i, w, ptr, ok, idx[-1], shape[-1], scalar, al, path, hint)
            ctx.close()
            return
        for i in range(0, layout.local_size, w):
            idx = _global_index(offs, base, inst.dims, layout.local_coords(i))
            ok = _in_bounds(idx[:-1], shape[:-1]) or "true"  # the row; the run's columns below
            ptr = f"{name} + {_address(idx, strides)}"
            V.load_run(ctx, out, i, w, ptr, ok, idx[-1], shape[-1], scalar, al, path, hint)

    nbytes = w * out.dtype.nbits // 8
    V.by_alignment(ctx, al, nbytes, V.whole_runs(al, shape[-1], w), runs)
    ctx.close()


def _load_by_rows(ctx, inst, layout, view, base, offs) -> None:
    """A load element by element: each distinct row addressed and checked once, the columns
    at constant offsets from the thread's first one, their checks dropped where the layout
    keeps them inside a view of static width (a wgmma accumulator's 64 x 256 fp32 tile
    otherwise holds a 64-bit address and a predicate per element, and spills)."""
    out, (name, shape, strides) = inst.out, view
    last, tdim = inst.dims[-1], len(inst.dims) - 1
    rows_of = [d for d in range(len(shape)) if d != last]
    ct = ctype(out.dtype)
    col0 = _first_column(ctx, inst, base, offs)
    inside = _static_columns(inst, layout, shape)
    rows: dict = {}
    for i in range(layout.local_size):
        lc = layout.local_coords(i)
        idx = _global_index(offs, base, inst.dims, lc)
        p, rok = _row(ctx, rows, idx, rows_of, (name, shape, strides), f"const {ct}")
        k = lc[tdim]
        oks = [rok] if rok != "true" else []
        if not inside(k):
            oks.append(f"(uint32_t)({col0} + {k}) < (uint32_t)({shape[last]})")
        step = "" if strides[last] == "1" else f" * {strides[last]}"
        a = f"{p}[(int64_t)({col0}){step} + {k}{step}]" if k else f"{p}[(int64_t)({col0}){step}]"
        v = f"({' && '.join(oks)}) ? {a} : {R.zero(out.dtype)}" if oks else a
        ctx.emit(f"{R.elem(ctx, out, i)} = {v};")


def _row(ctx, memo: dict, idx, rows_of, view, ptr_type: str):
    """``(row pointer, row in bounds)`` of the element at ``idx``, emitted once per distinct
    row (``memo``: row index expressions -> the pair)."""
    name, shape, strides = view
    key = tuple(idx[d] for d in rows_of)
    if key not in memo:
        p, ok = ctx.fresh("row"), ctx.fresh("rok")
        parts = [_address([idx[d]], [strides[d]]) for d in rows_of]
        ctx.emit(f"{ptr_type}* const {p} = {' + '.join([name, *parts])};")
        conds = [f"(uint32_t)({idx[d]}) < (uint32_t)({shape[d]})" for d in rows_of]
        ctx.emit(f"const bool {ok} = {' && '.join(conds) or 'true'};")
        memo[key] = (p, ok)
    return memo[key]


def _first_column(ctx, inst, base, offs) -> str:
    """Emit the thread's first column in the view's last dim (the tile's columns are at
    constant offsets from it); returns its name."""
    col0, c = ctx.fresh("cb"), base[len(inst.dims) - 1]
    o = offs[inst.dims[-1]]
    ctx.emit(f"const int {col0} = {o} + {c};" if c != "0" else f"const int {col0} = {o};")
    return col0


def _static_columns(inst, layout, shape):
    """``f(k)``: whether every thread's column ``k`` past its first lies inside the view (a
    static width, a constant offset: the layout's reach decides; then no check is needed)."""
    last, tdim = inst.dims[-1], len(inst.dims) - 1
    off = inst.offsets[last]
    width = int(shape[last]) if str(shape[last]).isdigit() else None
    if width is None or not isinstance(off, Const) or not isinstance(off.value, int):
        return lambda k: False
    reach = sum((f.extent - 1) * f.stride for f in layout.threads if f.dim == tdim)
    return lambda k: 0 <= off.value and off.value + reach + k < width


def _local(layout, i):
    """Register ``i``'s coordinate contribution: ints, or C expressions for a C index."""
    return layout.local_coords(i) if isinstance(i, int) else local_coord_exprs(layout, i)


def _runs(ctx, layout, w: int) -> str:
    """Open a loop over the ``w``-register runs of a tile; returns the run's first register."""
    r = R.unrolled(ctx, layout.local_size // w)
    i = ctx.fresh("i")
    ctx.emit(f"const int {i} = {r} * {w};")
    return i


def _register_pairs(t, layout) -> bool:
    """Whether registers 2i and 2i + 1 of each thread hold adjacent 16-bit elements of a row of
    tile ``t`` (the innermost register digit runs along the last dim with stride 1)."""
    inner = layout.locals[-1]
    return (
        t.dtype.nbits == 16
        and inner.dim == t.ndim - 1
        and inner.extent % 2 == 0
        and inner.stride == 1
    )


def _word_pairs(ctx, inst, layout, view) -> bool:
    """Whether a store in a kernel with redirected stores (wgmma in flight) moves registers
    2i and 2i + 1 as one 8-byte store: 32-bit elements adjacent in a row (a wgmma
    accumulator's pairs) at 8-byte aligned addresses, the view's base alignment known (a
    workspace tensor, or a launch-checked pointer) and its row strides and the column
    offset even."""
    src, (name, _, strides) = inst.src, view
    inner = layout.locals[-1]
    if not ctx.smem.redirect_stores or src.dtype.nbits != 32 or strides[inst.dims[-1]] != "1":
        return False
    if inner.dim != src.ndim - 1 or inner.stride != 1 or inner.extent % 2:
        return False
    if inst.dims[-1] != len(strides) - 1:
        return False
    steps = [f for f in (*layout.threads, *layout.locals[:-1]) if f.dim == src.ndim - 1]
    if any(f.stride % 2 for f in steps):
        return False
    al = V.base_alignment(ctx, name, strides, inst.offsets[-1], 2)
    return V.known_aligned(ctx, al, 8)


@rule(I.StoreGlobal)
def store_global(ctx, inst, expr):
    """Each thread stores its registers; out-of-bounds elements are skipped. Two adjacent
    16-bit elements are stored as one 32-bit word when in bounds and aligned.

    The bounds checks are not branches: the store is predicated or, in a kernel that keeps
    wgmma groups in flight (its plan redirects stores), always made, to a global sink word when
    out of bounds (why: see ``ptx.ldst``)."""
    src, g = inst.src, inst.dst
    if src.dtype.nbits % 8:
        return lowbit_rules.store_global(ctx, inst, expr, sys.modules[__name__])
    layout = R.layout_of(ctx, src)
    name, shape, strides = ctx.gview_info[g]
    pairs = _register_pairs(src, layout) and strides[inst.dims[-1]] == "1"
    ctx.open("")
    base, offs = _tile_base(ctx, layout, inst.offsets, expr)
    hint = V.cache_hint(ctx, inst.cache)
    last = inst.dims[-1]
    rows_of = [d for d in range(len(shape)) if d != last]
    ct = ctype(src.dtype)
    row_memo: dict = {}  # row index expressions -> (row pointer, row in bounds)
    col_memo: dict = {}  # column expression -> (column in bounds, column + 1 in bounds)

    def row(idx):
        # each distinct row is addressed and bounds-checked once (keeps the epilogue's register
        # pressure down: a wgmma accumulator has 2 rows per m64 tile and many columns)
        return _row(ctx, row_memo, idx, rows_of, (name, shape, strides), ct)

    def col(c):
        if c not in col_memo:
            ok0, ok1 = ctx.fresh("cok"), ctx.fresh("cok")
            ctx.emit(f"const bool {ok0} = (uint32_t)({c}) < (uint32_t)({shape[last]});")
            if pairs:
                ctx.emit(f"const bool {ok1} = (uint32_t)({c}) + 1u < (uint32_t)({shape[last]});")
            col_memo[c] = (ok0, ok1)
        return col_memo[c]

    w = V.vector_width(ctx, src, layout, inst.dims, strides, len(shape))
    if w:
        al = V.base_alignment(ctx, name, strides, inst.offsets[-1], w)
        if not V.branch_free(ctx, al, shape[last], w, w * src.dtype.nbits // 8):
            w = 0
    if w:

        def runs(path):
            row_memo.clear()  # a row pointer declared on one path is not in scope on the other
            if layout.local_size >= LOOP_MIN:  # one loop over the runs (see codegen.loops)
                _store_loop(
                    ctx, inst, layout, (name, shape, strides), base, offs, w, al, path, hint
                )
                return

            def scalar(i):
                idx = _global_index(offs, base, inst.dims, layout.local_coords(i))
                p, rok = row(idx)  # memoized before the run's branch, so in scope here
                cok = f"(uint32_t)({idx[last]}) < (uint32_t)({shape[last]})"
                a = f"{p} + {_address([idx[last]], [strides[last]])}"
                args = f"{a}, {R.elem(ctx, src, i)}, {rok} && {cok}"
                _guarded(ctx, f"_{GUARDED_SUFFIX[ct]}", args)

            for i in range(0, layout.local_size, w):
                idx = _global_index(offs, base, inst.dims, layout.local_coords(i))
                p, rok = row(idx)
                a = f"{p} + {_address([idx[last]], [strides[last]])}"
                V.store_run(ctx, src, i, w, a, rok, idx[last], shape[last], scalar, al, path, hint)

        nbytes = w * src.dtype.nbits // 8
        V.by_alignment(ctx, al, nbytes, V.whole_runs(al, shape[last], w), runs)
        ctx.close()
        return
    inside = _static_columns(inst, layout, shape)
    col0 = _first_column(ctx, inst, base, offs)
    step = "" if strides[last] == "1" else f" * {strides[last]}"
    words = _word_pairs(ctx, inst, layout, (name, shape, strides))
    for i in range(0, layout.local_size, 2 if pairs or words else 1):
        lc = layout.local_coords(i)
        idx = _global_index(offs, base, inst.dims, lc)
        p, rok = row(idx)
        if inside(lc[-1] + (1 if pairs or words else 0)):  # the columns need no check
            cok0 = cok1 = "true"
        else:
            cok0, cok1 = col(idx[last])
        k = lc[-1]  # a constant offset from the thread's first column: an immediate
        a = f"{p} + (int64_t)({col0}){step}" + (f" + {k}{step}" if k else "")
        v0 = R.elem(ctx, src, i)
        if words:  # two adjacent 32-bit elements: one 8-byte store where both are inside
            v1 = R.elem(ctx, src, i + 1)
            w0, w1 = V.words(src, [i, i + 1], ctx)
            if cok1 == "true":
                ctx.emit(f"tl_st_global_or_v2_b32({a}, {w0}, {w1}, {rok});")
                continue
            _guarded(ctx, f"_{GUARDED_SUFFIX[ct]}", f"{a}, {v0}, {rok} && {cok0}")
            _guarded(ctx, f"_{GUARDED_SUFFIX[ct]}", f"{a} + 1, {v1}, {rok} && {cok1}")
            continue
        if not pairs:
            _guarded(ctx, f"_{GUARDED_SUFFIX[ct]}", f"{a}, {v0}, {rok} && {cok0}")
            continue
        v1 = R.elem(ctx, src, i + 1)
        pa, lo, hi, both = (ctx.fresh(x) for x in ("a", "lo", "hi", "both"))
        ctx.emit(f"{ct}* const {pa} = {a};")
        ctx.emit(f"const bool {lo} = {rok} && {cok0}, {hi} = {rok} && {cok1};")
        ctx.emit(f"const bool {both} = {lo} && {hi} && (((uint64_t){pa}) & 3) == 0;")
        w = f"(uint32_t){v0} | ((uint32_t){v1} << 16)"
        _guarded(ctx, "_pair", f"{pa}, {w}, {both}, {lo} && !{both}, {hi} && !{both}")
    ctx.close()


def _store_loop(ctx, inst, layout, view, base, offs, w, al, path, hint) -> None:
    """A store's runs as one loop (see ``codegen.loops``) on ``path`` (``vector.by_alignment``)."""
    src, (name, shape, strides) = inst.src, view
    last = inst.dims[-1]
    rows_of = [d for d in range(len(shape)) if d != last]
    ct = ctype(src.dtype)
    i = _runs(ctx, layout, w)
    idx = _global_index(offs, base, inst.dims, _local(layout, i))
    parts = [_address([idx[d]], [strides[d]]) for d in rows_of]
    p, rok = ctx.fresh("row"), ctx.fresh("rok")
    ctx.emit(f"{ct}* const {p} = {' + '.join([name, *parts])};")
    conds = [f"(uint32_t)({idx[d]}) < (uint32_t)({shape[d]})" for d in rows_of]
    ctx.emit(f"const bool {rok} = {' && '.join(conds) or 'true'};")

    def scalar_in_row(k):
        c = _global_index(offs, base, inst.dims, _local(layout, k))[last]
        cok = f"(uint32_t)({c}) < (uint32_t)({shape[last]})"
        a = f"{p} + {_address([c], [strides[last]])}"
        _guarded(ctx, f"_{GUARDED_SUFFIX[ct]}", f"{a}, {R.elem(ctx, src, k)}, {rok} && {cok}")

    a = f"{p} + {_address([idx[last]], [strides[last]])}"
    V.store_run(ctx, src, i, w, a, rok, idx[last], shape[last], scalar_in_row, al, path, hint)
    ctx.close()


def _guarded(ctx, kind: str, args: str) -> None:
    """``tl_st_global_if_<kind>`` (predicated) or ``tl_st_global_or_<kind>`` (to the global
    sink word when out of bounds)."""
    ctx.emit(f"tl_st_global_{'or' if ctx.smem.redirect_stores else 'if'}{kind}({args});")


def _shared_elem(view, coords) -> str:
    """The byte offset expression (pre-swizzle linear part) of view coords in the root tile."""
    if view.perm is not None:
        c = [None] * len(coords)
        for k, p in enumerate(view.perm):
            c[p] = coords[k]
        coords = c
    layout = view.layout
    strides = layout.strides_bytes()[len(view.index) :]
    if layout.col_blocks == 1:
        terms = [f"({x}) * {s}" if s != 1 else f"({x})" for x, s in zip(coords, strides)]
        return " + ".join(terms) or "0"  # a 0-d view: its one element
    # column blocks (see SharedLayout): the leaf's rows are stacked per block of columns
    lead = [f"({x}) * {s}" for x, s in zip(coords[:-2], strides[:-2])]
    r, c, cb = coords[-2], coords[-1], layout.block_cols
    leaf = (
        f"(({c}) / {cb}) * {layout.block_bytes} + ({r}) * {layout.swizzle}"
        f" + (({c}) % {cb}) * {layout.elem_bytes}"
    )
    return " + ".join([*lead, leaf])


def _shared_access(ctx, inst, tile, reg, load: bool):
    view = ctx.plan.shared[tile]
    layout = R.layout_of(ctx, reg)
    ct = ctype(reg.dtype)
    w = view.layout.swizzle
    off = shared_offset(ctx, tile)
    # Two 16-bit elements adjacent in a thread's registers and in the tile's rows move as one
    # 32-bit word: half the instructions, and a wgmma accumulator's pairs stay packed. (A
    # swizzle permutes 16-byte chunks, so an even-aligned pair stays contiguous.)
    pairs = (
        _register_pairs(reg, layout)
        and view.perm is None
        and view.layout.shape[-1] % 2 == 0  # every row starts 4-byte aligned
        and all(  # and every pair starts at an even column
            f.stride % 2 == 0
            for f in (*layout.threads, *layout.locals[:-1])
            if f.dim == reg.ndim - 1
        )
    )
    vw = _shared_vector_width(reg, layout, view)
    ctx.open("")
    base = R.emit_thread_coords(ctx, layout, ctx.group)
    if vw:
        _shared_vectors(ctx, reg, layout, view, base, off, vw, load, tile)
        ctx.close()
        return
    for i in range(0, layout.local_size, 2 if pairs else 1):
        lc = layout.local_coords(i)
        coords = [R.coord(b, k) for b, k in zip(base, lc)]
        lin = _shared_elem(view, coords)
        addr = f"tl_smem_ptr + {swizzled(ctx, w, tile, off, lin)}"
        if pairs:
            v0, v1 = R.elem(ctx, reg, i), R.elem(ctx, reg, i + 1)
            if load:
                word = ctx.fresh("w")
                ctx.emit(f"const uint32_t {word} = *((const uint32_t*)({addr}));")
                split_word(ctx, word, v0, v1)
            else:
                ctx.emit(f"*((uint32_t*)({addr})) = (uint32_t){v0} | ((uint32_t){v1} << 16);")
        elif load:
            ctx.emit(f"{R.elem(ctx, reg, i)} = *(({ct}*)({addr}));")
        else:
            ctx.emit(f"*(({ct}*)({addr})) = {R.elem(ctx, reg, i)};")
    ctx.close()


def _shared_vector_width(reg, layout, view) -> int:
    """Elements per 8- or 16-byte shared access of ``reg`` (0: none): a run of registers
    along the tile's rows that starts aligned in every thread (a swizzle permutes whole
    16-byte chunks, so an aligned run stays contiguous)."""
    sl = view.layout
    if view.perm is not None or sl.modes is not None or sl.xor is not None:
        return 0
    if reg.dtype.nbits not in (16, 32) or reg.dtype.kind == "bool" or not reg.ndim:
        return 0
    inner = layout.locals[-1]
    if inner.dim != reg.ndim - 1 or inner.stride != 1:
        return 0
    esize = reg.dtype.nbits // 8
    w = 16 // esize  # the largest power of two dividing the run (no 5- or 6-element access)
    while w and inner.extent % w:
        w //= 2
    if w * esize < 8:
        return 0
    others = [f for f in (*layout.threads, *layout.locals[:-1]) if f.dim == reg.ndim - 1]
    if any(f.stride % w for f in others) or (sl.col_blocks > 1 and sl.block_cols % w):
        return 0
    if any(st % (w * esize) for st in sl.strides_bytes()[:-1]):
        return 0
    return w


def _shared_vectors(ctx, reg, layout, view, base, off, w: int, load: bool, tile) -> None:
    """Move ``reg`` to or from shared memory ``w`` registers (8 or 16 bytes) at a time."""
    nwords = w * reg.dtype.nbits // 32
    wt = V.word_type(nwords)
    for i in range(0, layout.local_size, w):
        coords = [R.coord(b, k) for b, k in zip(base, layout.local_coords(i))]
        lin = _shared_elem(view, coords)
        addr = f"tl_smem_ptr + {swizzled(ctx, view.layout.swizzle, tile, off, lin)}"
        if load:
            v = ctx.fresh("vw")
            ctx.emit(f"const {wt} {v} = *((const {wt}*)({addr}));")
            V.unpack(ctx, reg, i, nwords, v)
        else:
            ctx.emit(
                f"*(({wt}*)({addr})) = make_{wt}({', '.join(V.words(reg, range(i, i + w), ctx))});"
            )


@rule(I.LoadShared)
def load_shared(ctx, inst, expr):
    """Copy a whole shared tile into registers (through the tile's swizzle); into mma.sync
    operand fragments with ldmatrix where the tile's rows allow it."""
    R.declare(ctx, inst.out)
    view = ctx.plan.shared[inst.src]
    plan = ldmatrix.plan_for(R.layout_of(ctx, inst.out), inst.out.dtype.nbits)
    g = ctx.group
    if plan is not None and ldmatrix.view_fits(view) and g.begin % 32 == 0 and g.size % 32 == 0:
        off = shared_offset(ctx, inst.src)
        ldmatrix.emit_load(
            ctx,
            plan,
            view,
            off,
            inst.out,
            lambda c: _shared_elem(view, c),
            lambda o, lin: swizzled(ctx, view.layout.swizzle, inst.src, o, lin),
        )
        return
    _shared_access(ctx, inst, inst.src, inst.out, True)


def store_whole_shared(ctx, inst):
    """Copy a register tile into a whole shared tile (the rule: ``shared_sub.store_shared``)."""
    # A tile every thread holds whole is written by each of them with the same values.
    _shared_access(ctx, inst, inst.dst, inst.src, False)
