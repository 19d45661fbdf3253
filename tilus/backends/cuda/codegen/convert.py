"""Register layout conversion through shared memory (casts into a fixed layout, reshapes that
move elements between threads, register slices, scans)."""

# Every thread writes the elements it holds to a row-major copy of the tile in the block's
# scratch area (copies of a replicated tile write the same values), the group waits, and
# every thread reads the elements its destination layout gives it. The group also waits
# before writing, so one scratch area serves every conversion and reduction of the group.

from __future__ import annotations

import math

from tilus.backends.cuda.codegen import lowbit_rules
from tilus.backends.cuda.codegen import registers as R
from tilus.backends.cuda.codegen.half import split_word
from tilus.backends.cuda.codegen.scalar import (
    FP8,
    FP8_PTX,
    HALF,
    const,
    ctype,
    from_float,
    to_float,
)
from tilus.backends.cuda.tables import CODEGEN_RULES
from tilus.dtypes import float32
from tilus.ir import inst as I


def row_major(coords, shape) -> str:
    """C code of the row-major linear index of ``coords`` (C expressions) in ``shape``."""
    parts = []
    for k, c in enumerate(coords):
        stride = math.prod(shape[k + 1 :])
        if shape[k] == 1:
            continue
        parts.append(f"({c}) * {stride}" if stride != 1 else f"({c})")
    return " + ".join(parts) or "0"


def gather(ctx, inst, src, ct: str | None = None, value=None):
    """Write ``src`` row-major to the group's scratch (as C type ``ct``, register ``i`` as
    ``value(i)``; by default the registers as they are); returns the buffer's C name (the
    group waits after writing)."""
    off = ctx.plan.scratch.get(inst)
    if off is None:
        raise ctx.error("internal: no shared scratch was planned for this layout conversion")
    ls = R.layout_of(ctx, src)
    ct = ct or ctype(src.dtype)
    value = value or (lambda i: R.elem(ctx, src, i))
    buf = ctx.fresh("cv")
    ctx.emit(f"{ct}* const {buf} = ({ct}*)(tl_smem_ptr + {ctx.reduce_base + off}u);")
    CODEGEN_RULES.lookup(I.Sync)(ctx, None, None)  # earlier readers of the scratch are done
    base = R.emit_thread_coords(ctx, ls, ctx.group)
    for i in range(ls.local_size):
        c = [R.coord(b, k) for b, k in zip(base, ls.local_coords(i))]
        ctx.emit(f"{buf}[{row_major(c, src.shape)}] = {value(i)};")
    CODEGEN_RULES.lookup(I.Sync)(ctx, None, None)
    return buf


_SCAN_C = {
    "add": "({a} + {b})", "mul": "({a} * {b})", "max": "tl_max<{T}>({a}, {b})",
    "min": "tl_min<{T}>({a}, {b})", "and": "({a} & {b})", "or": "({a} | {b})",
    "xor": "({a} ^ {b})",
}  # fmt: skip


@CODEGEN_RULES.rule(I.Scan)
def scan(ctx, inst, expr):
    """Prefix op along a dim: the tile goes to shared memory, then each thread combines, for
    each element it holds, the elements before it along the dim in order (so results match the
    interpreter's sequential scan, whatever the layout)."""
    src, out, d = inst.src, inst.out, inst.dim
    lo = R.layout_of(ctx, out)
    dt = src.dtype
    T = "float" if dt.name in HALF else ctype(dt)
    R.declare(ctx, out)
    ctx.emit(f"// {'exclusive ' if inst.exclusive else ''}scan {inst.op} over dim {d}")
    ctx.open("")
    buf = gather(ctx, inst, src)
    base = R.emit_thread_coords(ctx, lo, ctx.group)
    ident = const(inst.identity(), dt)
    ident = to_float(ident, dt) if dt.name in HALF else ident
    for j in range(lo.local_size):
        c = [R.coord(b, k) for b, k in zip(base, lo.local_coords(j))]
        acc = ctx.fresh("sc")
        ctx.emit(f"{T} {acc} = ({T})({ident});")
        k = ctx.fresh("k")
        bound = f"({c[d]})" if inst.exclusive else f"({c[d]}) + 1"
        at = list(c)
        at[d] = k
        v = to_float(f"{buf}[{row_major(at, src.shape)}]", dt)
        ctx.emit(f"for (int {k} = 0; {k} < {bound}; ++{k})")
        ctx.emit(f"  {acc} = {_SCAN_C[inst.op].format(a=acc, b=f'({T})({v})', T=T)};")
        res = from_float(acc, dt) if dt.name in HALF else f"({ctype(dt)})({acc})"
        ctx.emit(f"{R.elem(ctx, out, j)} = {res};")
    ctx.close()


