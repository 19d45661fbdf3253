"""Running a kernel on a CUDA device: config choice (autotuning), argument checks, launch."""

from __future__ import annotations

import operator
import os
import time

from tilus import option as _option
from tilus.backends.arguments import check_view_extents
from tilus.backends.base import MISS
from tilus.backends.cuda.launcher import MISALIGNED, Launcher, LaunchPlan
from tilus.dtypes import DataType, PointerType, from_torch_dtype, int8, uint8
from tilus.errors import (
    TilusArgumentError,
    TilusBackendError,
    TilusCompileError,
    TilusRuntimeError,
)
from tilus.ir.function import POINTER_ALIGN, UNALIGNED_ARG


def with_alignment(const_args: dict, addresses) -> dict:
    """``const_args``, plus ``UNALIGNED_ARG`` when an address (of a tensor argument) is not a
    multiple of ``POINTER_ALIGN``: such a call gets the build that assumes nothing of the
    alignment (the usual build drops every misaligned path of its vector accesses; see
    ``Function.pointer_align``)."""
    if any(a % POINTER_ALIGN for a in addresses):
        return {**const_args, UNALIGNED_ARG: True}
    return const_args


def _const_key(const_args: dict):
    return tuple(sorted(const_args.items()))


def select_kernel(script, const_args: dict, arch: str = "sm_90a"):
    """The first config (in autotune-space order) that compiles for CUDA; cached per script
    (in its ``Dispatcher``).

    What runs with ``tilus.option.autotune(False)``; configs that fail keep their reasons in
    ``script.failed_configs``.
    """
    from tilus.backends.cuda.codegen.build import build

    table = dispatcher(script).kernels
    key = _const_key(const_args)
    hit = table.get(key)
    if hit is not None:
        return hit
    reasons = []
    for cfg in script.configs:
        try:
            ck = build(script.program(cfg, const_args), cfg, arch=arch)
        except (TilusCompileError, TilusBackendError) as e:
            reasons.append(f"  {cfg}: {e}")
            script.record_failure(cfg, str(e))
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


def _check_values(kname: str, params, runtime):
    """Check the runtime values against ``params`` (objects with ``name`` and ``dtype``)."""
    by_name = {n: (ann, v) for n, ann, v in runtime}
    env, tensors, device = {}, {}, None
    for p in params:
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
            packed_bytes = isinstance(want, DataType) and want.nbits % 8 and dt in (uint8, int8)
            if isinstance(want, DataType) and dt != want and not packed_bytes:
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
                try:  # integer scalars of NumPy/torch; an array (shifted arguments) is refused
                    v = operator.index(v)
                except TypeError:
                    raise TilusArgumentError(
                        f"{kname}: argument {p.name!r} ({p.dtype}) needs a number, got "
                        f"{type(v).__name__}"
                    ) from None
            if p.dtype.is_integer():
                lo, hi = p.dtype.min_value(), p.dtype.max_value()
                if not isinstance(v, int) or not lo <= v <= hi:
                    raise TilusArgumentError(
                        f"{kname}: argument {p.name!r} = {v!r} does not fit in {p.dtype}"
                    )
            env[p] = v
    return env, tensors, device


# --- autotuned dispatch ------------------------------------------------------------------------
_CONST_ANNOTATIONS = (int, float, bool, str)


class _Param:
    __slots__ = ("name", "dtype")

    def __init__(self, name, dtype):
        self.name, self.dtype = name, dtype


def _entry_key(positions):
    """``key(args)``: ``(values, their types)`` at ``positions``, the key of
    ``Dispatcher.entries``, built without a generic loop for up to two positions."""
    if not positions:
        return lambda args: ((), ())
    if len(positions) == 1:
        (i,) = positions

        def key1(args):
            v = args[i]
            return (v,), (type(v),)

        return key1
    if len(positions) == 2:
        i, j = positions

        def key2(args):
            v, w = args[i], args[j]
            return (v, w), (type(v), type(w))

        return key2
    import operator

    get = operator.itemgetter(*positions)

    def key(args):
        vals = get(args)
        return vals, tuple(map(type, vals))

    return key


