"""Sub-byte tiles on the GPU: packed registers, global loads/stores by bits, casts, ``view``.

A register tile of a sub-byte dtype is ``uint32_t name[W]`` per thread: the thread's register
``i`` (in layout order) at bits ``[i * nbits, (i + 1) * nbits)`` of the words, least
significant first, possibly straddling two words; every bit position is a constant, so
extraction and insertion are shifts and masks. Global memory packs element ``k`` of a view at
bit ``k * nbits``. A thread's run of whole, aligned 32-bit words moves with plain word loads
and stores; any other element is read bytewise and written with a compare-and-swap on the
aligned word(s) holding it, since its bytes may hold other threads' elements.
"""

from __future__ import annotations

from tilus.backends.cuda.codegen.scalar import ctype, to_float
from tilus.dtypes import DataType, float32, int32
from tilus.errors import TilusCompileError
from tilus.ir import inst as I
from tilus.ir import inst_lowbit as L
from tilus.ir.enums import TensorKind
from tilus.ir.tensor import TensorVar
from tilus.ir.visit import fields
from tilus.passes.walk import instructions

#: What a sub-byte register or global tile may take part in on the CUDA backend.
_ALLOWED = (
    I.GlobalView,
    I.LoadGlobal,
    I.StoreGlobal,
    I.CastTensor,
    I.AllocRegister,
    I.AssignTensor,  # the same packed words
    L.ViewTensor,
    I.PrintTensor,  # decoded element by element
)


def packed(dtype) -> bool:
    """Whether ``dtype`` is bit-packed (a width that is not whole bytes)."""
    return isinstance(dtype, DataType) and dtype.nbits % 8 != 0


