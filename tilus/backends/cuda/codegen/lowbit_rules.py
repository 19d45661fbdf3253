"""Code of the instructions on sub-byte tiles (see ``lowbit.py`` for the packing)."""

from __future__ import annotations

from tilus.backends.cuda.codegen import lowbit as B
from tilus.backends.cuda.codegen import registers as R
from tilus.backends.cuda.codegen.half import split_word
from tilus.backends.cuda.ptx.lowbit import SMALL_INT_CONSTANTS, small_int_pair_constants
from tilus.backends.cuda.tables import CODEGEN_RULES
from tilus.ir import inst_lowbit as L


def _run(layout, t, dims, strides) -> tuple[int, dict]:
    """Registers per run of consecutive elements in memory that a thread holds in consecutive
    registers (1 when there is none), and the extent of the run along each view dim it spans.
    The run starts with the innermost register digit along a view dim of stride 1; register
    digits further out extend it while each steps exactly the run so far in memory (compile-
    time strides), so a view whose strides permute the digits of its index (weights packed
    offline in the order a fragment holds them) still moves as words."""
    from tilus.backends.cuda.codegen.vector import static_int

    run, span = 1, {}
    for f in reversed(layout.locals):
        if f.extent == 1:
            continue
        if f.dim < 0:
            break
        d = dims[f.dim]
        st = static_int(strides[d])
        if st is None or st * f.stride != run:
            break
        span[d] = span.get(d, 1) + (f.extent - 1) * f.stride
        run *= f.extent
    return run, span


#: The word vectors a thread's run moves as (16, 8 or 4 bytes, aligned).
_VEC = {1: "uint32_t", 2: "uint2", 4: "uint4"}