class Dispatcher:
    """The CUDA backend's state of one ``InstantiatedScript`` (``CudaBackend.new_state``): the
    parameter plan (computed once), the autotuner, the compiled kernels, and the launchers of
    decided calls keyed by the call's compile-time and integer arguments (with their Python
    types), so that a repeated call skips binding, checking of everything but the tensors,
    tuning and tensor-map encoding.
    """

    def __init__(self, inst, arch: str = "sm_90a"):
        self.inst, self.arch = inst, arch
        self.kname = inst.script_cls.__name__
        params = inst.params
        self.names = [n for n, _ in params]
        self.n = len(params)
        self.runtime_names = [n for n, a in params if a not in _CONST_ANNOTATIONS]
        key_pos = [
            i
            for i, (_, a) in enumerate(params)
            if a in _CONST_ANNOTATIONS
            or (
                not isinstance(a, PointerType)
                and isinstance(a, DataType)
                and (a.is_integer() or a.is_boolean())
            )
        ]
        # the key of ``entries``: values and types of the compile-time and integer arguments
        self._entry_key = _entry_key(tuple(key_pos))
        self._full_pos = {n: i for i, n in enumerate(self.names)}
        self.entries: dict = {}  # (values, types) of the key positions -> Prepared
        self.unaligned: dict = {}  # the same, of builds for pointers of any alignment
        self._preps: dict = {}  # (launcher id, scalars) -> Prepared
        self._launchers: dict = {}  # (compiled kernel id, device) -> (ck, Launcher)
        self.kernels: dict = {}  # compile-time arguments -> CompiledKernel (select_kernel)
        self._prechecked: set = set()
        self.tuner = None
        self.last_tuning: dict | None = None
        self._index = 0
        self._sync_options()

    def _sync_options(self):
        """Take the options (environment variables included: read here, at creation and after
        every ``tilus.option`` change, never per call) that the fast path depends on."""
        from tilus import option

        self.epoch = option.epoch[0]
        self.interpret = bool(option.get_option("interpret"))

    # --- the fast path -------------------------------------------------------------------------
    def fast(self, args):
        """Launch a call seen before with cheap checks only; ``MISS`` otherwise."""
        if len(args) != self.n or _EPOCH[0] != self.epoch or self.interpret:
            return MISS
        try:
            key = self._entry_key(args)
            prep = self.entries.get(key)
        except TypeError:  # an unhashable argument: the checked path reports it
            return MISS
        if prep is not None:
            out = prep.fast(args)
            if out is not MISALIGNED:
                return out
        prep = self.unaligned.get(key)  # a call with a misaligned pointer
        if prep is None:
            return MISS
        out = prep.fast(args)
        return MISS if out is MISALIGNED else out

    # --- the checked path ----------------------------------------------------------------------
    def run(self, const_args: dict, runtime, raw_args=None):
        """Check the arguments, pick the config (tuning on a new key), launch, remember."""
        if self.epoch != _EPOCH[0]:  # an option changed: decide afresh
            self.entries.clear()
            self.unaligned.clear()
            self._sync_options()
        params = [_Param(n, a) for n, a, _ in runtime]
        env, tensors, device = _check_values(self.kname, params, runtime)
        const_args = with_alignment(const_args, (t.data_ptr() for t in tensors.values()))
        index = device.index if device.index is not None else _current_device()
        values = {p.name: tensors[p] if p in tensors else env[p] for p in params}
        full = [const_args[n] if n in const_args else values[n] for n in self.names]
        scalars = {
            p.name: values[p.name]
            for p in params
            if not isinstance(p.dtype, PointerType) and not p.dtype.is_float()
        }
        self._precheck(const_args, scalars, full)
        launcher = self._choose(const_args, runtime, index)
        skey = (id(launcher), tuple(sorted(scalars.items())))
        prep = self._preps.get(skey)
        if prep is None or prep.launcher is not launcher:
            prep = launcher.prepare(scalars, self._full_pos)
            if len(self._preps) > 1024:
                self._preps.clear()
            self._preps[skey] = prep
        prep.checked(full)
        if raw_args is not None and len(raw_args) == self.n:
            try:
                key = self._entry_key(raw_args)
                # a build for any alignment has its own table: it must not shadow the aligned
                # build for the calls with aligned pointers
                entries = self.unaligned if UNALIGNED_ARG in const_args else self.entries
                if len(entries) > 4096:
                    entries.clear()
                entries[key] = prep
            except TypeError:
                pass
        return None

    def _precheck(self, const_args, scalars, full):
        """Argument sizes and TMA alignment, checked before tuning runs anything."""
        key = (_const_key(const_args), tuple(sorted(scalars.items())))
        if key in self._prechecked:
            return
        if _capturing():
            raise TilusRuntimeError(
                f"{self.kname} is called with new arguments {dict(const_args, **scalars)} while "
                "a CUDA graph is being captured: compiling and tuning it would synchronize the "
                "stream; call it once with these arguments before the capture"
            )
        from tilus.backends.cuda.codegen.kernel import generate

        for cfg in self.inst.configs:
            try:
                ks = generate(self.inst.program(cfg, const_args))
            except Exception:  # noqa: BLE001 - a failing config is reported by the tuning
                continue
            check_view_extents(self.kname, ks.program, scalars)
            LaunchPlan(self.kname, ks).bind(scalars, self._full_pos).check(full)
            break
        self._prechecked.add(key)

    def _choose(self, const_args, runtime, index):
        from tilus.option import get_option

        if len(self.inst.configs) > 1 and not get_option("autotune"):
            return self._launcher(select_kernel(self.inst, const_args, self.arch), index)
        if self.tuner is None:
            from tilus.tune import Autotuner

            self.tuner = Autotuner(self.inst, self._build, self._load)
        self._index = index
        self._t_loaded, self._pids = None, set()
        t0 = time.perf_counter()
        sel = self.tuner.select(const_args, runtime)
        if sel.result is not None or sel.failures:
            for cfg, why in sel.failures:
                self.inst.record_failure(cfg, why)
        if sel.result is not None and not sel.result.cached:
            t1 = time.perf_counter()
            tl = self._t_loaded or t0
            self.last_tuning = {
                "configs": len(self.inst.configs),
                "failed": len(sel.failures),
                "disagreed": len(sel.result.disagreements),
                "timed": len(sel.result.timings),
                "compile_s": round(tl - t0, 3),
                "tune_s": round(t1 - tl, 3),
                "total_s": round(t1 - t0, 3),
                "winner": dict(sel.config),
                "workers": len(self._pids),
                "build_pids": sorted(self._pids),
            }
        return sel.launch

    # --- the autotuner's steps -----------------------------------------------------------------
    def _build(self, config: dict, const_args: dict):
        """Compile one config (a generator: its NVRTC step is a job for a build worker)."""
        from tilus.backends.cuda.codegen.build import build_steps

        program = self.inst.program(config, const_args)
        ck = yield from build_steps(program, config, arch=self.arch)
        return {
            "pid": ck.compiled_in or os.getpid(),
            "cached": ck.cached,
            "nvrtc_seconds": ck.compile_seconds,
            "smem_bytes": ck.kernel.smem_bytes,
            "kernel": ck,
        }

    def _load(self, config: dict, const_args: dict, artifact):
        """Load a built config on the call's device (the cubin comes from the artifact cache)."""
        from tilus.backends.cuda.codegen.build import build

        if self._t_loaded is None:
            self._t_loaded = time.perf_counter()
        ck = artifact.get("kernel") if isinstance(artifact, dict) else None
        if isinstance(artifact, dict):
            self._pids.add(artifact.get("pid"))
        if ck is None:
            ck = build(self.inst.program(config, const_args), config, arch=self.arch)
        return self._launcher(ck, self._index)

    def _launcher(self, ck, index):
        hit = self._launchers.get((id(ck), index))
        if hit is not None and hit[0] is ck:
            return hit[1]
        launcher = Launcher(LaunchPlan(self.kname, ck.kernel), ck, index, self.runtime_names)
        self._launchers[(id(ck), index)] = (ck, launcher)
        return launcher