def through_shared(ctx, inst, src, out, read_index, convert=lambda v: v):
    """Move ``src``'s elements into ``out``'s layout: register ``j`` of ``out`` (coordinates
    ``c``, C expressions) gets ``convert(src[read_index(c)])``, the index row-major in src."""
    off = ctx.plan.scratch.get(inst)
    if off is None:
        raise ctx.error("internal: no shared scratch was planned for this layout conversion")
    sync = CODEGEN_RULES.lookup(I.Sync)
    ls, lo = R.layout_of(ctx, src), R.layout_of(ctx, out)
    g = ctx.group
    ct = ctype(src.dtype)
    R.declare(ctx, out)
    ctx.emit(f"// %{src.name} ({ls.kind}) -> %{out.name} ({lo.kind}) through shared memory")
    ctx.open("")
    buf = ctx.fresh("cv")
    ctx.emit(f"{ct}* const {buf} = ({ct}*)(tl_smem_ptr + {ctx.reduce_base + off}u);")
    sync(ctx, None, None)  # earlier readers of the scratch are done
    base = R.emit_thread_coords(ctx, ls, g)
    for i in range(ls.local_size):
        c = [R.coord(b, k) for b, k in zip(base, ls.local_coords(i))]
        ctx.emit(f"{buf}[{row_major(c, src.shape)}] = {R.elem(ctx, src, i)};")
    sync(ctx, None, None)
    base = R.emit_thread_coords(ctx, lo, g)
    for j in range(lo.local_size):
        c = [R.coord(b, k) for b, k in zip(base, lo.local_coords(j))]
        ctx.emit(f"{R.elem(ctx, out, j)} = {convert(f'{buf}[{read_index(c)}]')};")
    ctx.close()


def slice_register(ctx, inst, expr):
    """``x[i]``, ``x[:, j]`` of a register tile (any layouts, indices may be dynamic)."""
    src, out = inst.src, inst.out
    idx = [None if i is None else f"({expr(i)})" for i in inst.indices]

    def read(c):
        it = iter(c)
        full = [next(it) if i is None else i for i in idx]
        return row_major(full, src.shape)

    through_shared(ctx, inst, src, out, read)


@CODEGEN_RULES.rule(I.CastTensor)
def cast(ctx, inst, expr):
    """Elementwise conversion (same layout); float -> f16 pairs use cvt.rn.f16x2.f32."""
    out, src = inst.out, inst.src
    sd, dd = src.dtype, out.dtype
    if sd.nbits % 8 or dd.nbits % 8:  # sub-byte: packed registers
        return lowbit_rules.cast(ctx, inst, expr, cast_code)
    if R.layout_of(ctx, out) != R.layout_of(ctx, src):  # e.g. an accumulator made an mma operand
        through_shared(
            ctx, inst, src, out, lambda c: row_major(c, src.shape), lambda a: cast_code(a, sd, dd)
        )
        return
    layout = R.check_same(ctx, out, src)
    R.declare(ctx, out)
    if (sd.name in FP8 or dd.name in FP8) and sd != dd and _fp8_pairs(ctx, inst, layout):
        return
    if sd.name in ("int8", "uint8") and dd.name == "float16" and _byte_pairs(ctx, inst, layout):
        return
    i = R.unrolled(ctx, layout.local_size)
    ctx.emit(f"{R.elem(ctx, out, i)} = {cast_code(R.elem(ctx, src, i), sd, dd)};")
    ctx.close()


