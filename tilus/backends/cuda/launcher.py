"""Launching one compiled kernel with little host work: argument storage built once per shape."""

from __future__ import annotations

import ctypes
import functools
import math
import os
import threading

from tilus.backends.arguments import (
    check_assumptions,
    check_cluster_grid,
    check_pointer_alignment,
    tma_error,
)
from tilus.backends.base import MISS
from tilus.dtypes import PointerType
from tilus.errors import TilusArgumentError
from tilus.ir.evaluate import eval_scalar
from tilus.ir.expr import Expr, Var
from tilus.runtime.tensormap import TensorMapCache

MAX_GRID = (2**31 - 1, 65535, 65535)
TMAP_BYTES, TMAP_ALIGN = 128, 64
# scalar parameter dtype -> the ctypes type with the C ABI of its kernel parameter
CTYPES = {
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


#: ``Prepared.fast``'s answer to a pointer its build does not allow (``Function.pointer_align``),
#: or, from the build for any alignment, to all-aligned pointers (the usual build serves those).
MISALIGNED = object()

#: The encoded tensor maps of every launch (tests replace it with a fake encoder).
_TMAPS = TensorMapCache()


def _eval(e, env):
    return int(eval_scalar(e, env)) if isinstance(e, Expr) else int(e)


class LaunchPlan:
    """What launching a generated kernel needs, independent of its cubin: parameters, the grid
    and view-shape expressions, the TMA maps (from a ``KernelSource``)."""

    def __init__(self, kname: str, ks):
        self.kname = kname
        self.ks = ks
        fn = ks.program.fn
        self.params = list(fn.params)
        self.names = [p.name for p in self.params]
        self.blocks = list(fn.blocks)
        self.threads = int(fn.num_threads)
        self.smem = int(ks.smem_bytes)
        self.pointer_align = int(fn.pointer_align)
        # hidden fast_divmod divisors, passed after the tensor maps (tilus/passes/fast_divmod.py)
        self.divisors = tuple(ks.divisors)
        # the global_tensor workspace, passed last (tilus/backends/cuda/workspace.py)
        self.workspace = int(ks.workspace_bytes)
        for p in self.params:
            if not isinstance(p.dtype, PointerType) and p.dtype.name not in CTYPES:
                raise TilusArgumentError(
                    f"{kname}: parameter {p.name!r} has type {p.dtype}, which is not supported "
                    "on CUDA"
                )

    def bind(self, scalars: dict, positions: dict) -> Bound:
        """Evaluate grid, view sizes and tensor-map shapes for integer/bool arguments.

        Args:
            scalars: Parameter name -> value of the int and bool parameters.
            positions: Parameter name -> position of its value in the tuples later passed.
        """
        return Bound(self, scalars, positions)


class Bound:
    """A ``LaunchPlan`` with its integer arguments known: grid, minimum tensor sizes, maps."""

    def __init__(self, plan: LaunchPlan, scalars: dict, positions: dict):
        self.plan, self.scalars, self.positions = plan, dict(scalars), dict(positions)
        kname = plan.kname
        env = {p: scalars[p.name] for p in plan.params if p.name in scalars}
        self.grid = tuple(_eval(b, env) for b in plan.blocks)
        for g, lim in zip(self.grid, MAX_GRID):
            if not 0 <= g <= lim:
                raise TilusArgumentError(f"{kname}: grid {list(self.grid)} is out of range")
        self.empty = 0 in self.grid
        check_cluster_grid(plan.ks.program.fn, self.grid, env)
        check_assumptions(plan.ks.program.fn, env)  # the compiler was told they hold
        self.divisors = [self._divisor(d, env) for d in plan.divisors]  # (d, magic, shift)
        gviews = plan.ks.plan.gviews
        need: dict = {}  # param name -> (elements, shape)
        packed_views: set = set()  # params a sub-byte view reads: their need is in bytes
        for g, gv in gviews.items():
            if (
                isinstance(gv.ptr, Var)
                and gv.strides is None
                and any(gv.ptr is p for p in plan.params)
            ):
                shape = [_eval(s, env) for s in g.shape]
                n = math.prod(shape)
                if g.dtype.nbits % 8:  # packed: bytes, ceil(n * nbits / 8)
                    n = -(-n * g.dtype.nbits // 8)
                    packed_views.add(gv.ptr.name)
                if n > need.get(gv.ptr.name, (-1, None))[0]:
                    need[gv.ptr.name] = (n, shape)
        self.tensors = []  # (position, name, elements needed, view shape)
        for p in plan.params:
            if isinstance(p.dtype, PointerType):
                n, shape = need.get(p.name, (0, None))
                self.tensors.append((positions[p.name], p.name, n, shape))
        self.in_bytes = packed_views
        self.maps = []  # (position, name, dtype name, shape, byte strides, box, swizzle)
        for m in plan.ks.plan.tmaps:
            ptr = gviews[m.gview].ptr
            shape = tuple(_eval(s, env) for s in m.gview.shape)
            eb = m.gview.dtype.nbits // 8
            strides, acc = [], eb
            for n in reversed(shape):
                strides.append(acc)
                acc *= n
            swz = f"{m.swizzle}B" if m.swizzle else "none"
            self.maps.append(
                (
                    positions[ptr.name],
                    ptr.name,
                    m.gview.dtype.name,
                    shape,
                    tuple(strides[::-1]),
                    tuple(m.box),
                    swz,
                )
            )

    def _divisor(self, hd, env) -> tuple[int, int, int]:
        """``(d, magic, shift)`` of a hidden fast_divmod divisor for these integer arguments."""
        from tilus.errors import TilusRuntimeError
        from tilus.passes.fast_divmod import MAX_DIVISOR, magic_numbers

        if self.empty:
            return (1, 0, 0)  # nothing runs: the divisor is never used
        try:
            d = _eval(hd.expr, env)
        except TilusRuntimeError as e:  # e.g. a division by zero inside the divisor
            d = f"not computable ({e})"
        if not isinstance(d, int) or not 1 <= d <= MAX_DIVISOR:
            raise TilusArgumentError(
                f"{self.plan.kname}: fast_divmod divisor `{hd.text}` is {d} for these arguments "
                f"({hd.where() or 'in the kernel'}); it must be in [1, {MAX_DIVISOR}] whenever "
                "the kernel launches"
            )
        return (d, *magic_numbers(d))

    def check(self, values) -> None:
        """Raise ``TilusArgumentError`` (naming the argument) when a tensor is smaller than the
        kernel's view of it or cannot be read by TMA; needs no GPU."""
        kname = self.plan.kname
        for pos, name, n, shape in self.tensors:
            t = values[pos]
            if name in self.in_bytes and n > t.numel() * t.element_size():
                raise TilusArgumentError(
                    f"{kname}: argument {name!r} has {t.numel() * t.element_size()} bytes but "
                    f"the kernel views it as packed {shape} ({n} bytes)"
                )
            if name not in self.in_bytes and n > t.numel():
                raise TilusArgumentError(
                    f"{kname}: argument {name!r} has {t.numel()} elements but the kernel views "
                    f"it as {shape} ({n} elements)"
                )
        for pos, name, dt, shape, strides, box, swz in self.maps:
            from tilus.runtime.tensormap import validate_tiled

            try:
                validate_tiled(
                    dtype_name=dt,
                    address=values[pos].data_ptr(),
                    shape=shape,
                    strides_bytes=strides,
                    box=box,
                    swizzle=swz,
                )
            except TilusArgumentError as e:
                raise tma_error(kname, name, e) from None


# --- the driver seams (tests replace these four) -----------------------------------------------
@functools.cache
def _libcuda():
    """libcuda through ctypes (the cheapest launch from Python), or None."""
    if os.environ.get("TILUS_LAUNCH_BINDINGS"):
        return None
    try:
        lib = ctypes.CDLL("libcuda.so.1")
        f = lib.cuLaunchKernel
        f.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3
        f.restype = ctypes.c_int
        lib.cuCtxSetCurrent.argtypes = [ctypes.c_void_p]
        lib.cuCtxSetCurrent.restype = ctypes.c_int
    except (OSError, AttributeError):
        return None
    try:  # CUDA >= 12: 4 arguments (prebuilt ctypes objects: no per-call conversion)
        lib.cuLaunchKernelEx.argtypes = None
        lib.cuLaunchKernelEx.restype = ctypes.c_int
    except AttributeError:
        pass
    return lib


class _LaunchConfig(ctypes.Structure):
    """``CUlaunchConfig`` of cuda.h (CUDA >= 12), without launch attributes."""

    _fields_ = [
        ("grid", ctypes.c_uint * 3),
        ("block", ctypes.c_uint * 3),
        ("smem", ctypes.c_uint),
        ("stream", ctypes.c_void_p),
        ("attrs", ctypes.c_void_p),
        ("num_attrs", ctypes.c_uint),
    ]


def _load(ck, index: int):
    """The loaded kernel (``tilus.runtime.driver.Kernel``) of a compiled kernel on a device."""
    return ck.function(index)


def _make_launch(kernel, threads: int, smem: int):
    """``go(gx, gy, gz, stream, params_address)``: launch ``kernel`` (raises on an error).

    Through ctypes when libcuda loads; should a ctypes launch fail, the same launch is retried
    through cuda-bindings, whose error (if any) is the one raised. ``go.bind(gx, gy, gz,
    params_address)`` returns ``(stream_slot, fire)`` for one grid and argument storage:
    ``fire()`` launches on the stream held by the ``ctypes.c_void_p`` ``stream_slot`` and returns
    the driver's CUresult (0: launched) instead of raising, so that the caller can make the
    context current and retry. Through ctypes, ``fire`` is cuLaunchKernelEx with four prebuilt
    ctypes arguments (CUDA >= 12): ctypes converts no Python value per call.
    """
    from tilus.runtime.driver import check, cuda_driver

    drv = cuda_driver()
    name = f"cuLaunchKernel({kernel.name})"

    def go_bindings(gx, gy, gz, stream, params):
        check(
            drv.cuLaunchKernel(
                kernel.handle, gx, gy, gz, threads, 1, 1, smem, drv.CUstream(stream), params, 0
            ),
            name,
        )

    def bind_bindings(gx, gy, gz, params):
        slot = ctypes.c_void_p()

        def fire():
            r = drv.cuLaunchKernel(
                kernel.handle,
                gx,
                gy,
                gz,
                threads,
                1,
                1,
                smem,
                drv.CUstream(slot.value or 0),
                params,
                0,
            )
            return int(r[0] if isinstance(r, tuple) else r)

        return slot, fire

    go_bindings.bind = bind_bindings
    lib = _libcuda()
    if lib is None:
        return go_bindings
    f, handle = lib.cuLaunchKernel, int(kernel.handle)
    ex = getattr(lib, "cuLaunchKernelEx", None)

    def go(gx, gy, gz, stream, params):
        if f(handle, gx, gy, gz, threads, 1, 1, smem, stream, params, None):
            go_bindings(gx, gy, gz, stream, params)

    def bind(gx, gy, gz, params):
        if ex is None:  # an older driver: 11 arguments converted per call
            slot = ctypes.c_void_p()

            def fire():
                return f(handle, gx, gy, gz, threads, 1, 1, smem, slot.value, params, None)

            return slot, fire
        cfg = _LaunchConfig((gx, gy, gz), (threads, 1, 1), smem)
        slot = ctypes.c_void_p.from_buffer(cfg, _LaunchConfig.stream.offset)  # keeps cfg alive
        cfg_ref, h, p = ctypes.byref(cfg), ctypes.c_void_p(handle), ctypes.c_void_p(params)
        return slot, functools.partial(ex, cfg_ref, h, p, None)

    go.bind = bind
    return go


def _make_context(index: int):
    """``set_ctx()``: make the device's primary context (torch's) current on this thread."""
    from tilus.runtime.driver import ensure_context

    ctx = ensure_context(index)
    lib = _libcuda()
    if lib is None:
        return functools.partial(ensure_context, index)
    f, handle = lib.cuCtxSetCurrent, int(ctx)

    def set_ctx():
        if f(handle):
            ensure_context(index)  # raises the driver's error, if it persists

    return set_ctx


def _stream_getter(index: int):
    """``stream()``: torch's current stream on the device, as an int handle."""
    import torch

    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:
        return functools.partial(raw, index)
    return lambda: torch.cuda.current_stream(index).cuda_stream


class _Current(threading.local):
    """Per thread, the device whose primary context tilus last made current there, so that a
    launch skips cuCtxSetCurrent. Only a hint: a CUfunction launched in a context that did not
    load it fails, and a failed launch makes the context current and launches again."""

    device = None


_CURRENT = _Current()


def _made_current(index: int) -> None:
    _CURRENT.device = index


class Launcher:
    """One compiled config loaded on one device; ``launcher(*runtime_values)`` runs it with
    every argument checked (how tuning runs the candidates)."""

    def __init__(self, plan: LaunchPlan, ck, index: int, runtime_names):
        self.plan, self.ck, self.index = plan, ck, index
        self.config = dict(ck.config)
        self.kernel = _load(ck, index)
        self.go = _make_launch(self.kernel, plan.threads, plan.smem)
        self.set_ctx = _make_context(index)
        _made_current(index)  # loading made it current on this thread
        self.stream = _stream_getter(index)
        self._positions = {n: i for i, n in enumerate(runtime_names)}
        self._int_pos = [
            (n, self._positions[n])
            for p, n in zip(plan.params, plan.names)
            if not isinstance(p.dtype, PointerType) and not p.dtype.is_float()
        ]
        self._prepared: dict = {}
        self._workspaces: dict = {}  # stream handle -> workspace tensor

    def workspace(self, stream: int):
        """The kernel's global_tensor workspace for launches on ``stream`` (an int handle):
        zeroed once when first needed, then kept (requires_clean tensors are left zero by every
        launch). One per stream: launches on two streams may run at the same time, and a
        shared scratch (split-K partial sums, tile counters) would then be raced on."""
        ws = self._workspaces.get(stream)
        if ws is None:
            import torch

            # torch.zeros runs on torch's current stream, which is ``stream`` here
            ws = self._workspaces[stream] = torch.zeros(
                self.plan.workspace, dtype=torch.uint8, device=f"cuda:{self.index}"
            )
        return ws

    def prepare(self, scalars: dict, positions: dict) -> Prepared:
        """Argument storage for these int/bool arguments (see ``LaunchPlan.bind``)."""
        return Prepared(self, self.plan.bind(scalars, positions))

    def __call__(self, *values):
        key = tuple(values[i] for _, i in self._int_pos)
        prep = self._prepared.get(key)
        if prep is None:
            scalars = {n: values[i] for n, i in self._int_pos}
            prep = self.prepare(scalars, self._positions)
            if len(self._prepared) > 256:
                self._prepared.clear()
            self._prepared[key] = prep
        prep.checked(values)

    def __repr__(self):
        return f"<Launcher {self.plan.kname} {self.config} on cuda:{self.index}>"


class Prepared:
    """Preallocated kernel-argument storage of one ``Bound``: a call only writes the pointers
    (and tensor maps) that changed and the float scalars, then launches."""

    def __init__(self, launcher: Launcher, bound: Bound):
        self.launcher, self.bound = launcher, bound
        self.device = launcher.index
        self.grid = bound.grid
        self._keep = []  # the ctypes objects whose addresses the params array holds
        addrs, slot_of, self.floats = [], {}, []  # floats: (position, ctypes object)
        for p in launcher.plan.params:
            if isinstance(p.dtype, PointerType):
                obj = slot_of[p.name] = ctypes.c_uint64(0)
            elif p.dtype.is_float():
                obj = CTYPES[p.dtype.name]()
                self.floats.append((bound.positions[p.name], obj))
            else:  # ints and bools are part of what the storage was made for
                obj = CTYPES[p.dtype.name](bound.scalars[p.name])
            self._keep.append(obj)
            addrs.append(ctypes.addressof(obj))
        self.ptr_slots = [slot_of[name] for _, name, _, _ in bound.tensors]
        self.map_addrs = []
        for _ in bound.maps:
            buf = (ctypes.c_char * (TMAP_BYTES + TMAP_ALIGN))()
            base = ctypes.addressof(buf)
            self._keep.append(buf)
            self.map_addrs.append(base + (-base) % TMAP_ALIGN)
            addrs.append(self.map_addrs[-1])
        for d, magic, shift in bound.divisors:  # struct tl_divisor_t {uint32_t d, magic, shift;}
            obj = (ctypes.c_uint32 * 3)(d, magic, shift)
            self._keep.append(obj)
            addrs.append(ctypes.addressof(obj))
        self.ws_slot = None  # the workspace pointer, set per launch from the stream
        self.ws_stream = None
        if launcher.plan.workspace:
            obj = self.ws_slot = ctypes.c_uint64(0)
            self._keep.append(obj)
            addrs.append(ctypes.addressof(obj))
        self.params = (ctypes.c_void_p * max(len(addrs), 1))(*addrs)
        self.params_addr = ctypes.addressof(self.params)
        self.checks = [(pos, n, name in bound.in_bytes) for pos, name, n, _ in bound.tensors]
        # the address bits a pointer must have clear, e.g. 15 for 16-byte alignment
        self.align_mask = launcher.plan.pointer_align - 1
        self.last = None  # the pointers the storage holds
        self.lock = threading.Lock()

    def _fill(self, ptrs, values) -> None:
        for slot, ptr in zip(self.ptr_slots, ptrs):
            slot.value = ptr
        cache = _TMAPS  # a global looked up per use: tests replace it
        for addr, (pos, name, dt, shape, strides, box, swz) in zip(self.map_addrs, self.bound.maps):
            try:
                blob = cache.get(
                    dtype_name=dt,
                    address=values[pos].data_ptr(),
                    shape=shape,
                    strides_bytes=strides,
                    box=box,
                    swizzle=swz,
                )
            except TilusArgumentError as e:
                self.last = None
                raise tma_error(self.bound.plan.kname, name, e) from None
            ctypes.memmove(addr, blob, TMAP_BYTES)
        self.last = ptrs

    #: set by the first checked call: (position, elements needed, type, dtype) per tensor for
    #: the fast path, and the launch bound to this storage (see ``_make_launch``)
    _tchecks = None
    _slot = _fire = None

    def checked(self, values) -> None:
        """Check the sizes of the tensors (types were checked by the caller) and launch."""
        self.bound.check(values)
        tchecks = tuple(
            # a packed view's need is in bytes: in elements of this tensor's dtype here
            (
                pos,
                -(-n // values[pos].element_size()) if nb else n,
                type(values[pos]),
                values[pos].dtype,
            )
            for pos, n, nb in self.checks
        )
        ptrs = tuple(values[pos].data_ptr() for pos, _, _ in self.checks)
        check_pointer_alignment(self.bound.plan.kname, self.bound.tensors, ptrs, self.align_mask)
        if self.bound.empty:
            self._tchecks = tchecks
            return
        with self.lock:
            if self._fire is None:
                self._bind()
            self._tchecks = tchecks  # after _bind: fast() may launch now
            for pos, obj in self.floats:
                obj.value = values[pos]
            if ptrs != self.last:
                self._fill(ptrs, values)
            self._launch()

    def fast(self, args):
        """Launch with cheap checks only; ``MISS`` (checked path) or ``MISALIGNED`` otherwise."""
        checks = self._tchecks
        if checks is None:
            return MISS
        dev = self.device
        ptrs = []
        bits = 0
        for pos, need, ttype, dtype in checks:
            t = args[pos]
            if (
                type(t) is not ttype
                or (t.dtype is not dtype and t.dtype != dtype)  # torch dtypes are singletons
                or t.get_device() != dev
                or not t.is_contiguous()
                or t.numel() < need
            ):
                return MISS
            p = t.data_ptr()
            bits |= p
            ptrs.append(p)
        mask = self.align_mask
        if (bits & mask) if mask else not bits & 15:
            return MISALIGNED  # (a build for any alignment leaves aligned calls to the other)
        if self.bound.empty:
            return None
        ptrs = tuple(ptrs)
        lock = self.lock  # acquire/release: cheaper than ``with``
        lock.acquire()
        try:
            if self.floats:
                for pos, obj in self.floats:
                    v = args[pos]
                    tv = type(v)
                    if tv is not float and tv is not int:
                        return MISS
                    obj.value = v
            if ptrs != self.last:
                try:
                    self._fill(ptrs, args)
                except TilusArgumentError:
                    return MISS
            launcher = self.launcher  # _launch, inlined: one Python call less
            if _CURRENT.device != dev:
                launcher.set_ctx()
                _made_current(dev)
            stream = self._slot.value = launcher.stream()
            if self.ws_slot is not None and stream != self.ws_stream:
                self._use_workspace(stream)
            if self._fire():
                self._relaunch()
        finally:
            lock.release()
        return None

    def _bind(self):
        gx, gy, gz = self.grid
        go = self.launcher.go
        bind = getattr(go, "bind", None)
        if bind is not None:
            self._slot, self._fire = bind(gx, gy, gz, self.params_addr)
            return
        slot, params = ctypes.c_void_p(), self.params_addr  # a launch without bind (a fake)
        self._slot = slot
        self._fire = lambda: go(gx, gy, gz, slot.value or 0, params)

    def _launch(self):
        # cuCtxSetCurrent only on a thread where tilus has not made this device's context
        # current; should another context be current there, the launch fails and _relaunch
        # makes ours current and launches again
        launcher = self.launcher
        if _CURRENT.device != self.device:
            launcher.set_ctx()
            _made_current(self.device)
        stream = self._slot.value = launcher.stream()
        if self.ws_slot is not None and stream != self.ws_stream:
            self._use_workspace(stream)
        if self._fire():
            self._relaunch()

    def _use_workspace(self, stream: int) -> None:
        """Point the workspace argument at ``stream``'s workspace."""
        self.ws_slot.value = self.launcher.workspace(stream).data_ptr()
        self.ws_stream = stream

    def _relaunch(self):
        launcher = self.launcher
        launcher.set_ctx()
        _made_current(self.device)
        gx, gy, gz = self.grid
        launcher.go(gx, gy, gz, self._slot.value or 0, self.params_addr)  # raises on an error