_EPOCH = _option.epoch


def _capturing() -> bool:
    """Whether torch's current stream is capturing a CUDA graph."""
    try:
        import torch

        return bool(torch.cuda.is_current_stream_capturing())
    except Exception:  # noqa: BLE001 - a torch without CUDA (or a faked GPU) never captures
        return False


def _current_device() -> int:
    import torch

    return torch.cuda.current_device()


class TargetDispatchers:
    """The CUDA backend's state of one ``InstantiatedScript``: a ``Dispatcher`` per target
    (``tilus.target.launch_target``: the current target, else the GPU's); the fast path is the
    one of the target last run (changing the target bumps the option epoch, so it misses)."""

    def __init__(self, kernel):
        self.kernel = kernel
        self.by_arch: dict[str, Dispatcher] = {}
        self.current: Dispatcher | None = None

    def for_target(self) -> Dispatcher:
        """The dispatcher of the current launch target (made on first use)."""
        from tilus.target import launch_target

        arch = launch_target().arch
        disp = self.by_arch.get(arch)
        if disp is None:
            disp = self.by_arch[arch] = Dispatcher(self.kernel, arch)
        self.current = disp
        return disp

    def fast(self, args):
        """``Dispatcher.fast`` of the target last run; ``MISS`` before any run."""
        disp = self.current
        return MISS if disp is None else disp.fast(args)


class CudaBackend:
    """The CUDA backend as a ``tilus.backends.base.BuildingBackend``: its state per kernel is a
    ``Dispatcher`` per target (``TargetDispatchers``), whose ``fast`` is the launch fast path."""

    name = "cuda"

    def new_state(self, kernel) -> TargetDispatchers:
        return TargetDispatchers(kernel)

    def fast_path(self, state: TargetDispatchers):
        return state.fast

    def run(self, kernel, state: TargetDispatchers, const_args: dict, runtime: list, raw_args=None):
        """Pick a config (autotuned per compile-time arguments and integer buckets), check the
        arguments and launch on the tensors' device, on torch's current stream; later calls
        with equal positional arguments of the same types take ``Dispatcher.fast``."""
        return state.for_target().run(const_args, runtime, raw_args)

    def build(self, program, config: dict, *, arch="sm_90a"):
        """Compile one program through NVRTC (``codegen.build.build``)."""
        from tilus.backends.cuda.codegen.build import build

        return build(program, config, arch=arch)


CUDA = CudaBackend()


def dispatcher(script) -> Dispatcher:
    """The ``Dispatcher`` of an ``InstantiatedScript`` for the current launch target (made on
    first use, kept by the kernel)."""
    return script.backend_state(CUDA).for_target()
