"""cp.async: copy_async as 4/8/16-byte chunks per thread, commit and wait groups."""

from __future__ import annotations

import math

from tilus.backends.cuda.codegen.memory import _address, _shared_elem, shared_offset, swizzled
from tilus.backends.cuda.codegen.scalar import ctype
from tilus.backends.cuda.codegen.vector import base_alignment, known_aligned, static_int
from tilus.backends.cuda.ptx.cp_async import COPIES
from tilus.backends.cuda.tables import CODEGEN_RULES
from tilus.ir import inst_memory as M

rule = CODEGEN_RULES.rule


def _need(ctx):
    if COPIES not in ctx.fragments:
        ctx.fragments.append(COPIES)


@rule(M.CopyAsync)
def copy_async(ctx, inst, expr):
    """The tile's rows split into chunks of the widest size dividing a row; the group's threads
    take the chunks round robin. Each chunk is one cp.async whose src-size counts its in-bounds
    bytes (the rest is zero-filled); a chunk whose global address is not aligned to its size
    (a runtime offset or stride) or that starts left of the tensor is copied element by element
    instead, synchronously (done before the wait, as the asynchronous copy would be).

    When the view's base pointer alone decides the alignment of every chunk (see
    ``codegen.vector.base_alignment``) that test is made once for the whole copy: the aligned
    branch is the unrolled cp.async of every chunk, the other one a loop over the chunks, each
    copied element by element. The scalar code is then in the kernel once, not once per chunk
    (NVRTC's time grows with it; the cp.async path is the same instructions)."""
    _need(ctx)
    g, s = inst.src, inst.dst
    name, shape, strides = ctx.gview_info[g]
    eb = s.dtype.nbits // 8
    size = M.CopyAsync.chunk_bytes(s.shape[-1] * eb)
    per = size // eb
    last = len(shape) - 1
    ctx.open("")
    offs = []
    for o in inst.offsets:
        v = ctx.fresh("o")
        ctx.emit(f"const int {v} = {expr(o)};")
        offs.append(v)
    hint = inst.evict == "evict_first"
    if hint:
        ctx.emit("const uint64_t tl_pol = tl_policy_evict_first();")
    base = None
    if inst.dims[-1] == last and strides[last] == "1":
        base = base_alignment(ctx, name, strides, inst.offsets[last], per)
    ncols = static_int(shape[last])
    # whole: the strides and the column offset are multiples of the chunk, and so is the row
    # length, so a chunk is wholly in or out of its row and only the base can misalign it
    whole = base is not None and ncols is not None and ncols % per == 0
    if base is not None and (whole or not inst.check_bounds) and known_aligned(ctx, base, size):
        _chunks(ctx, inst, offs, base, whole, "fast")  # the launch checked the alignment
    elif base is not None and (whole or not inst.check_bounds):
        ctx.open(f"if ((((uint64_t){base}) & {size - 1}u) == 0)")
        _chunks(ctx, inst, offs, base, whole, "fast")
        ctx.reopen()
        _chunks(ctx, inst, offs, base, whole, "slow")
        ctx.close()
    else:
        _chunks(ctx, inst, offs, base, whole, "either")
    ctx.close()


