"""Vectorized global loads and stores: 8- or 16-byte accesses with a scalar fallback."""

# A register layout whose innermost register digit runs along the global view's contiguous
# last dim (stride 1) with at least 4 elements puts runs of elements that are adjacent in
# memory in adjacent registers of one thread; with the threads of a warp side by side along
# that dim (a blocked layout), a warp's accesses are coalesced. Each run of up to 16 bytes is
# one ld/st.global.v* when, at run time, the whole run is inside the view and its address is
# aligned to the access size; otherwise the run falls back to the bounds-checked element
# accesses, so ragged tails and odd strides stay correct. The pointer, the row strides and
# the column offset all play in the alignment: when the strides and the column offset are
# known multiples of the run (compile-time strides; offsets that are constants, products
# with one, or parameters under ``assume``), only the view's base pointer is checked, one
# test a kernel that the compiler hoists, instead of one per run.

from __future__ import annotations

import math

from tilus.backends.cuda.codegen import registers as R
from tilus.backends.cuda.codegen.half import split_word
from tilus.backends.cuda.codegen.scalar import ctype
from tilus.backends.cuda.ptx import cache_hint as H
from tilus.ir.expr import Binary, Const, Var

#: A multiple of every run width (an offset of 0 or a huge constant).
_ANY = 1 << 20


def cache_hint(ctx, cache):
    """``hint`` for ``load_run``/``store_run`` of an access with ``cache`` (None: none): adds
    the fragment and declares the access's L2 policy operand (0 when it takes none)."""
    if cache is None:
        return None
    if H.HINTS not in ctx.fragments:
        ctx.fragments.append(H.HINTS)
    pol = ctx.fresh("pol")
    ctx.emit(f"const uint64_t {pol} = {H.policy_call(cache) or '0ull'};")
    return cache, pol


def known_multiple(e, facts: dict) -> int:
    """A number that integer expression ``e`` is always a multiple of (1 when unknown):
    constants, sums, differences and products of them, shifts by a constant, and parameters
    that ``facts`` (var -> divisor, from ``assume``) knows."""
    if isinstance(e, bool):
        return 1
    if isinstance(e, int):
        return abs(e) or _ANY
    if isinstance(e, Const):
        v = e.value
        return (abs(int(v)) or _ANY) if isinstance(v, int) and not isinstance(v, bool) else 1
    if isinstance(e, Var):
        return facts.get(e, 1)
    if isinstance(e, Binary):
        a, b = known_multiple(e.a, facts), known_multiple(e.b, facts)
        if e.op in ("+", "-"):
            return math.gcd(a, b)
        if e.op == "*":
            return min(a * b, _ANY)
        if e.op == "<<" and isinstance(e.b, Const) and isinstance(e.b.value, int):
            return min(a << e.b.value, _ANY)
    return 1


def assumed_divisors(fn) -> dict:
    """Parameter -> divisor from the kernel's ``assume(param % c == 0)`` facts."""
    out = {}
    for cond, _ in fn.assumes:
        stack = [cond]
        while stack:
            c = stack.pop()
            if isinstance(c, Binary) and c.op == "&&":
                stack += [c.a, c.b]
            elif (
                isinstance(c, Binary)
                and c.op == "=="
                and isinstance(c.a, Binary)
                and c.a.op == "%"
                and isinstance(c.a.a, Var)
                and isinstance(c.a.b, Const)
            ):
                out[c.a.a] = math.lcm(out.get(c.a.a, 1), int(c.a.b.value))
    return out


def static_int(code: str) -> int | None:
    """The value of a C integer expression that is a literal (maybe cast), else None."""
    code = code.strip()
    while code.startswith("("):
        if code.startswith("(int64_t)") or code.startswith("(uint32_t)"):
            code = code[code.index(")") + 1 :].strip()
        elif code.endswith(")"):
            code = code[1:-1].strip()
        else:
            return None
    code = code.rstrip("uUlL")
    return int(code) if code.isdigit() else None


