"""``print_tensor`` on the GPU: register, shared and global tiles, printed as on the interpreter."""

# The group's first thread prints the whole tile with printf, element by element in row-major
# order, with NumPy's brackets and line breaks (``np.array2string`` with a space separator).
# A register tile is first gathered row-major in the group's shared scratch; a shared tile is
# read through its layout (swizzle, column blocks, permuted views) and a global view through
# its strides. The group waits before (so the tile's earlier writes are seen) and, for shared
# and global tiles, after printing (so nobody overwrites it while it is read).

from __future__ import annotations

from tilus.backends.cuda.codegen import lowbit as B
from tilus.backends.cuda.codegen.convert import gather
from tilus.backends.cuda.codegen.memory import _shared_elem as shared_elem
from tilus.backends.cuda.codegen.memory import shared_offset, swizzled
from tilus.backends.cuda.codegen.scalar import ctype, to_float
from tilus.backends.cuda.tables import CODEGEN_RULES
from tilus.dtypes import float32, int32
from tilus.ir import inst as I
from tilus.ir.enums import TensorKind


def c_string(text: str) -> str:
    """A C string literal of ``text``."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def device_format(fmt: str) -> tuple[str, str]:
    """The printf format of one element on the device and the C type its value is passed as.

    The interpreter formats a Python int or float with C's rules and no length modifiers, so
    integer conversions become ``%lld`` of a ``long long`` (``%u`` prints as ``%d`` there) and
    float ones take a ``double``, whatever the tile's dtype (a ``%d`` of a float truncates)."""
    m = I.PrintTensor.conversion(fmt)
    flags, conv = m.group(1), m.group(2)
    if conv in "diouxX":
        spec, ctyp = f"%{flags}ll{'d' if conv == 'u' else conv}", "long long"
    else:
        spec, ctyp = f"%{flags}{conv}", "double"
    return fmt[: m.start()] + spec + fmt[m.end() :], ctyp


def _packed_element(ctx, name: str, addr: str, dt) -> str:
    """The value of element ``addr`` of a bit-packed global view (its code's bits from one or
    two bytes, decoded as the interpreter reads it)."""
    nb = dt.nbits
    bit, v = ctx.fresh("bit"), ctx.fresh("code")
    ctx.emit(f"const int64_t {bit} = ({addr}) * {nb};")
    byte, sh = f"{name}[{bit} >> 3]", f"({bit} & 7)"
    ctx.emit(f"uint32_t {v} = (uint32_t){byte} >> {sh};")
    if 8 % nb:  # may straddle into the next byte
        nxt = f"{name}[({bit} >> 3) + 1]"
        ctx.emit(f"if ({sh} + {nb} > 8) {v} |= (uint32_t){nxt} << (8 - {sh});")
    return B.decode(f"({v} & {(1 << nb) - 1:#x}u)", dt)[0]


def _strides(shape: list[str]) -> list[str]:
    """Row-major element strides of a shape of C expressions."""
    out, acc = [], "1"
    for s in reversed(shape):
        out.append(acc)
        acc = s if acc == "1" else f"{acc} * {s}"
    return list(reversed(out))


@CODEGEN_RULES.rule(I.PrintTensor)
def print_tensor(ctx, inst, expr):
    """Print the tile from the group's first thread (see the module comment)."""
    t = inst.tensor
    fmt, ctyp = device_format(inst.fmt or I.PrintTensor.default_fmt(t.dtype))
    sync = CODEGEN_RULES.lookup(I.Sync)
    ctx.open("")
    packed = B.packed(t.dtype)
    vdt = (float32 if t.dtype.is_float() else int32) if packed else t.dtype  # C value's dtype
    if t.kind == TensorKind.REGISTER:
        if packed:  # the decoded values, as float or int
            buf = gather(ctx, inst, t, ctype(vdt), lambda i: B.decode(B.get(ctx, t, i), t.dtype)[0])
        else:
            buf = gather(ctx, inst, t)  # waits for the group after writing
        shape = [str(n) for n in t.shape]

        def read(k, coords):
            return f"{buf}[{k}]"

    elif t.kind == TensorKind.SHARED:
        sync(ctx, None, None)
        view = ctx.plan.shared[t]
        off, w, ct = shared_offset(ctx, t), view.layout.swizzle, ctype(t.dtype)
        shape = [str(n) for n in t.shape]

        def read(k, coords):
            addr = swizzled(ctx, w, t, off, shared_elem(view, coords))
            return f"*((const {ct}*)(tl_smem_ptr + {addr}))"

    else:
        sync(ctx, None, None)
        name, gshape, gstrides = ctx.gview_info[t]
        shape = [f"(int64_t)({s})" if not s.isdigit() else s for s in gshape]

        def read(k, coords):
            parts = [c if s == "1" else f"({c}) * {s}" for c, s in zip(coords, gstrides)]
            addr = " + ".join(parts) or "0"
            if not packed:
                return f"{name}[{addr}]"
            return _packed_element(ctx, name, addr, t.dtype)

    lead = "true" if ctx.group.size == 1 else f"threadIdx.x == {ctx.group.begin}"
    ctx.open(f"if ({lead})")
    ctx.emit(f'printf("%s\\n", {c_string(inst.msg)});')
    nd = t.ndim
    if nd == 0:
        val = f"({ctyp})({to_float(read('0', []), vdt)})"
        ctx.emit(f"printf({c_string(fmt + chr(10))}, {val});")
    else:
        _print_elements(ctx, t, shape, read, fmt, ctyp, vdt)
    ctx.close()
    if t.kind != TensorKind.REGISTER:
        sync(ctx, None, None)  # the tile is not overwritten while it is read
    ctx.close()


def _print_elements(ctx, t, shape, read, fmt, ctyp, vdt):
    """The loop over the elements with NumPy's brackets: ``[[a b]\\n [c d]]``, a blank line
    more between blocks of each outer dim."""
    nd = t.ndim
    strides = _strides(shape)
    size = ctx.fresh("n")
    ctx.emit(f"const int64_t {size} = {' * '.join(shape)};")
    k = "tl_k"
    coords = []
    for d, st in enumerate(strides):
        c = k if st == "1" else f"({k} / ({st}))"
        coords.append(c if d == 0 else f"{c} % ({shape[d]})")
    ctx.open(f"for (int64_t {k} = 0; {k} < {size}; ++{k})")
    # one printf per element: the brackets and breaks before it, then the element
    ctx.emit(f'const char* tl_sep = "{"[" * nd}";')
    ctx.open(f"if ({k} != 0)")
    ctx.emit('tl_sep = " ";')
    for j in range(1, nd):  # the outermost dim whose block ends here wins
        text = "]" * j + "\\n" * j + " " * (nd - j) + "[" * j
        ctx.emit(f'if ({k} % ({strides[nd - 1 - j]}) == 0) tl_sep = "{text}";')
    ctx.close()
    val = f"({ctyp})({to_float(read(k, coords), vdt)})"
    ctx.emit(f"printf({c_string('%s' + fmt)}, tl_sep, {val});")
    ctx.close()
    ctx.emit(f'printf({size} == 0 ? "[]\\n" : "{"]" * nd}\\n");')
