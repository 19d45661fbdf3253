"""Generic instructions available as ``self.<name>`` in Scripts and Classes."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tilus.dtypes import DataType, PointerType, boolean, float32, int32
from tilus.ir import inst as I
from tilus.ir.builtins import BLOCK_IDX, GRID_DIM, Dim3
from tilus.ir.enums import TensorKind, Unroll, VarKind
from tilus.ir.expr import Binary, Const, Expr, Var, as_expr, call, cast
from tilus.ir.printer import print_ir
from tilus.ir.tensor import TensorVar
from tilus.lang.builder import current
from tilus.lang.instructions.layouts import annotate
from tilus.lang.instructions.tiles import (  # noqa: F401 - re-exported for the front end
    REDUCE_OPS,
    UNARY_OPS,
    _dtype,
    _int_list,
    broadcast_shape,
    into,
    out_tile,
    permute_tensor,
    reshape_tensor,
    slice_tensor,
    squeeze_tensor,
    sub_tile_args,
    tensor_binary,
    tensor_unary,
    tile_dims,
    unsqueeze_tensor,
)


@dataclass(frozen=True)
class ThreadGroupSpec:
    """What ``with self.thread_group(...)`` opens (consumed by the transpiler)."""

    begin: int  # relative to the parent; -1 = any one elected thread
    num_threads: int


@dataclass(frozen=True)
class RangeSpec:
    """What ``self.range(...)`` / ``range(...)`` iterates (consumed by the transpiler)."""

    start: object
    stop: object
    step: int
    unroll: object


def _conjuncts(e: Expr) -> list[Expr]:
    """The operands of a chain of ``and`` (``&&``, or ``&`` on booleans)."""
    if type(e) is Binary and (e.op == "&&" or (e.op == "&" and e.dtype.kind == "bool")):
        return _conjuncts(e.a) + _conjuncts(e.b)
    return [e]


def _is_divisibility(e: Expr) -> bool:
    """``param % c == 0`` with an integer kernel parameter and a positive constant ``c``."""
    if type(e) is not Binary or e.op != "==" or type(e.a) is not Binary or e.a.op != "%":
        return False
    p, c, zero = e.a.a, e.a.b, e.b
    return (
        type(p) is Var
        and p.kind == VarKind.PARAM
        and isinstance(p.dtype, DataType)
        and p.dtype.is_integer()
        and type(c) is Const
        and c.value > 0
        and type(zero) is Const
        and zero.value == 0
    )


class GenericInstructions:
    """Tensor creation, data movement, compute, synchronization and debugging."""

    # --- launch configuration and properties ---------------------------------------------------
    @property
    def attrs(self):
        """Launch attributes: ``self.attrs.blocks`` (grid) and ``self.attrs.warps``."""
        return current().attrs

    @property
    def blockIdx(self) -> Dim3:  # noqa: N802 - CUDA's name
        """The block index (x, y, z)."""
        return BLOCK_IDX

    @property
    def gridDim(self) -> Dim3:  # noqa: N802 - CUDA's name
        """The grid size (x, y, z)."""
        return GRID_DIM

    @property
    def current_thread_begin(self) -> int:
        """First thread (absolute) of the innermost thread group."""
        return current().group.abs_begin

    @property
    def current_num_threads(self) -> int:
        """Threads in the innermost thread group."""
        return current().group.size

    @property
    def current_thread_end(self) -> int:
        """One past the last thread (absolute) of the innermost thread group."""
        g = current().group
        return g.abs_begin + g.size

    # --- thread groups and loops ---------------------------------------------------------------
    def thread_group(self, thread_begin: int, num_threads: int) -> ThreadGroupSpec:
        """Restrict the ``with`` body to threads [begin, begin+num) of the current group."""
        b = current()
        for v, n in ((thread_begin, "thread_begin"), (num_threads, "num_threads")):
            if isinstance(v, bool) or not isinstance(v, int):
                raise b.error(f"thread_group {n} must be a compile-time int, got {v!r}")
        g = b.group
        if thread_begin < 0 or num_threads <= 0 or thread_begin + num_threads > g.size:
            raise b.error(
                f"thread_group({thread_begin}, {num_threads}) does not fit in the "
                f"current group of {g.size} threads"
            )
        return ThreadGroupSpec(thread_begin, num_threads)

    def single_thread(self, thread: int = -1) -> ThreadGroupSpec:
        """Run the ``with`` body on one thread of the current group (-1: any elected one)."""
        if thread == -1:
            current().group  # noqa: B018 - checks warps was set
            return ThreadGroupSpec(-1, 1)
        return self.thread_group(thread, 1)

    def single_warp(self, warp: int = 0) -> ThreadGroupSpec:
        """Run the ``with`` body on warp ``warp`` of the current group."""
        return self.thread_group(32 * warp, 32)

    def warp_group(self, warp_begin: int, num_warps: int) -> ThreadGroupSpec:
        """Run the ``with`` body on warps [warp_begin, warp_begin + num_warps)."""
        return self.thread_group(32 * warp_begin, 32 * num_warps)

    def range(self, start, stop=None, step=None, /, *, unroll=None) -> RangeSpec:
        """A loop range for ``for i in self.range(...)``; ``unroll`` is an int or ``"all"``."""
        b = current()
        if stop is None:
            start, stop = 0, start
        step = 1 if step is None else step
        if isinstance(step, Const):
            step = step.value
        if isinstance(step, bool) or not isinstance(step, int) or step == 0:
            raise b.error(f"range step must be a nonzero compile-time int, got {step!r}")
        if isinstance(unroll, str) and unroll == Unroll.ALL:
            unroll = Unroll.ALL
        elif unroll is not None and (
            isinstance(unroll, bool) or not isinstance(unroll, int) or unroll <= 0
        ):
            raise b.error(f"unroll must be a positive int or 'all', got {unroll!r}")
        return RangeSpec(start, stop, step, unroll)

    # --- scalar helpers ------------------------------------------------------------------------
    def fast_divmod(self, a, b):
        """``(a // b, a % b)`` for a dividend ``a >= 0`` and a divisor ``b >= 1``.

        On the GPU, an ``int32`` divisor that only depends on int/bool kernel parameters and
        constants (``num_m * swizzle`` with ``num_m = cdiv(m_size, block_m)``) is computed by the
        launcher, with its magic numbers, once per set of integer arguments and passed as a
        hidden kernel parameter; the division is then a multiply-high, an add and a shift (the
        remainder one multiply more). Such a divisor must be in [1, 2**31 - 1] whenever the
        kernel launches (else ``TilusArgumentError``), even if this call is in a branch the
        launch does not take. Constant divisors compile to the compiler's own multiply-shift;
        divisors that vary inside the kernel (block/thread indices, loop variables, reassigned
        variables) use plain ``/`` and ``%``. Negative dividends are not supported (undefined on
        the GPU). The interpreter computes ``divmod(a, b)``. See tilus/passes/fast_divmod.py.

        Returns:
            ``(quotient, remainder)``: Python ints when both operands are, else scalar
            expressions.
        """
        bld = current()
        if isinstance(a, (int, np.integer)) and isinstance(b, (int, np.integer)):
            return divmod(int(a), int(b))
        a = bld.expect_scalar(a, "fast_divmod dividend", None)
        b = bld.expect_scalar(b, "fast_divmod divisor", None)
        return call("fastdiv", a, b), call("fastmod", a, b)

    def static_assert(self, cond, msg: str = ""):
        """Check a compile-time condition."""
        b = current()
        if isinstance(cond, Const):
            cond = cond.value
        if isinstance(cond, Expr):
            raise b.error("static_assert needs a compile-time condition")
        if not cond:
            raise b.error(f"static assertion failed{': ' + msg if msg else ''}")

    def assume(self, cond):
        """State that integer kernel parameters are multiples of constants, for every launch.

        ``cond`` is ``param % c == 0`` (``c`` a positive compile-time int), or several joined
        with ``and``. The fact is recorded on the kernel: the CUDA backend hands it to the C++
        compiler (``__builtin_assume``), the interpreter checks it when the kernel starts and
        raises at this line if it does not hold. A Python ``True`` is a no-op, ``False`` an
        error.
        """
        b = current()
        if isinstance(cond, Const):
            cond = bool(cond.value)
        if cond is True:
            return
        if cond is False:
            raise b.error("assume() got a condition that is always false")
        if not isinstance(cond, Expr):
            raise b.error(f"assume() needs a condition on kernel parameters, got {cond!r}")
        for c in _conjuncts(cond):
            if not _is_divisibility(c):
                raise b.error(
                    f"assume() accepts only `param % c == 0` on int kernel parameters with a "
                    f"positive constant c (several joined with `and`), got `{print_ir(c)}`"
                )
            b.assumes.append((c, b.loc))

    # --- tensor creation -----------------------------------------------------------------------
    def register_tensor(self, *, dtype, shape, init=None, layout=None) -> TensorVar:
        """A register tile; ``init`` is a scalar or ``f(i, j, ...) -> value``; None: undefined.
        ``layout``: a ``RegisterLayout`` to pin (as ``annotate_layout``)."""
        b = current()
        dtype = _dtype(b, dtype)
        shape = _int_list(b, shape, "shape") if shape != [] else ()
        axes: tuple = ()
        init_e = None
        if callable(init) and not isinstance(init, Expr):
            axes = tuple(Var(f"i{k}", int32, VarKind.AXIS) for k in range(len(shape)))
            init_e = cast(as_expr(init(*axes)), dtype)
        elif init is not None:
            init_e = b.expect_scalar(init, "init", dtype)
        out = b.register(dtype, shape, "r")
        b.inst(I.AllocRegister(out, init_e, axes))
        if layout is not None:
            annotate(b, out, layout)
        return out

    def shared_tensor(self, *, dtype, shape, layout=None) -> TensorVar:
        """A tile in shared memory (contents undefined until written); ``layout``: a
        ``SharedLayout`` to store it in (as ``annotate_layout``)."""
        b = current()
        out = b.shared(_dtype(b, dtype), _int_list(b, shape, "shape"), "s")
        b.inst(I.AllocShared(out))
        if layout is not None:
            annotate(b, out, layout)
        return out

    def free_shared(self, tensor):
        """Release a shared tile; later allocations may reuse its space."""
        b = current()
        b.inst(
            I.FreeShared(b.expect_tensor(tensor, (TensorKind.SHARED,), "free_shared's argument"))
        )

    def global_view(self, ptr, *, dtype, shape, strides=None) -> TensorVar:
        """A global tensor of ``shape`` (row-major unless ``strides``) starting at ``ptr``."""
        b = current()
        dtype = _dtype(b, dtype)
        if not isinstance(ptr, Expr) or not isinstance(ptr.dtype, PointerType):
            raise b.error(
                f"global_view needs a pointer (a parameter annotated ~{dtype}), got {ptr!r}"
            )
        base = ptr.dtype.base
        packed_bytes = dtype.nbits % 8 and getattr(base, "name", None) in ("uint8", "int8")
        if base is not None and base != dtype and not packed_bytes:
            raise b.error(
                f"global_view of dtype {dtype} over a pointer to {base}"
                + (
                    " (sub-byte views take a void_p, ~uint8 or ~int8 pointer)"
                    if dtype.nbits % 8
                    else ""
                )
            )
        if not isinstance(shape, (list, tuple)) or not shape:
            raise b.error("global_view shape must be a non-empty list")
        shp = tuple(b.expect_scalar(s, f"shape[{i}]", int32) for i, s in enumerate(shape))
        shp = tuple(s.value if isinstance(s, Const) else s for s in shp)
        st = None
        if strides is not None:
            st = b.expect_offsets(strides, len(shp), "strides")
        out = b.global_(dtype, shp, "g")
        b.inst(I.GlobalView(out, ptr, st))
        return out

    # --- data movement -------------------------------------------------------------------------
    def load_global(self, src, /, *, offsets, shape, dims=None, out=None, cache=None):
        """Load a tile of ``shape`` at ``offsets``; out-of-bounds elements read 0. ``out``: a
        register tile of that shape and dtype to load into (and return). ``cache``: a hint for
        the vector accesses, ``"evict_first"`` (data read once: evicted first from the L1 and
        the L2), ``"evict_last"`` (data read again soon: kept), ``"no_allocate"`` (not kept in
        the L1); None (default) the hardware's policy. A hint changes no result."""
        b = current()
        b.expect_tensor(src, (TensorKind.GLOBAL,), "load_global's source")
        shape = _int_list(b, shape, "shape")
        offs = b.expect_offsets(offsets, src.ndim, "offsets")
        dims = tile_dims(src, len(shape), dims, "load_global")
        out = out_tile(b, out, src.dtype, shape, "load_global")
        b.inst(I.LoadGlobal(out, src, offs, dims, cache))
        return out

    def store_global(self, dst, src, *, offsets, dims=None, cache=None):
        """Store a register tile at ``offsets``; out-of-bounds elements are skipped. ``cache``:
        a hint for the vector accesses, ``"evict_first"`` / ``"evict_last"`` (as for
        ``load_global``) or ``"stream"`` (``st.global.cs``: written once); None the default."""
        b = current()
        b.expect_tensor(dst, (TensorKind.GLOBAL,), "store_global's destination")
        b.expect_tensor(src, (TensorKind.REGISTER,), "store_global's source")
        if src.dtype != dst.dtype:
            raise b.error(
                f"store_global of a {src.dtype} tile into a {dst.dtype} tensor; "
                f"cast it first with self.cast(x, dtype={dst.dtype})"
            )
        offs = b.expect_offsets(offsets, dst.ndim, "offsets")
        dims = tile_dims(
            dst, src.ndim, dims, "store_global", what=f"a {list(src.shape)} tile into a view"
        )
        b.inst(I.StoreGlobal(dst, src, offs, dims, cache))

    def load_shared(self, src, *, out=None) -> TensorVar:
        """Copy a whole shared tile into a register tile."""
        b = current()
        b.expect_tensor(src, (TensorKind.SHARED,), "load_shared's source")
        out = out if out is not None else b.register(src.dtype, src.shape, "r")
        b.inst(I.LoadShared(out, src))
        return out

    def store_shared(self, dst, src, *, offsets=None, dims=None):
        """Copy a register tile into a shared tile: the whole tile (same shape), or with
        ``offsets`` (one per shared dim) into the sub-tile there; ``dims`` lists which shared
        dims the register tile spans (the others are fixed at their offset), as for
        ``load_global``. Elements that fall outside the shared tile are skipped."""
        b = current()
        b.expect_tensor(dst, (TensorKind.SHARED,), "store_shared's destination")
        b.expect_tensor(src, (TensorKind.REGISTER,), "store_shared's source")
        if offsets is None and dims is None:
            if dst.shape != src.shape or dst.dtype != src.dtype:
                raise b.error(f"store_shared of {src.type_str()} into {dst.type_str()}")
            b.inst(I.StoreShared(dst, src))
            return
        offs, dims = sub_tile_args(b, dst, src, offsets, dims, "store_shared")
        b.inst(I.StoreShared(dst, src, offs, dims))

    # --- compute -------------------------------------------------------------------------------
    def cast(self, x, dtype) -> TensorVar:
        """Convert a register tile to ``dtype`` (round to nearest even)."""
        b = current()
        b.expect_tensor(x, (TensorKind.REGISTER,), "cast's operand")
        out = b.register(_dtype(b, dtype), x.shape, "r")
        b.inst(I.CastTensor(out, x))
        return out

    def dot(self, a, b_, c=None, /, *, acc_dtype=None, out=None) -> TensorVar:
        """``a @ b + c`` on register tiles (a [m, k], b [k, n]), accumulating in c's dtype."""
        b = current()
        for t, n in ((a, "a"), (b_, "b")):
            b.expect_tensor(t, (TensorKind.REGISTER,), f"dot operand {n}")
            if t.ndim != 2:
                raise b.error(f"dot operand {n} must be 2-D, got {t.type_str()}")
        if a.dtype != b_.dtype:
            raise b.error(f"dot operands have different dtypes {a.dtype} and {b_.dtype}")
        m, k = a.shape
        k2, n = b_.shape
        if k != k2:
            raise b.error(f"dot: a is [{m}, {k}] but b is [{k2}, {n}]; inner sizes differ")
        if c is None and acc_dtype is None and out is None:
            raise b.error("dot needs an accumulator c or acc_dtype=")
        if c is not None:
            b.expect_tensor(c, (TensorKind.REGISTER,), "dot accumulator c")
            if c.shape != (m, n):
                raise b.error(f"dot accumulator is {c.type_str()} but a @ b is [{m}, {n}]")
        rdtype = c.dtype if c is not None else out.dtype if out is not None else acc_dtype
        rdtype = _dtype(b, rdtype)
        if a.dtype.name == "tfloat32" and rdtype.name != "float32":
            raise b.error(f"a tfloat32 dot accumulates in float32, got a {rdtype} accumulator")
        if a.dtype.is_integer() != rdtype.is_integer():
            raise b.error(
                f"dot of {a.dtype} operands into a {rdtype} accumulator: integer operands "
                "accumulate in an integer type and float operands in a float type"
            )
        if out is None:
            out = b.register(rdtype, (m, n), "r")
        elif out.shape != (m, n):
            raise b.error(f"dot out= tile is {out.type_str()} but a @ b is [{m}, {n}]")
        b.inst(I.Dot(out, a, b_, c))
        return out

    def add(self, lhs, rhs, *, out=None):
        """Elementwise sum with broadcasting."""
        return tensor_binary("+", lhs, rhs, out)

    def maximum(self, lhs, rhs, *, out=None):
        """Elementwise maximum with broadcasting."""
        return tensor_binary("max", lhs, rhs, out)

    def minimum(self, lhs, rhs, *, out=None):
        """Elementwise minimum with broadcasting."""
        return tensor_binary("min", lhs, rhs, out)

    def where(self, cond, x, y, *, out=None) -> TensorVar:
        """``cond ? x : y`` elementwise; cond is a boolean tile."""
        b = current()
        b.expect_tensor(cond, (TensorKind.REGISTER,), "where's condition")
        if cond.dtype != boolean:
            raise b.error(f"where's condition must be a boolean tile, got {cond.dtype}")
        tiles = [t for t in (x, y) if isinstance(t, TensorVar)]
        if tiles:
            dtype = tiles[0].dtype
        elif all(isinstance(v, (bool, int, float)) for v in (x, y)):
            # two Python numbers: float32 if either is a float, else int32
            dtype = float32 if any(isinstance(v, float) for v in (x, y)) else int32
        else:
            xs = [b.expect_scalar(v, "where operand") for v in (x, y)]
            if xs[0].dtype != xs[1].dtype:
                raise b.error(
                    f"where's x and y have different dtypes {xs[0].dtype} and {xs[1].dtype}"
                )
            dtype = xs[0].dtype
        if len(tiles) == 2 and x.dtype != y.dtype:
            raise b.error(f"where's x and y have different dtypes {x.dtype} and {y.dtype}")
        xs = [
            t if isinstance(t, TensorVar) else b.expect_scalar(t, "where operand", dtype)
            for t in (x, y)
        ]
        shape = broadcast_shape(b, [cond.shape] + [t.shape for t in tiles], "where")
        out = out if out is not None else b.register(dtype, shape, "t")
        b.inst(I.Where(out, cond, xs[0], xs[1]))
        return out

    def _reduce(self, op, x, dim, keepdim, out, acc=None):
        b = current()
        if acc is not None:
            acc = _dtype(b, acc)
            acc = None if acc == float32 else acc  # float32 is the default
        b.expect_tensor(x, (TensorKind.REGISTER,), f"{op}'s operand")
        if op in ("any", "all") and x.dtype != boolean:
            raise b.error(f"{op} needs a boolean tile, got {x.dtype}")
        dims = list(range(x.ndim)) if dim is None else [dim] if isinstance(dim, int) else list(dim)
        for d in dims:
            if not -x.ndim <= d < x.ndim:
                raise b.error(f"{op}: dim {d} is out of range for a tile of rank {x.ndim}")
        dims = sorted({d % x.ndim for d in dims}, reverse=True)
        cur = x
        for i, d in enumerate(dims):
            shape = (
                tuple(1 if j == d else s for j, s in enumerate(cur.shape))
                if keepdim
                else cur.shape[:d] + cur.shape[d + 1 :]
            )
            o = out if (i == len(dims) - 1 and out is not None) else b.register(x.dtype, shape, "t")
            b.inst(I.Reduce(o, cur, op, d, bool(keepdim), acc))
            cur = o
        return cur

    def sum(self, x, *, dim=None, keepdim=False, out=None, acc_dtype=None):
        """Sum over ``dim`` (all dims when None). A float16/bfloat16 tile is summed in float32
        unless ``acc_dtype`` is its own dtype: then every partial sum is rounded to it, the
        even and odd elements as the halves of pairs (HADD2 on the GPU: half the
        instructions, the dtype's precision). The interpreter adds in that order, so the two
        agree bit for bit where a thread holds the whole reduced dim in order; across
        threads the GPU's partial sums meet in a butterfly."""
        return self._reduce("sum", x, dim, keepdim, out, acc_dtype)

    def max(self, x, *, dim=None, keepdim=False, out=None):
        """Maximum over ``dim``."""
        return self._reduce("max", x, dim, keepdim, out)

    def min(self, x, *, dim=None, keepdim=False, out=None):
        """Minimum over ``dim``."""
        return self._reduce("min", x, dim, keepdim, out)

    def any(self, x, *, dim=None, keepdim=False, out=None):
        """Logical or over ``dim`` (boolean tiles)."""
        return self._reduce("any", x, dim, keepdim, out)

    def all(self, x, *, dim=None, keepdim=False, out=None):
        """Logical and over ``dim`` (boolean tiles)."""
        return self._reduce("all", x, dim, keepdim, out)

    def scan(self, x, *, dim, op, exclusive=False, out=None) -> TensorVar:
        """Prefix ``op`` (add, mul, max, min, and, or, xor) of a register tile along ``dim``;
        ``exclusive``: element i combines elements 0..i-1 (element 0 is the identity)."""
        b = current()
        b.expect_tensor(x, (TensorKind.REGISTER,), "scan's operand")
        if isinstance(dim, bool) or not isinstance(dim, int) or not -x.ndim <= dim < x.ndim:
            raise b.error(f"scan: dim {dim!r} is out of range for a tile of rank {x.ndim}")
        out = out if out is not None else b.register(x.dtype, x.shape, "t")
        if out.shape != x.shape or out.dtype != x.dtype:
            raise b.error(f"scan out= tile is {out.type_str()}, the result is {x.type_str()}")
        b.inst(I.Scan(out, x, str(op), dim % x.ndim, bool(exclusive)))
        return out

    def cumsum(self, x, *, dim, exclusive=False, out=None) -> TensorVar:
        """Prefix sums along ``dim``."""
        return self.scan(x, dim=dim, op="add", exclusive=exclusive, out=out)

    def cumprod(self, x, *, dim, exclusive=False, out=None) -> TensorVar:
        """Prefix products along ``dim``."""
        return self.scan(x, dim=dim, op="mul", exclusive=exclusive, out=out)

    def transpose(self, x) -> TensorVar:
        """Swap the two dims of a 2-D tile."""
        b = current()
        if not isinstance(x, TensorVar) or x.ndim != 2:
            raise b.error("transpose needs a 2-D tile")
        return permute_tensor(x, (1, 0))

    def reshape(self, x, shape) -> TensorVar:
        """The elements of a register tile in row-major order, with a new shape."""
        return reshape_tensor(x, shape, "reshape")

    def reshape_shared(self, x, shape) -> TensorVar:
        """A view of a whole shared tile with a new shape (row-major order)."""
        b = current()
        b.expect_tensor(x, (TensorKind.SHARED,), "reshape_shared's operand")
        return reshape_tensor(x, shape, "reshape_shared")

    def squeeze(self, x, *, dim: int, out=None) -> TensorVar:
        """Drop dim ``dim`` (of size 1); ``out``: a register tile to copy the result into."""
        return into(self, squeeze_tensor(x, dim), out, "squeeze")

    def unsqueeze(self, x, *, dim: int, out=None) -> TensorVar:
        """Insert a dim of size 1 at ``dim``; ``out``: a register tile to copy it into."""
        return into(self, unsqueeze_tensor(x, dim), out, "unsqueeze")

    def flatten(self, x, *, out=None) -> TensorVar:
        """A register tile's elements in row-major order as one dim (``reshape`` to its size);
        ``out``: a register tile to copy them into."""
        return into(self, reshape_tensor(x, [x.size], "flatten"), out, "flatten")

    def assign(self, dst, src):
        """Copy register tile ``src`` into ``dst``."""
        b = current()
        b.expect_tensor(dst, (TensorKind.REGISTER,), "assign's destination")
        b.expect_tensor(src, (TensorKind.REGISTER,), "assign's source")
        if dst.shape != src.shape or dst.dtype != src.dtype:
            raise b.error(f"assign of {src.type_str()} into {dst.type_str()}")
        b.inst(I.AssignTensor(dst, src))

    # --- synchronization and debugging ---------------------------------------------------------
    def sync(self):
        """Barrier over every thread of the current thread group."""
        b = current()
        b.group  # noqa: B018 - requires warps
        b.inst(I.Sync())

    def printf(self, fmt: str, *args):
        """C-style printf from the first thread of the current group."""
        b = current()
        if not isinstance(fmt, str):
            raise b.error("printf's format must be a string literal")
        vals = tuple(b.expect_scalar(a, f"printf argument {i}") for i, a in enumerate(args))
        b.inst(I.Printf(fmt, vals))

    def print_tensor(self, msg: str, tensor, fmt: str | None = None):
        """Print a tile (register, shared or global) with a message, NumPy-style, every element
        formatted with ``fmt``: one printf conversion of a number (``%d``, ``%x``, ``%.3f``,
        ``%e``, ...; length modifiers are ignored), by default ``%5d`` for integers and
        ``%6.3f``/``%5.2f`` for floats. On the GPU the group's first thread prints it."""
        b = current()
        b.expect_tensor(
            tensor,
            (TensorKind.REGISTER, TensorKind.SHARED, TensorKind.GLOBAL),
            "print_tensor's tensor",
        )
        b.inst(I.PrintTensor(str(msg), tensor, fmt))


for _op in [op for op in UNARY_OPS if op not in ("neg", "not", "bitnot")]:

    def _make(op):
        def f(self, x, *, out=None):
            return tensor_unary(op, x, out)

        f.__name__ = op
        f.__doc__ = f"Elementwise {op} of a register tile."
        return f

    setattr(GenericInstructions, _op, _make(_op))
