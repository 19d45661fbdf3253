"""Interpreter rules of the generic instructions (tiles are whole NumPy arrays)."""

from __future__ import annotations

import dataclasses

import numpy as np

from tilus.backends.interp import races
from tilus.backends.interp.numeric import convert, poison, rounded_tree_sum
from tilus.backends.interp.packed import PackedGlobalView, is_packed, packed_view, read_region
from tilus.backends.interp.sched import Sync
from tilus.backends.interp.values import (
    GlobalViewValue,
    PointerValue,
    SharedAlloc,
    SharedView,
)
from tilus.dtypes import float32, int32
from tilus.errors import TilusRuntimeError, at
from tilus.ir import fp8
from tilus.ir import inst as I
from tilus.ir.cscalar import intdiv, intmod, shift_array
from tilus.ir.enums import TensorKind
from tilus.ir.evaluate import eval_scalar
from tilus.ir.expr import Binary, Call, Cast, Const, Expr, Select, Unary, Var
from tilus.ir.fp8 import is_fp8
from tilus.ir.rules import RuleTable
from tilus.ir.tensor import TensorVar

#: The interpreter's rule of every instruction: ``fn(task, inst, loc)``, a plain function or
#: a generator that yields requests to the scheduler (the interpreter runs every instruction).
INTERP_RULES = RuleTable("interpreter")
rule = INTERP_RULES.rule


# --- operand access --------------------------------------------------------------------------


def reg(task, t: TensorVar, loc) -> np.ndarray:
    """A register tile's array, checking it has no unretired wgmma update pending."""
    st = task.wgmma
    if st is not None and t in st.accumulators:
        st.fenced = False  # PTX: a generic register access needs a new wgmma.fence before mma
    if st is not None and t in st.pending_a:
        raise TilusRuntimeError(
            f"register tile `{t.name}` is read while the wgmma issued at "
            f"{at(st.pending_a[t])} still reads it as its A operand (PTX ISA 9.7.15.7.3: "
            f"its registers may not be accessed until the wgmma is retired); call "
            f"wgmma.commit_group() and wgmma.wait_group(...) first",
            loc,
        )
    if st is not None and t in st.pending_acc:
        raise TilusRuntimeError(
            f"tile `{t.name}` is used while a wgmma into it (issued at "
            f"{at(st.pending_acc[t])}) has not been retired; call wgmma.commit_group() and "
            f"wgmma.wait_group(...) first",
            loc,
        )
    try:
        return task.env[t]
    except KeyError:
        raise TilusRuntimeError(
            f"tile `{t.name}` is used before it is defined in this thread group", loc
        ) from None


def shared(task, t: TensorVar, loc) -> SharedView:
    v = task.env[t]
    if v.alloc.freed:
        raise TilusRuntimeError(f"shared tile `{t.name}` is used after free_shared", loc)
    return v


def scal(task, e, loc):
    return eval_scalar(e, task.env, loc)


def operand(task, x, dtype, loc):
    if isinstance(x, TensorVar):
        return reg(task, x, loc)
    return convert(np.asarray(scal(task, x, loc)), dtype)


# --- tiles -----------------------------------------------------------------------------------


@rule(I.AllocRegister)
def _alloc_register(task, inst, loc):
    out = inst.out
    if inst.init is None:
        task.env[out] = poison(out.shape, out.dtype)
    elif inst.axes:
        grids = np.indices(out.shape) if out.shape else []
        env = dict(task.env)
        env.update({a: g for a, g in zip(inst.axes, grids)})
        task.env[out] = convert(
            np.broadcast_to(vector_eval(inst.init, env, task, loc), out.shape), out.dtype
        )
    else:
        v = scal(task, inst.init, loc)
        task.env[out] = convert(np.full(out.shape, v), out.dtype)


@rule(I.AllocShared)
def _alloc_shared(task, inst, loc):
    out = inst.out
    arr = poison(out.shape, out.dtype)
    alloc = SharedAlloc(arr, task.cta.program.smem.offsets[out], out.dtype.nbits, out.name)
    task.cta.shared[out] = alloc
    task.env[out] = SharedView.of(alloc, arr, out.dtype, out.name)