def _runs(ctx, inst, g, layout, t, offs, base, M, scalar, words_fast, const: str):
    """Walk tile ``t``'s registers for a packed load or store of global view ``g``: each run of whole aligned
    words in bounds goes through ``words_fast(p, vector_type, first_word, words, vec)`` on a
    word pointer ``p``, with ``scalar(i)`` per element as the fallback (and for every element
    when the runs are not whole words). A run of whole halfwords but not words (8 fp6 codes)
    moves as halfwords: ``vec`` 0, ``first_word`` and ``words`` then count halfwords."""
    nb = t.dtype.nbits
    name, shape, strides = ctx.gview_info[g]
    run, span = _run(layout, t, inst.dims, strides)
    words = run * nb // 32 if run * nb % 32 == 0 else 0
    vec = 4 if words % 4 == 0 else 2 if words % 2 == 0 else 1
    if not words and run > 1 and run * nb % 16 == 0:  # e.g. 8 fp6: three aligned halfwords
        words, vec = run * nb // 16, 0
    for i0 in range(0, layout.local_size, run if words else 1):
        if not words:
            scalar(i0)
            continue
        idx = M._global_index(offs, base, inst.dims, layout.local_coords(i0))
        fast, bit = ctx.fresh("fast"), ctx.fresh("bit")
        ctx.emit(f"const int64_t {bit} = ({M._address(idx, strides)}) * {nb};")
        # every element of the run inside the view: the dims it spans from their first index
        # to their last, the others at their one index
        conds = [
            f"({idx[d]}) >= 0 && ({idx[d]}) + {span[d]} <= ({shape[d]})"
            if d in span
            else f"(uint32_t)({idx[d]}) < (uint32_t)({shape[d]})"
            for d in range(len(shape))
        ]
        inside = " && ".join(conds) or "true"
        align = 4 * vec - 1 if vec else 1
        ctx.emit(
            f"const bool {fast} = {inside} "
            f"&& ((((uint64_t)({name} + ({bit} >> 3))) & {align}u) | ((uint64_t){bit} & 7u)) == 0;"
        )
        ctx.open(f"if ({fast})")
        vt = _VEC[vec] if vec else "uint16_t"
        ctx.emit(f"{const}{vt}* p = ({const}{vt}*)({name} + ({bit} >> 3));")
        # vec 0: halfwords at register bit i0 * nb (a multiple of 16), not word-aligned
        words_fast("p", vt, i0 * nb // 32 if vec else i0 * nb // 16, words, vec)
        ctx.reopen()
        for i in range(i0, i0 + run):
            scalar(i)
        ctx.close()


def load_global(ctx, inst, expr, M):
    """Each thread gathers its elements' bits; whole aligned words in bounds load as words."""
    out, g = inst.out, inst.src
    nb = out.dtype.nbits
    layout = R.layout_of(ctx, out)
    R.declare(ctx, out)
    name, shape, strides = ctx.gview_info[g]
    ctx.open("")
    B.zero_words(ctx, out, layout)
    base, offs = M._tile_base(ctx, layout, inst.offsets, expr)
    w = ctx.name(out)

    def scalar(i):
        idx = M._global_index(offs, base, inst.dims, layout.local_coords(i))
        ok, bit = ctx.fresh("ok"), ctx.fresh("bit")
        ctx.emit(f"const bool {ok} = {M._in_bounds(idx, shape)};")
        ctx.emit(f"const int64_t {bit} = ({M._address(idx, strides)}) * {nb};")
        ctx.open(f"if ({ok})")
        ctx.emit(f"const uint8_t* p = {name} + ({bit} >> 3);")
        ctx.emit(f"uint32_t v = (uint32_t)p[0] >> ({bit} & 7);")
        if 8 % nb:  # may straddle into the next byte
            ctx.emit(f"if (({bit} & 7) + {nb} > 8) v |= (uint32_t)p[1] << (8 - ({bit} & 7));")
        B.put_bits(ctx, w, i * nb, nb, "v")
        ctx.close()

    def words_fast(p, vt, k0, words, vec):
        if vec == 0:  # halfwords k0, k0 + 1, ... of the registers
            for j in range(words):
                B.put_bits(ctx, w, 16 * (k0 + j), 16, f"(uint32_t){p}[{j}]")
            return
        for j in range(words // vec):
            parts = [f"{w}[{k0 + vec * j + c}]" for c in range(vec)]
            if vec == 1:
                ctx.emit(f"{parts[0]} = p[{j}];")
                continue
            ctx.emit(f"const {vt} q{j} = p[{j}];")
            for c, part in enumerate(parts):
                ctx.emit(f"{part} = q{j}.{'xyzw'[c]};")

    _runs(ctx, inst, g, layout, out, offs, base, M, scalar, words_fast, "const ")
    ctx.close()


def store_global(ctx, inst, expr, M):
    """Each thread stores its elements' bits (compare-and-swap on shared words); whole
    aligned words in bounds store as plain words (no other thread has bits in them)."""
    src, g = inst.src, inst.dst
    nb = src.dtype.nbits
    layout = R.layout_of(ctx, src)
    name, shape, strides = ctx.gview_info[g]
    ctx.open("")
    base, offs = M._tile_base(ctx, layout, inst.offsets, expr)
    w = ctx.name(src)

    def scalar(i):
        idx = M._global_index(offs, base, inst.dims, layout.local_coords(i))
        ok = M._in_bounds(idx, shape)
        addr = f"({M._address(idx, strides)}) * {nb}"
        ctx.emit(f"if ({ok}) tl_st_bits({name}, {addr}, {B.get(ctx, src, i)}, {nb});")

    def words_fast(p, vt, k0, words, vec):
        if vec == 0:  # halfwords k0, k0 + 1, ... of the registers
            for j in range(words):
                ctx.emit(f"{p}[{j}] = (uint16_t){B.get_bits(w, 16 * (k0 + j), 16)};")
            return
        for j in range(words // vec):
            parts = [f"{w}[{k0 + vec * j + c}]" for c in range(vec)]
            ctx.emit(
                f"p[{j}] = " + (parts[0] if vec == 1 else f"make_{vt}({', '.join(parts)})") + ";"
            )

    _runs(ctx, inst, g, layout, src, offs, base, M, scalar, words_fast, "")
    ctx.close()


def cast(ctx, inst, expr, cast_code):
    """Elementwise conversion from or to a sub-byte dtype (same layout); ``cast_code`` is
    ``convert.cast_code`` (values of byte-sized types)."""
    out, src = inst.out, inst.src
    sd, dd = src.dtype, out.dtype
    layout = R.layout_of(ctx, src)
    if R.layout_of(ctx, out) != layout:
        raise ctx.error(
            f"cast of %{src.name} ({sd}) to {dd} would need a layout conversion, which the CUDA "
            "backend does not do for sub-byte tiles yet"
        )
    if sd.kind == "bool" or dd.kind == "bool":
        raise ctx.error(f"cast between {sd} and {dd} is not supported by the CUDA backend")
    R.declare(ctx, out)
    ctx.open("")
    n = layout.local_size
    if B.packed(dd):
        B.zero_words(ctx, out, layout)
    if sd.name in ("uint4b", "int4b") and dd.name == "float16" and n % 8 == 0:
        _int4_to_f16(ctx, src, out, n)
        ctx.close()
        return
    first, done = 0, set()
    if _small_int_to_half(sd, dd):
        done = _small_int_pairs_to_half(ctx, src, out, n)
    elif _float_to_f16_by_scaling(sd, dd):
        first = _small_float_to_f16(ctx, src, out, n)
    elif _f16_to_small_float(sd, dd):
        first = _f16_pairs_to_small_float(ctx, src, out, n)
    for i in range(first, n):
        if i in done:
            continue
        if B.packed(sd):
            val, vdt = B.decode(B.get(ctx, src, i), sd)
        else:
            val, vdt = R.elem(ctx, src, i), sd
        if B.packed(dd):
            B.put_bits(ctx, ctx.name(out), i * dd.nbits, dd.nbits, B.encode(val, vdt, dd))
        else:
            ctx.emit(f"{R.elem(ctx, out, i)} = {cast_code(val, vdt, dd)};")
    ctx.close()


def _int4_to_f16(ctx, src, out, n):
    """u4/i4 -> f16 by magic numbers, the two codes of a byte at a time (consecutive
    registers, as an mma fragment pairs them): the byte put in bytes 0 and 2 of a word (one
    byte permute), its low nibble kept in bits 0-3 and its high one in bits 20-23 under the
    exponent bits of 1024.0 (0x6400: 1024 + v and 1024 + 16 v) by one logic op, which also
    flips the nibbles' sign bits of an i4 (biasing it by 8); then one f16x2 fma by (1, 1/16)
    plus (-1024, -64), or (-1032, -72) for an i4, gives both values exactly."""
    signed = src.dtype.name == "int4b"
    # the constants from constant memory (``tl_i4k``): one constant-bank operand each
    key, bias = ("tl_i4k.key_s", "tl_i4k.bias_s") if signed else ("tl_i4k.key_u", "tl_i4k.bias_u")
    for k in range(n // 8):
        word = ctx.fresh("w")
        ctx.emit(f"const uint32_t {word} = {ctx.name(src)}[{k}];")
        for i in range(4):
            h = ctx.fresh("h")
            sel = (4 << 12) | (i << 8) | (4 << 4) | i  # byte i to bytes 0 and 2, zeros between
            ctx.emit(
                f"const uint32_t {h} = tl_hfma2((tl_prmt({word}, 0u, {sel:#06x}u) & tl_i4k.mask) ^ "
                f"{key}, tl_i4k.mul, {bias});"
            )
            ctx.emit(f"{R.elem(ctx, out, 8 * k + 2 * i)} = (uint16_t)({h} & 0xffffu);")
            ctx.emit(f"{R.elem(ctx, out, 8 * k + 2 * i + 1)} = (uint16_t)({h} >> 16);")


def _small_int_to_half(sd, dd) -> bool:
    """Whether packed integer ``sd`` widens to ``dd`` through the paired magic-number cast to
    f16 (``tl_ik<nb>``; 4-bit codes have ``_int4_to_f16``): f16, or f32 from the f16 halves
    (an f16 -> f32 conversion is one full-rate instruction, the integer one three)."""
    return (
        B.packed(sd)
        and sd.kind in ("int", "uint")
        and sd.nbits in SMALL_INT_CONSTANTS
        and dd.name in ("float16", "float32")
    )


#: the most registers of a tile whose misaligned 5-7-bit pairs are read from shifted words:
#: a decode-kernel thread's 128 uint7b codes (4 runs) took 255 registers and spilled that way
_REALIGN_MAX = 64


def _small_int_pairs_to_half(ctx, src, out, n) -> set:
    """Registers (2m, 2m + 1) of a packed integer tile to f16 (or f32) values, a pair a few
    instructions: one byte permute puts the 16 bits holding each code in one half of a word,
    one logic op keeps the codes under the exponent bits of 1024.0 (flipping a signed code's
    sign bit), one f16x2 fma rescales and unbiases both, exactly (``small_int_pair_constants``).
    A pair whose codes do not both fit under f16's mantissa where they lie (5-7-bit codes at
    some bit offsets) is read from the words shifted right by a few bits first (one funnel
    shift) to an offset where they do, in tiles of up to ``_REALIGN_MAX`` registers (larger
    ones leave such pairs to the element path). Returns the registers done."""
    sd, dd = src.dtype, out.dtype
    nb, signed = sd.nbits, sd.kind == "int"
    table = small_int_pair_constants(nb)
    nw = B.num_words(n, nb)
    words = ctx.name(src)

    def word(k: int, shift: int) -> str:  # bits 32 k + shift .. of the tile's words
        if k >= nw:
            return "0u"
        if not shift:
            return f"{words}[{k}]"
        nxt = f"{words}[{k + 1}]" if k + 1 < nw else "0u"
        return f"(uint32_t)((((uint64_t){nxt} << 32) | {words}[{k}]) >> {shift})"

    done = set()
    for m in range(n // 2):
        p0 = 2 * m * nb
        shift = next(s for s in range(8) if table[8 * signed + (p0 - s) % 8] is not None)
        if shift and n > _REALIGN_MAX:
            continue  # the element path: a large tile's shifted words cost too many registers
        p0 -= shift  # the pair's first bit in the shifted words
        b0, o0 = divmod(p0, 8)
        b1 = (p0 + nb) // 8
        k = b0 // 4  # the bytes b0 .. b0 + 2 lie in words k and k + 1
        sel = (b0 - 4 * k) | (b0 - 4 * k + 1) << 4 | (b1 - 4 * k) << 8 | (b1 - 4 * k + 1) << 12
        e = f"tl_ik{nb}.k[{8 * signed + o0}]"
        h = ctx.fresh("h")
        ctx.emit(
            f"const uint32_t {h} = tl_hfma2((tl_prmt({word(k, shift)}, {word(k + 1, shift)}, "
            f"{sel:#06x}u) & {e}[0]) ^ {e}[1], {e}[2], {e}[3]);"
        )
        if dd.name == "float16":
            split_word(ctx, h, R.elem(ctx, out, 2 * m), R.elem(ctx, out, 2 * m + 1))
        else:
            ctx.emit(f"{R.elem(ctx, out, 2 * m)} = tl_h2f((uint16_t)({h} & 0xffffu));")
            ctx.emit(f"{R.elem(ctx, out, 2 * m + 1)} = tl_h2f((uint16_t)({h} >> 16));")
        done.update((2 * m, 2 * m + 1))
    return done


@CODEGEN_RULES.rule(L.ViewTensor)
def view(ctx, inst, expr):
    """A thread's bits regrouped: packed words are copied (or are the source's), byte-sized
    registers are taken apart into / put together from 32-bit words."""
    src, out = inst.src, inst.out
    sd, dd = src.dtype, out.dtype
    ls, lo = R.layout_of(ctx, src), R.layout_of(ctx, out)
    total = ls.local_size * sd.nbits
    if total != lo.local_size * dd.nbits:  # layout inference derives lo from ls
        raise ctx.error(f"view of %{src.name} as {dd} does not keep each thread's bits")
    R.declare(ctx, out)
    ctx.open("")
    nw = B.num_words(1, total)
    if B.packed(sd):
        words = ctx.name(src)
    else:
        words = ctx.fresh("vw")
        ctx.emit(f"uint32_t {words}[{nw}] = {{}};")
        for i in range(ls.local_size):
            bits = B.bits_of(R.elem(ctx, src, i), sd)
            if sd.nbits == 64:
                B.put_bits(ctx, words, 64 * i, 32, f"(uint32_t)({bits})")
                B.put_bits(ctx, words, 64 * i + 32, 32, f"(uint32_t)(({bits}) >> 32)")
            else:
                B.put_bits(ctx, words, i * sd.nbits, sd.nbits, bits)
    if B.packed(dd):
        for k in range(nw):
            ctx.emit(f"{ctx.name(out)}[{k}] = {words}[{k}];")
    elif dd.nbits == 16 and lo.local_size % 2 == 0:
        # each word's halves by one unpack: a pair op (or mma fragment) on them then reads
        # the word's register as it is, where shifted halves would be merged again by PRMT
        for k in range(lo.local_size // 2):
            split_word(ctx, f"{words}[{k}]", R.elem(ctx, out, 2 * k), R.elem(ctx, out, 2 * k + 1))
    else:
        for j in range(lo.local_size):
            if dd.nbits == 64:
                lo32 = B.get_bits(words, 64 * j, 32)
                hi32 = B.get_bits(words, 64 * j + 32, 32)
                bits = f"((uint64_t)({lo32}) | ((uint64_t)({hi32}) << 32))"
            else:
                bits = B.get_bits(words, j * dd.nbits, dd.nbits)
            ctx.emit(f"{R.elem(ctx, out, j)} = {B.from_bits(bits, dd)};")
    ctx.close()


def _float_to_f16_by_scaling(sd, dd) -> bool:
    """Whether sub-byte float ``sd`` widens to f16 by placing its bits and scaling: no
    inf/NaN codes (fewer than 5 exponent bits) and a mantissa f16 holds."""
    return B.packed(sd) and sd.is_float() and sd.exponent_bits < 5 and dd.name == "float16"


def _small_float_to_f16(ctx, src, out, n) -> int:
    """Pairs of registers of a sub-byte float without inf/NaN to f16, exactly: the two codes
    in the halves of a word, exponent and mantissa bits moved to where f16 keeps its
    mantissa's top bits, the sign to bit 15, then one f16x2 multiplication by 2^(15 - bias)
    rescales both (a code with a zero exponent is an f16 subnormal, the product exact).
    4-bit codes of whole words pair code ``j`` with ``j + 4`` (16 bits apart), so that each
    field comes out of the word with one shift, without gathering the pair first.
    Returns the registers done (an odd last one is left to the element path)."""
    dt = src.dtype
    e, mb = dt.exponent_bits, dt.mantissa_bits
    bias = (1 << (e - 1)) - 1
    em = (1 << (e + mb)) - 1
    sh, ssh = 10 - mb, 15 - e - mb
    em2, s2 = (em << sh) * 0x10001, (0x8000) * 0x10001
    scale = (30 - bias) << 10
    if dt.nbits == 4 and n % 8 == 0:  # codes j and j + 4 of a word lie 16 bits apart
        for k in range(n // 8):
            word = f"{ctx.name(src)}[{k}]"
            for j in range(4):  # each field moved straight from the word: two shifts
                em_, sg = _shifted(word, sh - 4 * j), _shifted(word, ssh - 4 * j)
                h = ctx.fresh("h")
                ctx.emit(
                    f"const uint32_t {h} = tl_hmul2(({em_} & {em2:#x}u) | ({sg} & {s2:#x}u), "
                    f"{scale * 0x10001:#x}u);"
                )
                split_word(ctx, h, R.elem(ctx, out, 8 * k + j), R.elem(ctx, out, 8 * k + j + 4))
        return n
    nb = dt.nbits
    for i in range(0, n - 1, 2):
        # the pair's 2 nb bits at once, code i + 1 copied up to bit 16 (the bits between are
        # masked off below)
        f, w = ctx.fresh("f"), ctx.fresh("w")
        ctx.emit(f"const uint32_t {f} = {B.get_bits(ctx.name(src), i * nb, 2 * nb)};")
        ctx.emit(f"const uint32_t {w} = {f} | ({f} << {16 - nb});")
        h = ctx.fresh("h")
        ctx.emit(
            f"const uint32_t {h} = tl_hmul2((({w} << {sh}) & {em2:#x}u) | (({w} << {ssh}) & "
            f"{s2:#x}u), {scale * 0x10001:#x}u);"
        )
        split_word(ctx, h, R.elem(ctx, out, i), R.elem(ctx, out, i + 1))
    return n - n % 2


def _shifted(word: str, d: int) -> str:
    """C code of ``word`` shifted left by ``d`` bits (right when ``d`` is negative)."""
    return f"({word} << {d})" if d > 0 else f"({word} >> {-d})" if d < 0 else word


def _f16_to_small_float(sd, dd) -> bool:
    """Whether f16 narrows to sub-byte float ``dd`` two halves at a time: no inf/NaN codes
    (fewer than 5 exponent bits), so every constant of the rounding is an f16."""
    return sd.name == "float16" and B.packed(dd) and dd.is_float() and dd.exponent_bits < 5


def _f16_pairs_to_small_float(ctx, src, out, n) -> int:
    """Pairs of f16 registers to sub-byte float codes by ``tl_enc_h2sf`` or ``tl_enc_h2e2`` (both halves of a
    word at once); the two codes are packed side by side into the output's words. Returns
    the registers done (an odd last one is left to the element path)."""
    dt = out.dtype
    nb, e, mb = dt.nbits, dt.exponent_bits, dt.mantissa_bits
    # two exponent bits (e2m1 ...): three fma pieces and two mins (``tl_enc_h2e2``)
    enc = f"tl_enc_h2e2<{mb}>" if e == 2 else f"tl_enc_h2sf<{e}, {mb}>"
    if nb == 4 and n % 8 == 0:  # a word of 8 codes from 4 pairs: a byte each, 3 prmt
        for k in range(n // 8):
            ts = []
            for j in range(4):
                i, t = 8 * k + 2 * j, ctx.fresh("t")
                lo, hi = R.elem(ctx, src, i), R.elem(ctx, src, i + 1)
                ctx.emit(f"const uint32_t {t}c = {enc}((uint32_t){lo} | ((uint32_t){hi} << 16));")
                ctx.emit(f"const uint32_t {t} = {t}c | ({t}c >> 12);")  # both codes in byte 0
                ts.append(t)
            lo2 = f"tl_prmt({ts[0]}, {ts[1]}, 0x40u)"
            hi2 = f"tl_prmt({ts[2]}, {ts[3]}, 0x40u)"
            ctx.emit(f"{ctx.name(out)}[{k}] = tl_prmt({lo2}, {hi2}, 0x5410u);")
        return n
    for i in range(0, n - 1, 2):
        c = ctx.fresh("c")
        w = f"((uint32_t){R.elem(ctx, src, i)} | ((uint32_t){R.elem(ctx, src, i + 1)} << 16))"
        ctx.emit(f"const uint32_t {c} = {enc}({w});")
        B.put_bits(ctx, ctx.name(out), i * nb, 2 * nb, f"{c} | ({c} >> {16 - nb})")
    return n - n % 2