def base_alignment(ctx, name: str, strides, col_offset, w: int):
    """The view's base pointer ``name`` when it alone decides whether every run of ``w``
    elements is aligned: every stride but the last's a compile-time multiple of ``w`` and the
    last dim's offset (an IR expression) a known multiple of it; else None (check each run's
    address). The layout's own column steps are multiples of ``w`` (``vector_width``)."""
    for s in strides[:-1]:
        v = static_int(s)
        if v is None or v % w:
            return None
    if ctx.divisors is None:
        ctx.divisors = assumed_divisors(ctx.fn)
    return name if known_multiple(col_offset, ctx.divisors) % w == 0 else None


def vector_width(ctx, t, layout, dims, strides, ndim: int) -> int:
    """Elements per vector access of tile ``t`` against a view (0: no vector path). In a
    kernel with wgmma groups in flight (its stores redirected, see ``ptx.ldst``) only
    accesses that need no branch qualify: see ``branch_free``."""
    if t.dtype.nbits not in (8, 16, 32):
        return 0
    if t.dtype.kind == "bool" or not dims or dims[-1] != ndim - 1 or strides[-1] != "1":
        return 0
    inner = layout.locals[-1]
    if inner.dim != t.ndim - 1 or inner.stride != 1 or inner.extent < 4:
        return 0
    esize = t.dtype.nbits // 8
    w = 16 // esize  # the largest power of two dividing the run (a run of 5 or 6 float16
    while inner.extent % w:  # is no v5/v6 access: it moves element by element)
        w //= 2
    if w * esize < 8:
        return 0
    # every other step along the last dim keeps a run aligned to w elements
    others = [f for f in (*layout.threads, *layout.locals[:-1]) if f.dim == t.ndim - 1]
    if any(f.stride % w for f in others):
        return 0
    return w


def word_type(n: int) -> str:
    """The CUDA vector type of ``n`` (2 or 4) 32-bit words."""
    return {2: "uint2", 4: "uint4"}[n]


def _to_word(v: str, dtype) -> str:
    return f"__float_as_uint({v})" if dtype.name == "float32" else f"(uint32_t)({v})"


def _from_word(w: str, dtype) -> str:
    if dtype.name == "float32":
        return f"__uint_as_float({w})"
    return f"({ctype(dtype)})({w})"


def words(t, regs, ctx):
    """The 32-bit words of registers ``regs`` of ``t`` (16-bit elements in pairs, bytes in
    fours, the first in the low bits)."""
    if t.dtype.nbits == 32:
        return [_to_word(R.elem(ctx, t, i), t.dtype) for i in regs]
    out = []
    if t.dtype.nbits == 8:
        for k in range(0, len(regs), 4):
            b = [R.elem(ctx, t, regs[k + j]) for j in range(4)]
            u = [f"(uint32_t)(uint8_t){x}" for x in b]  # int8: no sign extension into the word
            out.append(f"({u[0]} | ({u[1]} << 8) | ({u[2]} << 16) | ({u[3]} << 24))")
        return out
    for k in range(0, len(regs), 2):
        lo, hi = R.elem(ctx, t, regs[k]), R.elem(ctx, t, regs[k + 1])
        out.append(f"((uint32_t){lo} | ((uint32_t){hi} << 16))")
    return out


def _plus(i0, k: int):
    """Register ``i0 + k`` (``i0`` an int or a C expression)."""
    if isinstance(i0, int):
        return i0 + k
    return i0 if k == 0 else f"({i0} + {k})"


def _fallback(ctx, i0, w: int, scalar) -> None:
    """``scalar(i)`` for the run's registers: straight-line for a constant run, else a loop."""
    if isinstance(i0, int):
        for i in range(i0, i0 + w):
            scalar(i)
        return
    k = R.unrolled(ctx, w)
    scalar(f"{i0} + {k}")
    ctx.close()