def _chunks(ctx, inst, offs, base, whole: bool, path: str) -> None:
    """The loop over a thread's chunks: ``path`` "fast" (cp.async each, unrolled), "slow"
    (element by element, a loop) or "either" (a test of each chunk's alignment)."""
    g, s = inst.src, inst.dst
    view = ctx.plan.shared[s]
    name, shape, strides = ctx.gview_info[g]
    eb = s.dtype.nbits // 8
    size = M.CopyAsync.chunk_bytes(s.shape[-1] * eb)
    per = size // eb
    cols = s.shape[-1] // per
    n = math.prod(s.shape[:-1]) * cols
    gsize = ctx.group.size
    ct = ctype(s.dtype)
    hint = inst.evict == "evict_first"
    tid = "0" if gsize == 1 else ctx.tid(ctx.group)
    k = ctx.fresh("k")
    ctx.emit("#pragma unroll 1" if path == "slow" else "#pragma unroll")
    ctx.open(f"for (int {k} = 0; {k} < {-(-n // gsize)}; ++{k})")
    c = ctx.fresh("c")
    ctx.emit(f"const int {c} = {tid} + {k} * {gsize};")
    if n % gsize:
        ctx.open(f"if ({c} < {n})")
    # tile coordinates of the chunk's first element (row-major over the tile)
    coords, rest = [], c
    for d in range(s.ndim - 1, -1, -1):
        ext = cols if d == s.ndim - 1 else s.shape[d]
        x = f"({rest} % {ext})" + (f" * {per}" if d == s.ndim - 1 and per > 1 else "")
        coords.append(x)
        rest = f"({rest} / {ext})"
    coords.reverse()
    idx = list(offs)
    for kk, d in enumerate(inst.dims):
        idx[d] = f"{offs[d]} + {coords[kk]}"
    gi = [ctx.fresh("g") for _ in idx]
    for v, x in zip(gi, idx):
        ctx.emit(f"const int {v} = {x};")
    last = len(shape) - 1
    dst = ctx.fresh("dst")
    lin = _shared_elem(view, coords)
    addr = swizzled(ctx, view.layout.swizzle, s, shared_offset(ctx, s), lin)
    ctx.emit(f"const uint32_t {dst} = {addr};")
    src = ctx.fresh("src")
    ctx.emit(f"const {ct}* const {src} = {name} + {_address(gi, strides)};")
    nin, rok = ctx.fresh("nin"), ctx.fresh("rok")  # elements of the chunk inside the tensor
    ncols = static_int(shape[last])
    at = base or src
    if inst.check_bounds:
        rows_ok = " && ".join(
            [f"(uint32_t){gi[d]} < (uint32_t)({shape[d]})" for d in range(last)] or ["true"]
        )
        ctx.emit(f"const bool {rok} = {rows_ok};")
        if path != "slow":
            if whole:
                cin = f"(uint32_t){gi[last]} < {ncols}u"
                ctx.emit(f"const int {nin} = {rok} && {cin} ? {per} : 0;")
            else:
                ctx.emit(
                    f"const int {nin} = {rok} ? "
                    f"tl_min(tl_max((int)({shape[last]}) - {gi[last]}, 0), {per}) : 0;"
                )
        ok_e = f"{rok} && (uint32_t)({gi[last]} + {{e}}) < (uint32_t)({shape[last]})"
        aligned = f"{gi[last]} >= 0 && (((uint64_t){at}) & {size - 1}u) == 0"
    else:
        if path != "slow":
            ctx.emit(f"const int {nin} = {per};")
        ok_e = "true"
        aligned = f"(((uint64_t){at}) & {size - 1}u) == 0"
    if path != "slow":
        if path == "either":
            ctx.open(f"if ({aligned})")
        fn = f"tl_cp_async_{size}" + ("_hint" if hint else "")
        # src-size 0 reads nothing: the tensor's base keeps the operand a valid address
        args = f"tl_smem + {dst}, {nin} ? (const void*){src} : (const void*){name}, {nin} * {eb}u"
        ctx.emit(f"{fn}({args}{', tl_pol' if hint else ''});")
    if path != "fast":
        if path == "either":
            ctx.reopen()
        e = ctx.fresh("e")
        ctx.emit("#pragma unroll")
        ctx.open(f"for (int {e} = 0; {e} < {per}; ++{e})")
        ctx.emit(
            f"*(({ct}*)(tl_smem_ptr + {dst} + {e} * {eb})) = {ok_e.format(e=e)} ? "
            f"{src}[(int64_t){e} * {strides[last]}] : ({ct})0;"
        )
        ctx.close()
    if path == "either":
        ctx.close()
    if n % gsize:
        ctx.close()
    ctx.close()


@rule(M.CopyAsyncCommitGroup)
def commit_group(ctx, inst, expr):
    """``cp.async.commit_group`` in every thread of the group."""
    _need(ctx)
    ctx.emit("tl_cp_async_commit();")


@rule(M.CopyAsyncWaitGroup)
def wait_group(ctx, inst, expr):
    """``cp.async.wait_group n`` in every thread of the group."""
    _need(ctx)
    ctx.emit(f"tl_cp_async_wait<{inst.n}>();")


@rule(M.CopyAsyncWaitAll)
def wait_all(ctx, inst, expr):
    """``cp.async.wait_all`` in every thread of the group."""
    _need(ctx)
    ctx.emit("tl_cp_async_wait_all();")
