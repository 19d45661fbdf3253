"""Tile operations shared by the instruction methods and the transpiler's operators."""

from __future__ import annotations

import numpy as np

from tilus.dtypes import DataType, boolean, int32
from tilus.ir import inst as I
from tilus.ir.enums import TensorKind
from tilus.ir.expr import Const, Expr, TensorElement
from tilus.ir.tensor import TensorVar
from tilus.lang.builder import current

#: The elementwise unary ops and the reductions of the front end (``self.<op>``).
UNARY_OPS = (
    "neg",
    "not",
    "abs",
    "exp",
    "exp2",
    "log",
    "log2",
    "sqrt",
    "rsqrt",
    "sin",
    "cos",
    "tanh",
    "square",
    "round",
    "floor",
    "ceil",
    "bitnot",
    "tan",
    "asin",
    "acos",
    "atan",
    "sinh",
    "cosh",
    "asinh",
    "acosh",
    "atanh",
    "trunc",
    "isnan",
    "isinf",
)
REDUCE_OPS = ("sum", "max", "min", "any", "all")


def _int_list(b, value, what) -> tuple[int, ...]:
    if isinstance(value, int):
        value = [value]
    if not isinstance(value, (list, tuple)):
        raise b.error(f"{what} must be a list of compile-time ints, got {type(value).__name__}")
    out = []
    for v in value:
        if isinstance(v, Const) and v.dtype.is_integer():
            v = v.value
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise b.error(f"{what} must hold compile-time ints, got {v!r}")
        if v <= 0:
            raise b.error(f"{what} must hold positive ints, got {v}")
        out.append(int(v))
    return tuple(out)


def _dtype(b, value, what="dtype") -> DataType:
    if not isinstance(value, DataType):
        raise b.error(f"{what} must be a tilus data type such as float16, got {value!r}")
    return value


def broadcast_shape(b, shapes, what: str) -> tuple[int, ...]:
    try:
        return tuple(int(s) for s in np.broadcast_shapes(*shapes))
    except ValueError:
        raise b.error(
            f"{what}: shapes {' and '.join(str(list(s)) for s in shapes)} do not broadcast"
        ) from None


def tensor_binary(op: str, a, b_, out=None) -> TensorVar:
    """Elementwise ``a op b`` where at least one side is a register tile."""
    b = current()
    tiles = [x for x in (a, b_) if isinstance(x, TensorVar)]
    for t in tiles:
        if t.kind != TensorKind.REGISTER:
            raise b.error(f"operator {op} works on register tiles; load the {t.kind} tile first")
    if len(tiles) == 2 and a.dtype != b_.dtype:
        raise b.error(
            f"operands of {op} have different dtypes {a.dtype} and {b_.dtype}; "
            "convert one with self.cast(x, dtype=...)"
        )
    dtype = tiles[0].dtype
    ops = []
    for x in (a, b_):
        if isinstance(x, TensorVar):
            ops.append(x)
        else:
            ops.append(b.expect_scalar(x, f"operand of {op}", dtype))
    if op in ("&", "|", "^", "<<", ">>", "%") and dtype.is_float() and op != "%":
        raise b.error(f"bitwise operator {op} needs integer tiles, got {dtype}")
    shape = broadcast_shape(b, [t.shape for t in tiles], f"operator {op}")
    rdtype = boolean if op in ("==", "!=", "<", "<=", ">", ">=") else dtype
    if out is None:
        out = b.register(rdtype, shape, "t")
    elif out.shape != shape or out.dtype != rdtype:
        raise b.error(
            f"out= tile is {out.type_str()} but the result is "
            f"register[{rdtype}; {', '.join(map(str, shape))}]"
        )
    b.inst(I.ElementwiseBinary(out, op, ops[0], ops[1]))
    return out


#: Unary ops defined on floating-point tiles only.
FLOAT_ONLY = (
    "exp", "exp2", "log", "log2", "sqrt", "rsqrt", "sin", "cos", "tanh", "tan", "asin", "acos",
    "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "trunc", "isnan", "isinf",
)  # fmt: skip


def tensor_unary(op: str, x, out=None) -> TensorVar:
    """Elementwise ``op(x)`` on a register tile."""
    b = current()
    b.expect_tensor(x, (TensorKind.REGISTER,), f"the operand of {op}")
    if op in FLOAT_ONLY and not x.dtype.is_float():
        raise b.error(f"{op} needs a floating-point tile, got {x.dtype}")
    rdtype = boolean if op in ("not", "isnan", "isinf") else x.dtype
    out = out if out is not None else b.register(rdtype, x.shape, "t")
    b.inst(I.ElementwiseUnary(out, op, x))
    return out


def slice_tensor(t: TensorVar, index) -> TensorVar | Expr:
    """``t[i, j]``: drops integer-indexed dims; a full index of a register tile is a scalar."""
    b = current()
    idx = index if isinstance(index, tuple) else (index,)
    if len(idx) > t.ndim:
        raise b.error(f"too many indices ({len(idx)}) for a tile of rank {t.ndim}")
    ind: list = []
    for i, x in enumerate(idx):
        if isinstance(x, slice):
            if x != slice(None):
                raise b.error("partial slices (a:b) are not supported; use ':' for a whole dim")
            ind.append(None)
        else:
            e = b.expect_scalar(x, f"index {i}", int32)
            if (
                isinstance(e, Const)
                and isinstance(t.shape[i], int)
                and not 0 <= e.value < t.shape[i]
            ):
                raise b.error(f"index {e.value} is out of range for dim {i} of size {t.shape[i]}")
            ind.append(e)
    ind += [None] * (t.ndim - len(ind))
    if t.kind == TensorKind.REGISTER and all(i is not None for i in ind):
        return TensorElement(t, tuple(ind), t.dtype)
    shape = tuple(s for s, i in zip(t.shape, ind) if i is None)
    cls = type(t)
    out = cls(b.fresh(b.take_hint(t.name)), t.dtype, shape)
    b.inst(I.SliceTensor(out, t, tuple(ind)))
    return out


