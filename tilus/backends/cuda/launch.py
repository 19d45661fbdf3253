"""Running a kernel on a CUDA device: config choice, argument checks, tensor maps, launch."""

from __future__ import annotations

import ctypes
import math

from tilus.dtypes import DataType, PointerType, from_torch_dtype
from tilus.errors import TilusArgumentError, TilusCompileError
from tilus.ir.expr import Expr, Var
from tilus.runtime.tensormap import TensorMapCache

_TMAPS = TensorMapCache()
# scalar parameter dtype -> the ctypes type with the C ABI of its kernel parameter
_CTYPES = {
    "boolean": ctypes.c_bool,
    "int8": ctypes.c_int8,
    "int16": ctypes.c_int16,
    "int32": ctypes.c_int32,
    "int64": ctypes.c_int64,
    "uint8": ctypes.c_uint8,
    "uint16": ctypes.c_uint16,
    "uint32": ctypes.c_uint32,
    "uint64": ctypes.c_uint64,
    "float32": ctypes.c_float,
    "float64": ctypes.c_double,
}
MAX_GRID = (2**31 - 1, 65535, 65535)


def _const_key(const_args: dict):
    return tuple(sorted(const_args.items()))


def select_kernel(script, const_args: dict, arch: str = "sm_90a"):
    """The first config (in autotune-space order) that compiles for CUDA; cached per script.

    Autotuning (timing every config) is not done yet: pin a config through the constructor
    arguments (``Kernel(num_stages=3, ...)``) to choose one.
    """
    from tilus.backends.cuda.codegen.build import build

    table = script.__dict__.setdefault("_cuda_kernels", {})
    key = _const_key(const_args)
    hit = table.get(key)
    if hit is not None:
        return hit
    reasons = []
    for cfg in script.configs:
        try:
            ck = build(script.program(cfg, const_args), cfg, arch=arch)
        except TilusCompileError as e:
            reasons.append(f"  {cfg}: {e}")
            if len(script.configs) == 1:
                raise
            continue
        table[key] = ck
        return ck
    raise TilusCompileError(
        f"no config of {script.script_cls.__name__} compiles for CUDA:\n" + "\n".join(reasons)
    )


def _is_torch(v) -> bool:
    return type(v).__module__.startswith("torch") and hasattr(v, "data_ptr")


def _check_args(kname: str, fn, runtime):
    """Map param Var -> value; check tensors (device, dtype, contiguity) and scalars."""
    by_name = {n: (ann, v) for n, ann, v in runtime}
    env, tensors, device = {}, {}, None
    for p in fn.params:
        ann, v = by_name[p.name]
        if isinstance(p.dtype, PointerType):
            if not _is_torch(v):
                raise TilusArgumentError(
                    f"{kname}: argument {p.name!r} must be a CUDA torch tensor, got "
                    f"{type(v).__name__}"
                )
            if v.device.type != "cuda":
                raise TilusArgumentError(
                    f"{kname}: argument {p.name!r} is on {v.device}; all tensors must be on CUDA"
                )
            if device is None:
                device = v.device
            elif v.device != device:
                raise TilusArgumentError(
                    f"{kname}: argument {p.name!r} is on {v.device} but others are on {device}"
                )
            dt = from_torch_dtype(v.dtype)
            want = p.dtype.base
            if isinstance(want, DataType) and dt != want:
                raise TilusArgumentError(
                    f"{kname}: argument {p.name!r} is declared {p.dtype!r} but got a tensor of "
                    f"{v.dtype}"
                )
            if not v.is_contiguous():
                raise TilusArgumentError(
                    f"{kname}: argument {p.name!r} is a non-contiguous tensor; pass .contiguous()"
                )
            tensors[p] = v
            env[p] = v.data_ptr()
        else:
            if p.dtype.kind == "bool":
                if not isinstance(v, bool | int):
                    raise TilusArgumentError(
                        f"{kname}: argument {p.name!r} is a bool, got {type(v).__name__}"
                    )
                env[p] = bool(v)
                continue
            if isinstance(v, bool) or not isinstance(v, int | float):
                if hasattr(v, "__index__"):
                    v = int(v)
                else:
                    raise TilusArgumentError(
                        f"{kname}: argument {p.name!r} ({p.dtype}) needs a number, got "
                        f"{type(v).__name__}"
                    )
            if p.dtype.is_integer():
                lo, hi = p.dtype.min_value(), p.dtype.max_value()
                if not isinstance(v, int) or not lo <= v <= hi:
                    raise TilusArgumentError(
                        f"{kname}: argument {p.name!r} = {v!r} does not fit in {p.dtype}"
                    )
            env[p] = v
    return env, tensors, device