@rule(I.FreeShared)
def _free_shared(task, inst, loc):
    shared(task, inst.tensor, loc).alloc.freed = True


@rule(I.GlobalView)
def _global_view(task, inst, loc):
    out = inst.out
    ptr = scal(task, inst.ptr, loc)
    if not isinstance(ptr, PointerValue):
        raise TilusRuntimeError("global_view needs a pointer", loc)
    shape = [int(scal(task, s, loc)) if isinstance(s, Expr) else int(s) for s in out.shape]
    if any(s < 0 for s in shape):
        raise TilusRuntimeError(f"global_view of `{ptr.name}` has a negative shape {shape}", loc)
    if inst.strides is None:
        strides = [int(np.prod(shape[i + 1 :])) for i in range(len(shape))]
    else:
        strides = [int(scal(task, s, loc)) for s in inst.strides]
    if is_packed(out.dtype):  # sub-byte: element numbers over the caller's bytes
        task.env[out] = packed_view(task.cta.packed, ptr, out.dtype, shape, strides, ptr.name, loc)
        return
    buf, offset = ptr.buf, ptr.offset
    st = out.dtype.np_storage
    if is_fp8(out.dtype) and buf.itemsize == 1 and ptr.fp8_views is not None:
        # bytes viewed as fp8: one float32 copy of the whole buffer per fp8 dtype, shared by
        # every view of it in the launch and encoded back into the bytes when the kernel ends
        views = ptr.fp8_views
        if out.dtype.name not in views:
            views[out.dtype.name] = fp8.decode(buf, out.dtype)
        buf = views[out.dtype.name]
    elif st != buf.dtype:  # a void pointer viewed as another dtype: reinterpret the bytes
        native = out.dtype.nbits == st.itemsize * 8 and ptr.dtype.nbits == buf.itemsize * 8
        if not native:
            raise TilusRuntimeError(
                f"global_view of dtype {out.dtype} over `{ptr.name}` ({ptr.dtype} array) would "
                f"reinterpret bits the interpreter stores widened; pass a {out.dtype} array",
                loc,
            )
        raw = buf.view(np.uint8)[offset * buf.itemsize :]
        buf, offset = raw[: raw.size // st.itemsize * st.itemsize].view(st), 0
    if all(shape):
        lo = offset + sum((n - 1) * s for n, s in zip(shape, strides) if s < 0)
        hi = offset + sum((n - 1) * s for n, s in zip(shape, strides) if s > 0)
        if lo < 0 or hi >= buf.size:
            raise TilusRuntimeError(
                f"global_view of shape {shape} (strides {strides}) over `{ptr.name}` reaches "
                f"element {hi if hi >= buf.size else lo}, outside the array passed as "
                f"`{ptr.name}` ({buf.size} elements)",
                loc,
            )
    arr = np.lib.stride_tricks.as_strided(
        buf[offset:],
        shape=shape,
        strides=[s * buf.itemsize for s in strides],
        writeable=buf.flags.writeable,
    )
    task.env[out] = GlobalViewValue(arr, out.dtype, ptr.name)


@rule(I.SliceTensor)
def _slice(task, inst, loc):
    src = inst.src
    idx = []
    shape = src.shape
    for d, i in enumerate(inst.indices):
        if i is None:
            idx.append(slice(None))
            continue
        v = int(scal(task, i, loc))
        n = shape[d] if isinstance(shape[d], int) else None
        val = task.env[src]
        n = (val.arr if hasattr(val, "arr") else val).shape[d]
        if not 0 <= v < n:
            raise TilusRuntimeError(
                f"index {v} is out of range for dim {d} (size {n}) of `{src.name}`", loc
            )
        idx.append(v)
    idx = tuple(idx)
    if src.kind != TensorKind.REGISTER:  # a view even when every dim is indexed (NumPy gives
        idx += (Ellipsis,)  # a copy of the one element for integer indices alone)
    val = task.env[src] if src.kind != TensorKind.REGISTER else reg(task, src, loc)
    if src.kind == TensorKind.REGISTER:
        task.env[inst.out] = val[idx]
    elif src.kind == TensorKind.SHARED:
        task.env[inst.out] = SharedView.of(val.alloc, val.arr[idx], src.dtype, inst.out.name)
    else:
        task.env[inst.out] = dataclasses.replace(val, arr=val.arr[idx])


@rule(I.PermuteTensor)
def _permute(task, inst, loc):
    src = inst.src
    if src.kind == TensorKind.REGISTER:
        task.env[inst.out] = np.transpose(reg(task, src, loc), inst.dims)
    elif src.kind == TensorKind.SHARED:
        v = shared(task, src, loc)
        task.env[inst.out] = SharedView.of(
            v.alloc, np.transpose(v.arr, inst.dims), src.dtype, inst.out.name
        )
    else:
        v = task.env[src]
        task.env[inst.out] = dataclasses.replace(v, arr=np.transpose(v.arr, inst.dims))


@rule(I.ReshapeTensor)
def _reshape(task, inst, loc):
    src = inst.src
    if src.kind == TensorKind.REGISTER:
        task.env[inst.out] = np.reshape(reg(task, src, loc), inst.out.shape)
    else:
        v = shared(task, src, loc)
        task.env[inst.out] = SharedView.of(
            v.alloc, np.reshape(v.arr, inst.out.shape), src.dtype, inst.out.name
        )


# --- global memory ---------------------------------------------------------------------------


def box_index(garr, offsets, dims, tile_shape):
    """Global index and tile index of the in-bounds part of a box (None if empty)."""
    gidx, tidx = [], [slice(None)] * len(tile_shape)
    for d, o in enumerate(offsets):
        n = garr.shape[d]
        if d in dims:
            k = dims.index(d)
            lo, hi = max(o, 0), min(o + tile_shape[k], n)
            if lo >= hi:
                return None, None
            gidx.append(slice(lo, hi))
            tidx[k] = slice(lo - o, hi - o)
        else:
            if not 0 <= o < n:
                return None, None
            gidx.append(o)
    return tuple(gidx), tuple(tidx)


def read_box(g: GlobalViewValue, offsets, dims, tile_shape, dtype, index=None) -> np.ndarray:
    """The tile at ``offsets`` with zeros where it leaves the tensor (GPU OOB rule);
    ``index`` is ``box_index``'s result when the caller has it."""
    out = np.zeros(tile_shape, dtype=dtype.np_storage)
    gidx, tidx = index or box_index(g.arr, offsets, dims, tile_shape)
    if gidx is not None:
        part = read_region(g, gidx)
        order = sorted(range(len(dims)), key=lambda k: dims[k])  # tile dims in global order
        part = np.transpose(part, np.argsort(order))
        out[tidx] = part
    return out


@rule(I.LoadGlobal)
def _load_global(task, inst, loc):
    g = task.env[inst.src]
    offs = [int(scal(task, o, loc)) for o in inst.offsets]
    index = box_index(g.arr, offs, inst.dims, inst.out.shape)
    if index[0] is not None:
        races.access_global(task, g.arr[index[0] + (...,)], False, loc, "load_global", g.name)
    task.env[inst.out] = read_box(g, offs, inst.dims, inst.out.shape, inst.out.dtype, index)


@rule(I.StoreGlobal)
def _store_global(task, inst, loc):
    g = task.env[inst.dst]
    if not g.arr.flags.writeable:
        raise TilusRuntimeError(
            f"the kernel stores into `{g.name}`, but the array passed for it is read-only", loc
        )
    src = reg(task, inst.src, loc)
    offs = [int(scal(task, o, loc)) for o in inst.offsets]
    gidx, tidx = box_index(g.arr, offs, inst.dims, src.shape)
    if gidx is None:
        return
    order = sorted(range(len(inst.dims)), key=lambda k: inst.dims[k])
    part = np.transpose(src[tidx], order)
    region = g.arr[gidx + (...,)]  # a view even when every dim is indexed
    races.access_global(task, region, True, loc, "store_global", g.name)
    if isinstance(g, PackedGlobalView):
        g.write(region, _stored(part, inst.src.dtype, inst.dst.dtype))
        return
    region[...] = _stored(part, inst.src.dtype, inst.dst.dtype).astype(g.arr.dtype, copy=False)


# --- shared memory ---------------------------------------------------------------------------


@rule(I.LoadShared)
def _load_shared(task, inst, loc):
    v = shared(task, inst.src, loc)
    task.cta.units.check_read(v, loc, "load_shared")
    races.access_shared(task, v, False, loc, "load_shared")
    task.env[inst.out] = v.arr.copy()


@rule(I.StoreShared)
def _store_shared(task, inst, loc):
    v = shared(task, inst.dst, loc)
    src = reg(task, inst.src, loc)
    if inst.offsets is not None:  # a sub-tile: only its elements inside the tile, as a view
        offs = [int(scal(task, o, loc)) for o in inst.offsets]
        sidx, tidx = box_index(v.arr, offs, inst.dims, src.shape)
        if sidx is None:
            return
        v, src = SharedView.of(v.alloc, v.arr[sidx + (...,)], v.dtype, v.name), src[tidx]
    task.cta.units.check_write(v, loc, "store_shared")
    races.access_shared(task, v, True, loc, "store_shared")
    v.arr[...] = _stored(src, inst.src.dtype, inst.dst.dtype)


@rule(I.AssignTensor)
def _assign(task, inst, loc):
    task.env[inst.out] = reg(task, inst.src, loc)


@rule(I.StoreElement)
def _store_element(task, inst, loc):
    arr = reg(task, inst.out, loc).copy()
    idx = tuple(int(scal(task, i, loc)) for i in inst.indices)
    for d, (i, n) in enumerate(zip(idx, arr.shape)):
        if not 0 <= i < n:
            raise TilusRuntimeError(
                f"index {i} is out of range for dim {d} (size {n}) of `{inst.out.name}`", loc
            )
    arr[idx] = convert(np.asarray(scal(task, inst.value, loc)), inst.out.dtype)
    task.env[inst.out] = arr


# --- compute ---------------------------------------------------------------------------------


def _stored(values, src_dtype, dst_dtype):
    """Values as a store of ``src_dtype`` into ``dst_dtype`` memory writes them: the bits as they
    are for the same dtype (an fp8 Inf or NaN code kept, as on the GPU), else converted."""
    return values if src_dtype == dst_dtype else convert(values, dst_dtype)


@rule(I.CastTensor)
def _cast(task, inst, loc):
    src = reg(task, inst.src, loc)
    if inst.src.dtype == inst.out.dtype:  # no conversion (the GPU moves the bits as they are)
        task.env[inst.out] = np.array(src, copy=True)
        return
    task.env[inst.out] = convert(src, inst.out.dtype)


def _c_intdiv(a, b):
    # PTX leaves integer division by zero unspecified (no trap); lanes of zero padding from an
    # out-of-bounds load hit it legitimately, so such lanes get -1 instead of an error
    zero = b == 0
    return np.where(zero, -1, intdiv(a, np.where(zero, 1, b)))


def _c_intmod(a, b):
    zero = b == 0  # unspecified in PTX: -1 here, like the quotient
    return np.where(zero, -1, intmod(a, np.where(zero, 1, b)))


def apply_binary(op, a, b, dtype, loc):
    """``a op b`` on arrays with C semantics for integers."""
    with np.errstate(all="ignore"):
        if op in ("==", "!=", "<", "<=", ">", ">="):
            return {
                "==": np.equal,
                "!=": np.not_equal,
                "<": np.less,
                "<=": np.less_equal,
                ">": np.greater,
                ">=": np.greater_equal,
            }[op](a, b)
        wide = a.astype(np.float32) if dtype.is_float() and dtype.nbits < 32 else a
        wb = b.astype(np.float32) if dtype.is_float() and dtype.nbits < 32 else b
        if op == "+":
            r = wide + wb
        elif op == "-":
            r = wide - wb
        elif op == "*":
            r = wide * wb
        elif op == "/":
            r = wide / wb if dtype.is_float() else _c_intdiv(a.astype(np.int64), b.astype(np.int64))
        elif op == "%":
            if dtype.is_float():
                r = np.fmod(wide, wb)
            else:
                r = _c_intmod(a.astype(np.int64), b.astype(np.int64))
        elif op == "max":
            r = np.maximum(wide, wb)
        elif op == "min":
            r = np.minimum(wide, wb)
        elif op in ("&", "|", "^", "<<", ">>"):
            if dtype.kind == "bool":
                r = {"&": np.logical_and, "|": np.logical_or, "^": np.logical_xor}[op](a, b)
            else:
                a64, b64 = a.astype(np.int64), b.astype(np.int64)
                if op in ("<<", ">>"):
                    r = shift_array(op, a64, b64, dtype.nbits)
                else:
                    fn = {"&": np.bitwise_and, "|": np.bitwise_or, "^": np.bitwise_xor}[op]
                    r = fn(a64, b64)
        else:
            raise TilusRuntimeError(f"unknown tile operator {op}", loc)
    return convert(r, dtype)


@rule(I.ElementwiseBinary)
def _binary(task, inst, loc):
    dtype = (inst.a if isinstance(inst.a, TensorVar) else inst.b).dtype
    a = operand(task, inst.a, dtype, loc)
    b = operand(task, inst.b, dtype, loc)
    r = apply_binary(inst.op, a, b, dtype, loc)
    task.env[inst.out] = np.broadcast_to(convert(r, inst.out.dtype), inst.out.shape).copy()


_UNARY = {
    "exp": np.exp,
    "exp2": np.exp2,
    "log": np.log,
    "log2": np.log2,
    "sqrt": np.sqrt,
    "rsqrt": lambda x: 1 / np.sqrt(x),
    "sin": np.sin,
    "cos": np.cos,
    "tanh": np.tanh,
    "abs": np.abs,
    "square": np.square,
    "round": np.rint,
    "floor": np.floor,
    "ceil": np.ceil,
    "tan": np.tan,
    "asin": np.arcsin,
    "acos": np.arccos,
    "atan": np.arctan,
    "sinh": np.sinh,
    "cosh": np.cosh,
    "asinh": np.arcsinh,
    "acosh": np.arccosh,
    "atanh": np.arctanh,
    "trunc": np.trunc,
    "isnan": np.isnan,
    "isinf": np.isinf,
}


@rule(I.ElementwiseUnary)
def _unary(task, inst, loc):
    a = reg(task, inst.a, loc)
    op = inst.op
    with np.errstate(all="ignore"):
        if op == "neg":
            r = -a.astype(np.int64) if inst.a.dtype.is_integer() else -a
        elif op == "not":
            r = np.logical_not(a)
        elif op == "bitnot":
            r = np.logical_not(a) if a.dtype == np.bool_ else np.invert(a)
        else:
            r = _UNARY[op](a.astype(np.float32) if a.dtype.kind == "f" and a.itemsize < 4 else a)
    task.env[inst.out] = convert(r, inst.out.dtype)


@rule(I.Where)
def _where(task, inst, loc):
    dt = inst.out.dtype
    c = reg(task, inst.cond, loc)
    x = operand(task, inst.x, dt, loc)
    y = operand(task, inst.y, dt, loc)
    task.env[inst.out] = np.broadcast_to(convert(np.where(c, x, y), dt), inst.out.shape).copy()


@rule(I.Reduce)
def _reduce(task, inst, loc):
    a = reg(task, inst.src, loc)
    kw = {"axis": inst.dim, "keepdims": inst.keepdim}
    if inst.op == "sum" and inst.acc is not None:  # 16-bit float partial sums
        r = rounded_tree_sum(a, inst.dim, inst.acc)
        if inst.keepdim:
            r = np.expand_dims(r, inst.dim)
    elif inst.op == "sum":
        acc = a.astype(np.float32) if a.dtype.kind == "f" and a.itemsize < 4 else a
        r = np.sum(acc, dtype=acc.dtype if acc.dtype.kind == "f" else np.int64, **kw)
    else:
        r = {"max": np.max, "min": np.min, "any": np.any, "all": np.all}[inst.op](a, **kw)
    task.env[inst.out] = convert(r, inst.out.dtype)


_SCAN = {
    "add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum,
    "and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor,
}  # fmt: skip


@rule(I.Scan)
def _scan(task, inst, loc):
    a = reg(task, inst.src, loc)
    if a.dtype.kind == "f" and a.itemsize < 4:
        a = a.astype(np.float32)  # 16-bit floats accumulate in float32
    r = _SCAN[inst.op].accumulate(a, axis=inst.dim)
    if inst.exclusive:
        first = np.full_like(np.take(r, [0], axis=inst.dim), inst.identity())
        r = np.concatenate([first, np.delete(r, -1, axis=inst.dim)], axis=inst.dim)
    task.env[inst.out] = convert(r, inst.out.dtype)


#: K of one mma.sync step for 16-bit operands: a float16 accumulator is rounded once per step
DOT_F16_STEP = 16


@rule(I.Dot)
def _dot(task, inst, loc):
    a = reg(task, inst.a, loc)
    b = reg(task, inst.b, loc)
    acc_t = inst.out.dtype
    c = reg(task, inst.c, loc) if inst.c is not None else None
    if inst.a.dtype.is_integer():  # exact: int64 sums wrapped to the accumulator (int32)
        r = a.astype(np.int64) @ b.astype(np.int64)
        if c is not None:
            r = r + c.astype(np.int64)
    elif acc_t.name == "float16":
        # mma.sync .f16 accumulation, modelled per m16n8k16 step: the step's 16 products
        # summed (in float64, then rounded to float32: a float32 BLAS sum depends on the
        # operands' memory layout, which would make the result flip an ulp from run to run),
        # added to the accumulator, and the sum rounded to float16
        r = np.zeros(inst.out.shape, np.float16) if c is None else c.astype(np.float16)
        af, bf = a.astype(np.float64), b.astype(np.float64)
        for k0 in range(0, a.shape[1], DOT_F16_STEP):
            step = (af[:, k0 : k0 + DOT_F16_STEP] @ bf[k0 : k0 + DOT_F16_STEP]).astype(np.float32)
            r = (r.astype(np.float32) + step).astype(np.float16)
    else:
        r = a.astype(np.float32) @ b.astype(np.float32)  # tensor cores accumulate in f32
        if c is not None:
            r = r + c.astype(np.float32)
    task.env[inst.out] = convert(r, acc_t)


# --- synchronization (printing: rules_print.py) -----------------------------------------------


@rule(I.Sync)
def _sync(task, inst, loc):
    yield Sync(loc)


# --- vectorized evaluation for tiles initialised by a function of the indices ---------------


def vector_eval(e, env, task, loc):
    """Evaluate a scalar expression over index grids (used by ``init=lambda i, j: ...``)."""
    t = type(e)
    if t is Const:
        return np.asarray(e.value)
    if t is Var:
        v = env[e]
        return v if isinstance(v, np.ndarray) else np.asarray(v)
    if t is Binary:
        a, b = vector_eval(e.a, env, task, loc), vector_eval(e.b, env, task, loc)
        if e.op in ("&&", "||"):
            return np.logical_and(a, b) if e.op == "&&" else np.logical_or(a, b)
        dt = (
            e.dtype
            if e.op not in ("==", "!=", "<", "<=", ">", ">=")
            else (e.a.dtype if e.a.dtype.kind != "bool" else int32)
        )
        return apply_binary(e.op, convert(a, dt), convert(b, dt), dt, loc)
    if t is Unary:
        a = vector_eval(e.a, env, task, loc)
        return np.logical_not(a) if e.op == "!" else (-a if e.op == "-" else np.invert(a))
    if t is Select:
        return np.where(
            vector_eval(e.cond, env, task, loc),
            vector_eval(e.a, env, task, loc),
            vector_eval(e.b, env, task, loc),
        )
    if t is Cast:
        return convert(vector_eval(e.a, env, task, loc), e.dtype)
    if t is Call and e.func in ("min", "max"):
        a, b = (vector_eval(x, env, task, loc) for x in e.args)
        return np.minimum(a, b) if e.func == "min" else np.maximum(a, b)
    if t is Call and e.func in _UNARY:
        return _UNARY[e.func](convert(vector_eval(e.args[0], env, task, loc), float32))
    if t is Call and e.func in ("fastdiv", "fastmod"):
        a, b = (convert(vector_eval(x, env, task, loc), e.dtype) for x in e.args)
        return apply_binary("/" if e.func == "fastdiv" else "%", a, b, e.dtype, loc)
    return np.asarray(scal(task, e, loc))