def whole_runs(base, ncols: str, w: int) -> bool:
    """Whether the base pointer alone decides every run's alignment (``base_alignment``) and
    every run is wholly in or out of its row (a row length that is a multiple of ``w``): the
    alignment is then tested once for all the runs (``by_alignment``)."""
    n = static_int(ncols)
    return base is not None and n is not None and n % w == 0


def known_aligned(ctx, base, nbytes: int) -> bool:
    """Whether view base ``base`` (``base_alignment``) is a pointer argument whose alignment,
    checked at every launch (``Function.pointer_align``), is a multiple of ``nbytes``."""
    return base is not None and ctx.aligned_bases.get(base, 1) % nbytes == 0


def branch_free(ctx, base, ncols: str, w: int, nbytes: int) -> bool:
    """Whether a vector access may be used in a kernel whose stores are redirected (wgmma
    groups in flight: no branch may guard a store, see ``ptx.ldst``): only when every run is
    wholly in or out of bounds and the base's alignment is known (``by_alignment`` then takes
    the "fast" path alone, whose runs are one select and one access each). Other kernels:
    always."""
    if not ctx.smem.redirect_stores:
        return True
    return whole_runs(base, ncols, w) and known_aligned(ctx, base, nbytes)


def by_alignment(ctx, base, nbytes: int, whole: bool, body) -> None:
    """``body(path)`` for the runs of one access: ``body("either")`` (each run tests its own
    alignment: a vector access, else element by element with a bounds check on each) or, for
    whole runs, one test of the base: ``body("fast")`` (vector accesses) when aligned, else
    ``body("slow")`` (plain element accesses). A whole run is in or out of bounds as one, so
    neither path checks elements: the per-element checks of "either" beside every run made
    most of NVRTC's time for big tiles (the vector accesses are the same)."""
    if not whole:
        body("either")
        return
    if known_aligned(ctx, base, nbytes):  # the launch checked it: no misaligned path at all
        body("fast")
        return
    ctx.open(f"if ((((uint64_t){base}) & {nbytes - 1}) == 0)")
    body("fast")
    ctx.reopen()
    body("slow")
    ctx.close()


def _run_cond(ctx, ok, col: str, ncols: str, w: int, p: str, esize: int, base, path: str) -> str:
    """The C condition of a run's vector access: in bounds and aligned (on ``base`` when it
    alone decides, see ``base_alignment``: the run then starts at a multiple of ``w``, so with
    a column count that is one too only the run's first column needs checking); on the
    "fast" and "slow" paths of ``by_alignment`` the base's alignment is known."""
    n = static_int(ncols)
    if base is not None and n is not None and n % w == 0:
        cols = f"(uint32_t)({col}) < {n}u"
    else:
        cols = f"(uint32_t)({col}) + {w}u <= (uint32_t)({ncols})"
    if path != "either" or known_aligned(ctx, base, w * esize):  # tested once, or at launch
        return f"{ok} && {cols}"
    return f"{ok} && {cols} && (((uint64_t){base or p}) & {w * esize - 1}) == 0"