def num_words(n: int, nbits: int) -> int:
    """32-bit words holding ``n`` packed elements of ``nbits`` bits."""
    return max(1, -(-n * nbits // 32))


def _tensors(inst):
    for _, v in fields(inst):
        if isinstance(v, TensorVar):
            yield v
        elif isinstance(v, tuple):
            yield from (x for x in v if isinstance(x, TensorVar))


def check_program(fn) -> None:
    """Refuse, at its line, the first use of a dtype the CUDA backend cannot lower: a dtype
    with no C type, or a sub-byte tile in an instruction other than global views, global
    loads/stores, casts, ``view``, ``print_tensor``, ``assign`` and uninitialized allocation,
    or in shared memory.

    Raises:
        TilusCompileError: names the dtype, the tile and what to do instead.
    """
    for p in fn.params:
        base = getattr(p.dtype, "base", p.dtype)
        if isinstance(base, DataType) and not packed(base):
            _ctype_or_error(base, f"parameter {p.name!r}", None)
    for stmt, inst in instructions(fn.body):
        for t in _tensors(inst):
            if not isinstance(t, TensorVar):
                continue
            dt = t.dtype
            if packed(dt):
                if t.kind == TensorKind.SHARED:
                    raise TilusCompileError(
                        f"CUDA backend: shared tile %{t.name} of sub-byte {dt} is not supported "
                        "yet (stage the packed bytes as uint8 and view them in registers)",
                        stmt.loc,
                    )
                if not isinstance(inst, _ALLOWED) or (
                    isinstance(inst, I.AllocRegister) and inst.init is not None
                ):
                    raise TilusCompileError(
                        f"CUDA backend: {inst.NAME} on the {dt} tile %{t.name} is not supported: "
                        "sub-byte tiles are loaded, stored, viewed and cast; cast to a wider "
                        "type first",
                        stmt.loc,
                    )
            else:
                _ctype_or_error(dt, f"%{t.name}", stmt.loc)


def _ctype_or_error(dt, what, loc):
    try:
        ctype(dt)
    except TypeError:
        raise TilusCompileError(
            f"CUDA backend: {what} has dtype {dt}, which the CUDA backend does not lower yet",
            loc,
        ) from None


# --- bits of packed registers -------------------------------------------------------------------


def get(ctx, t: TensorVar, i: int) -> str:
    """C code of the code (uint32) of packed register ``i`` of ``t``."""
    return get_bits(ctx.name(t), i * t.dtype.nbits, t.dtype.nbits)


def get_bits(words: str, bit: int, width: int) -> str:
    """C code of ``width`` bits (<= 32) at constant ``bit`` of the word array ``words``."""
    k, s = divmod(bit, 32)
    mask = "" if width == 32 else f" & {(1 << width) - 1:#x}u"
    if s == 0:
        return f"({words}[{k}]{mask})" if mask else f"{words}[{k}]"
    if s + width <= 32:
        return f"(({words}[{k}] >> {s}){mask})"
    return f"((({words}[{k}] >> {s}) | ({words}[{k + 1}] << {32 - s})){mask})"


def put_bits(ctx, words: str, bit: int, width: int, code: str) -> None:
    """OR ``code`` (its low ``width`` bits) into zeroed words at constant ``bit``."""
    k, s = divmod(bit, 32)
    m = f"({code})" if width == 32 else f"(({code}) & {(1 << width) - 1:#x}u)"
    ctx.emit(f"{words}[{k}] |= {m}" + (f" << {s};" if s else ";"))
    if s + width > 32:
        ctx.emit(f"{words}[{k + 1}] |= {m} >> {32 - s};")


def zero_words(ctx, t: TensorVar, layout) -> None:
    """Clear the words of packed tile ``t``."""
    n = num_words(layout.local_size, t.dtype.nbits)
    ctx.emit("#pragma unroll")
    ctx.emit(f"for (int k = 0; k < {n}; ++k) {ctx.name(t)}[k] = 0u;")


# --- element codes <-> values --------------------------------------------------------------------


def _params(dt: DataType) -> str:
    ieee = "true" if dt.exponent_bits == 5 else "false"
    return f"{dt.exponent_bits}, {dt.mantissa_bits}, {ieee}"


def decode(code: str, dt: DataType) -> tuple[str, DataType]:
    """C code of the value of a code of sub-byte ``dt``: (code, the C value's dtype)."""
    nb = dt.nbits
    if dt.is_float():
        return f"tl_dec_sf<{_params(dt)}>({code})", float32
    if dt.kind == "int":
        return f"(((int)({code} << {32 - nb})) >> {32 - nb})", int32
    return f"((int)({code}))", int32


def encode(value: str, sd: DataType, dd: DataType) -> str:
    """C code of the code (uint32) of ``value`` (C value of dtype ``sd``) in sub-byte ``dd``,
    as ``tilus.backends.interp.numeric.convert`` converts."""
    if dd.is_float() and dd.exponent_bits < 5:  # no inf/NaN codes: the branch-free form
        return f"tl_enc_sfn<{dd.exponent_bits}, {dd.mantissa_bits}>({to_float(value, sd)})"
    if dd.is_float():
        return f"tl_enc_sf<{_params(dd)}>({to_float(value, sd)})"
    if sd.is_float():  # truncate toward zero, saturate; NaN -> 0 (cvt.rzi.s32.f32 gives 0)
        x = to_float(value, sd)
        lo, hi = dd.min_value(), dd.max_value()
        return f"((uint32_t)tl_max({lo}, tl_min({hi}, __float2int_rz({x}))))"
    return f"((uint32_t)({value}))"  # integers wrap (the mask is applied on insertion)


def bits_of(code: str, dt: DataType) -> str:
    """The bits (uint32, or uint64 for 64-bit types) of a C value of a byte-sized dtype."""
    if dt.name == "float32":
        return f"__float_as_uint({code})"
    if dt.name == "float64":
        return f"(uint64_t)__double_as_longlong({code})"
    return f"((uint32_t)({_UINT[dt.nbits]})({code}))"


def from_bits(bits: str, dt: DataType) -> str:
    """A C value of byte-sized ``dt`` with the given bits."""
    if dt.name == "float32":
        return f"__uint_as_float({bits})"
    if dt.name == "float64":
        return f"__longlong_as_double((long long)({bits}))"
    return f"({ctype(dt)})({_UINT[dt.nbits]})({bits})"


_UINT = {8: "uint8_t", 16: "uint16_t", 32: "uint32_t", 64: "uint64_t"}