def permute_tensor(t: TensorVar, dims) -> TensorVar:
    b = current()
    dims = tuple(dims)
    if sorted(dims) != list(range(t.ndim)):
        raise b.error(f"permutation {list(dims)} does not match a tile of rank {t.ndim}")
    out = type(t)(b.fresh(b.take_hint(t.name + "_t")), t.dtype, tuple(t.shape[d] for d in dims))
    b.inst(I.PermuteTensor(out, t, dims))
    b.permuted[out] = (t, dims)
    return out


def reshape_tensor(x, shape, what="reshape") -> TensorVar:
    """A tile with the same elements (row-major) and a new shape."""
    b = current()
    if not isinstance(x, TensorVar) or x.kind == TensorKind.GLOBAL:
        raise b.error(f"{what} needs a register or shared tile")
    shape = _int_list(b, shape, "shape") if shape not in ([], ()) else ()
    if int(np.prod(shape)) != int(np.prod(x.shape)):
        raise b.error(
            f"{what}: cannot view {x.type_str()} as shape {list(shape)} "
            f"({int(np.prod(x.shape))} vs {int(np.prod(shape))} elements)"
        )
    out = type(x)(b.fresh(b.take_hint(x.name)), x.dtype, tuple(shape))
    b.inst(I.ReshapeTensor(out, x))
    return out


def squeeze_tensor(x, dim: int) -> TensorVar:
    """Drop a dim of size 1."""
    b = current()
    if not isinstance(x, TensorVar) or not -x.ndim <= dim < x.ndim or x.shape[dim] != 1:
        raise b.error(f"squeeze(dim={dim}) needs a dim of size 1")
    d = dim % x.ndim
    return reshape_tensor(x, x.shape[:d] + x.shape[d + 1 :], "squeeze")


def unsqueeze_tensor(x, dim: int) -> TensorVar:
    """Insert a dim of size 1."""
    b = current()
    if not isinstance(x, TensorVar) or not -x.ndim - 1 <= dim <= x.ndim:
        raise b.error(f"unsqueeze(dim={dim}) is out of range")
    d = dim % (x.ndim + 1)
    return reshape_tensor(x, x.shape[:d] + (1,) + x.shape[d:], "unsqueeze")


def out_tile(b, out, dtype, shape, what: str) -> TensorVar:
    """The register tile an instruction writes: ``out`` when given (checked against the
    result's dtype and shape), else a new one."""
    if out is None:
        return b.register(dtype, tuple(shape), "r")
    b.expect_tensor(out, (TensorKind.REGISTER,), f"{what}'s out=")
    if out.dtype != dtype or tuple(out.shape) != tuple(shape):
        raise b.error(
            f"{what}: out= tile is {out.type_str()} but the result is "
            f"register[{dtype}; {', '.join(map(str, shape))}]"
        )
    return out


def into(script, t: TensorVar, out, what: str) -> TensorVar:
    """``t``, or with ``out`` given its copy in ``out`` (checked like ``out_tile``)."""
    if out is None:
        return t
    script.assign(out_tile(current(), out, t.dtype, t.shape, what), t)
    return out


def sub_tile_args(b, dst, src, offsets, dims, what: str) -> tuple[tuple, tuple[int, ...]]:
    """The checked ``offsets`` and ``dims`` of a register tile ``src`` stored into part of
    shared tile ``dst`` (``dims``: the shared dims it spans, in order; by default all, when
    the ranks agree): one offset per shared dim, no dim of ``src`` larger than its own."""
    if offsets is None:
        offsets = [0] * dst.ndim
    offs = b.expect_offsets(offsets, dst.ndim, f"{what}'s offsets")
    dims = tile_dims(dst, src.ndim, dims, what, what=f"a rank-{src.ndim} tile into a tile")
    if list(dims) != sorted(dims):
        raise b.error(f"{what}: dims={list(dims)} must be in increasing order")
    for k, d in enumerate(dims):
        if src.shape[k] > dst.shape[d]:
            raise b.error(
                f"{what}: the tile's dim {k} ({src.shape[k]}) is larger than the shared tile's "
                f"dim {d} ({dst.shape[d]})"
            )
    if src.dtype != dst.dtype:
        raise b.error(f"{what} of {src.type_str()} into {dst.type_str()}")
    return offs, dims


def tile_dims(g, tile_rank, dims, name, what="a tile") -> tuple[int, ...]:
    """The dims of tensor ``g`` a tile of rank ``tile_rank`` spans: ``dims`` checked, or all
    of them when the ranks agree."""
    b = current()
    if dims is None:
        if tile_rank != g.ndim:
            raise b.error(
                f"{name}: {what} of rank {g.ndim} needs dims= to say which "
                f"{tile_rank} dims of the tensor the tile spans"
            )
        return tuple(range(g.ndim))
    dims = tuple(dims)
    if (
        len(dims) != tile_rank
        or len(set(dims)) != len(dims)
        or any(not 0 <= d < g.ndim for d in dims)
    ):
        raise b.error(
            f"{name}: dims={list(dims)} must list {tile_rank} distinct dims of a "
            f"rank-{g.ndim} tensor"
        )
    return dims