def load_run(
    ctx,
    out,
    i0,
    w: int,
    ptr: str,
    ok: str,
    col: str,
    ncols: str,
    scalar,
    base=None,
    path="either",
    hint=None,
):
    """Registers ``i0 .. i0 + w`` of ``out`` from ``ptr`` (one vector access when the run is
    in bounds and aligned, else ``scalar(i)`` for each register); ``i0`` is an int or, in a
    loop over runs, a C expression; ``base``: see ``base_alignment``; ``path``: see
    ``by_alignment`` (a whole run out of bounds reads zeros on its two paths); ``hint``:
    ``(cache, policy variable)`` of a cache-hinted vector access (``cache_hint``)."""
    esize = out.dtype.nbits // 8
    nwords = w * esize // 4
    wt = word_type(nwords)
    p = ctx.fresh("vp")
    ctx.emit(f"const {ctype(out.dtype)}* const {p} = {ptr};")
    cond = _run_cond(ctx, ok, col, ncols, w, p, esize, base, path)
    ctx.open(f"if ({cond})")
    if path == "slow":  # a whole run in bounds: plain element loads
        for k in range(w):
            ctx.emit(f"{R.elem(ctx, out, _plus(i0, k))} = {p}[{k}];")
    else:
        v = ctx.fresh("vw")
        if hint:
            ctx.emit(f"const {wt} {v} = tl_ld_{hint[0]}_v{nwords}({p}, {hint[1]});")
        else:
            ctx.emit(f"const {wt} {v} = *((const {wt}*){p});")
        unpack(ctx, out, i0, nwords, v)
    ctx.reopen()
    if path == "either":
        _fallback(ctx, i0, w, scalar)
    else:  # a whole run out of bounds reads zeros
        for k in range(w):
            ctx.emit(f"{R.elem(ctx, out, _plus(i0, k))} = {R.zero(out.dtype)};")
    ctx.close()


def unpack(ctx, out, i0, nwords: int, v: str) -> None:
    """Registers ``i0 ..`` of ``out`` from the ``nwords`` 32-bit words of vector ``v``."""
    comps = "xyzw"[:nwords]
    for k, c in enumerate(comps):
        word = f"{v}.{c}"
        if out.dtype.nbits == 32:
            ctx.emit(f"{R.elem(ctx, out, _plus(i0, k))} = {_from_word(word, out.dtype)};")
        elif out.dtype.nbits == 8:  # four bytes, the first in the low bits
            ct = ctype(out.dtype)
            for j in range(4):
                ctx.emit(f"{R.elem(ctx, out, _plus(i0, 4 * k + j))} = ({ct})({word} >> {8 * j});")
        else:
            lo, hi = R.elem(ctx, out, _plus(i0, 2 * k)), R.elem(ctx, out, _plus(i0, 2 * k + 1))
            split_word(ctx, word, lo, hi)


def store_run(
    ctx,
    src,
    i0,
    w: int,
    ptr: str,
    ok: str,
    col: str,
    ncols: str,
    scalar,
    base=None,
    path="either",
    hint=None,
):
    """Store registers ``i0 .. i0 + w`` of ``src`` at ``ptr`` (vector or ``scalar(i)``);
    ``base``: see ``base_alignment``; ``path``: see ``by_alignment`` (a whole run out of
    bounds stores nothing on its two paths); ``hint``: as for ``load_run``."""
    esize = src.dtype.nbits // 8
    nwords = w * esize // 4
    wt = word_type(nwords)
    p = ctx.fresh("vp")
    ctx.emit(f"{ctype(src.dtype)}* const {p} = {ptr};")
    cond = _run_cond(ctx, ok, col, ncols, w, p, esize, base, path)
    if ctx.smem.redirect_stores:  # branch-free (see branch_free): out of bounds to the sink
        ws = words(src, [_plus(i0, k) for k in range(w)], ctx)
        ctx.emit(f"tl_st_global_or_v{nwords}_b32({p}, {', '.join(ws)}, {cond});")
        return
    ctx.open(f"if ({cond})")
    if path == "slow":  # a whole run in bounds: plain element stores
        for k in range(w):
            ctx.emit(f"{p}[{k}] = {R.elem(ctx, src, _plus(i0, k))};")
    else:
        ws = words(src, [_plus(i0, k) for k in range(w)], ctx)
        if hint:
            ctx.emit(f"tl_st_{hint[0]}_v{nwords}({p}, make_{wt}({', '.join(ws)}), {hint[1]});")
        else:
            ctx.emit(f"*(({wt}*){p}) = make_{wt}({', '.join(ws)});")
    if path != "either":  # a whole run out of bounds stores nothing
        ctx.close()
        return
    ctx.reopen()
    _fallback(ctx, i0, w, scalar)
    ctx.close()