def _byte_pairs(ctx, inst, layout) -> bool:
    """int8/uint8 to f16 two registers at a time: both bytes put under the exponent bits of
    1024.0 in one word (an int8's sign bit flipped on the way, by the same XOR: its byte then
    reads ``c + 128``), one f16x2 subtraction of 1024 (or 1152) leaves both values exactly;
    False when the registers do not pair up."""
    n = layout.local_size
    if n % 2 or R.row_len(layout) % 2:
        return False
    signed = inst.src.dtype.name == "int8"
    j = R.unrolled(ctx, n // 2)
    a, b = R.elem(ctx, inst.src, f"(2 * {j})"), R.elem(ctx, inst.src, f"(2 * {j} + 1)")
    # plain C, not an asm permute: the bytes often come out of one word (a view), and ptxas
    # then puts them in place with one PRMT of that word
    w, h = ctx.fresh("w"), ctx.fresh("h")
    key = "0x64806480u" if signed else "0x64006400u"
    ctx.emit(
        f"const uint32_t {w} = ((uint32_t)(uint8_t){a} | ((uint32_t)(uint8_t){b} << 16)) ^ {key};"
    )
    ctx.emit(f"const uint32_t {h} = tl_hsub2({w}, {key});")
    split_word(ctx, h, R.elem(ctx, inst.out, f"(2 * {j})"), R.elem(ctx, inst.out, f"(2 * {j} + 1)"))
    ctx.close()
    return True


def _fp8_pairs(ctx, inst, layout) -> bool:
    """Convert to or from fp8 two registers per ``cvt`` (``e4m3x2``/``e5m2x2``: from two f32
    or one f16x2, and back to f16x2); False when the registers do not pair up."""
    out, src = inst.out, inst.src
    sd, dd = src.dtype, out.dtype
    n = layout.local_size
    if n % 2 or R.row_len(layout) % 2:
        return False
    j = R.unrolled(ctx, n // 2)
    a, b = R.elem(ctx, src, f"(2 * {j})"), R.elem(ctx, src, f"(2 * {j} + 1)")
    oa, ob = R.elem(ctx, out, f"(2 * {j})"), R.elem(ctx, out, f"(2 * {j} + 1)")
    if sd.name in FP8:  # decode the pair: fp8 -> f16 is exact, then f16 -> f32 is too
        pair = f"(uint16_t)((uint32_t){a} | ((uint32_t){b} << 8))"
        short = FP8_PTX[sd.name]
        if dd.name == "float16":
            ctx.emit(f"tl_{short}x2_to_h2({pair}, {oa}, {ob});")
            ctx.close()
            return True
        lo, hi = ctx.fresh("lo"), ctx.fresh("hi")
        ctx.emit(f"float {lo}, {hi};")
        ctx.emit(f"tl_{short}x2_to_f2({pair}, {lo}, {hi});")
        a, b, sd = lo, hi, float32
        if dd == float32:
            ctx.emit(f"{oa} = {lo}; {ob} = {hi};")
            ctx.close()
            return True
        if dd.name not in FP8:
            ctx.emit(f"{oa} = {cast_code(lo, float32, dd)}; {ob} = {cast_code(hi, float32, dd)};")
            ctx.close()
            return True
    short = FP8_PTX[dd.name]
    if sd.name == "float16":
        code = f"tl_h2_to_{short}x2({a}, {b})"
    else:  # one rounding from the exact float value (bf16 and integers widen exactly first)
        code = f"tl_f2_to_{short}x2((float)({to_float(a, sd)}), (float)({to_float(b, sd)}))"
    v = ctx.fresh("p")
    ctx.emit(f"const uint16_t {v} = {code};")
    ctx.emit(f"{oa} = (uint8_t){v}; {ob} = (uint8_t)({v} >> 8);")
    ctx.close()
    return True


def small_int(dt) -> bool:
    """An 8- or 16-bit integer dtype: ``(float)`` of its C type is an I2F.S8/U16-style
    conversion, a quarter-rate instruction on sm_90 (32-bit sources get the full-rate I2FP,
    which packed sub-byte codes use, so they keep it)."""
    return dt.kind in ("int", "uint") and dt.nbits in (8, 16)


def int_to_float(a: str) -> str:
    """C code of the float value of a C integer ``a`` with ``|a| < 2^22``, without I2F: added
    to the bits of 1.5 * 2^23, whose mantissa's last bit is 1, it is the float 1.5 * 2^23 + a
    exactly; one subtraction leaves a (an integer add and an FADD, both full rate)."""
    return f"(__int_as_float(0x4b400000 + (int)({a})) - 12582912.0f)"


def cast_code(a: str, sd, dd) -> str:
    """C code converting ``a`` of dtype ``sd`` to ``dd`` (round to nearest even)."""
    if sd == dd:
        return a
    if small_int(sd) and dd.is_float() and dd.name not in FP8:
        a, sd = int_to_float(a), float32  # exact: the float's rounding to dd is the only one
        if dd == float32:
            return a
    if dd.name in HALF or dd.name == "tfloat32":
        return from_float(f"(float)({to_float(a, sd)})", dd)
    if dd.kind == "bool":
        return f"({to_float(a, sd)} != 0)"
    return f"(({ctype(dd)}){to_float(a, sd)})"