def _eval(e, env):
    from tilus.backends.interp.values import eval_scalar

    return int(eval_scalar(e, env)) if isinstance(e, Expr) else int(e)


def _kernel_args(kname, ck, env, tensors):
    from tilus.runtime import driver as D

    fn = ck.kernel.program.fn
    args = []
    for p in fn.params:
        v = env[p]
        if isinstance(p.dtype, PointerType):
            args.append(D.arg_ptr(v))
            continue
        ct = _CTYPES.get(p.dtype.name)
        if ct is None:
            raise TilusArgumentError(f"{kname}: parameter type {p.dtype} is not supported on CUDA")
        obj = ct(v)
        args.append(D.KernelArg(p.dtype.name, obj, ctypes.addressof(obj)))
    plan = ck.kernel.plan
    # every global view must fit inside its tensor
    for g, gv in plan.gviews.items():
        if isinstance(gv.ptr, Var) and gv.ptr in tensors and gv.strides is None:
            need = math.prod(_eval(s, env) for s in g.shape)
            t = tensors[gv.ptr]
            if need > t.numel():
                raise TilusArgumentError(
                    f"{kname}: argument {gv.ptr.name!r} has {t.numel()} elements but the "
                    f"kernel views it as {[_eval(s, env) for s in g.shape]} ({need} elements)"
                )
    for m in plan.tmaps:
        gv = plan.gviews[m.gview]
        t = tensors[gv.ptr]
        shape = [_eval(s, env) for s in m.gview.shape]
        eb = m.gview.dtype.nbits // 8
        strides, acc = [], eb
        for n in reversed(shape):
            strides.append(acc)
            acc *= n
        try:
            blob = _TMAPS.get(
                dtype_name=m.gview.dtype.name,
                address=t.data_ptr(),
                shape=shape,
                strides_bytes=strides[::-1],
                box=m.box,
                swizzle=f"{m.swizzle}B" if m.swizzle else "none",
            )
        except TilusArgumentError as e:
            raise TilusArgumentError(
                f"{kname}: argument {gv.ptr.name!r} cannot be read by TMA: {e} (TMA needs "
                "16-byte aligned data and rows whose byte size is a multiple of 16)"
            ) from None
        args.append(D.arg_tensormap(blob))
    return args


def run_cuda(script, const_args: dict, runtime):
    """Compile (first config that compiles, cached) and launch on the tensors' device."""
    import torch

    from tilus.runtime.driver import ensure_context

    kname = script.script_cls.__name__
    ck = select_kernel(script, const_args)
    fn = ck.kernel.program.fn
    env, tensors, device = _check_args(kname, fn, runtime)
    grid = tuple(_eval(b, env) for b in fn.blocks)
    for g, lim in zip(grid, MAX_GRID):
        if not 0 <= g <= lim:
            raise TilusArgumentError(f"{kname}: grid {list(grid)} is out of range")
    if 0 in grid:
        return None
    args = _kernel_args(kname, ck, env, tensors)
    index = device.index if device is not None else torch.cuda.current_device()
    kernel = ck.function(index)
    ensure_context(index)  # the device's primary context (torch's) is current for the launch
    stream = torch.cuda.current_stream(index).cuda_stream
    kernel.launch(grid, (fn.num_threads, 1, 1), ck.kernel.smem_bytes, stream, args)
    return None
