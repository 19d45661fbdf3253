"""``tilus.Script`` and the instantiated, callable kernel it turns into."""

from __future__ import annotations

import dataclasses
import inspect
import operator
import sys
import warnings

import numpy as np

from tilus import source_cache
from tilus.dtypes import PointerType
from tilus.errors import TilusArgumentError, TilusCompileError, TilusError, TilusProgramError
from tilus.ir.function import POINTER_ALIGN, UNALIGNED_ARG
from tilus.lang.autotune import expand_space
from tilus.lang.instructions.atomics import AtomicInstructions
from tilus.lang.instructions.cluster import ClusterInstructions
from tilus.lang.instructions.cuda_queries import CudaQueryInstructions
from tilus.lang.instructions.generic import GenericInstructions
from tilus.lang.instructions.hopper import HopperInstructions
from tilus.lang.instructions.layouts import LayoutInstructions
from tilus.lang.instructions.lowbit import LowBitInstructions
from tilus.lang.instructions.memory_async import AsyncCopyInstructions
from tilus.lang.instructions.named_barriers import NamedBarrierInstructions
from tilus.lang.instructions.random import RandomInstructions

_instances: dict = {}


def _hashable(v):
    if isinstance(v, (list, tuple)):
        return tuple(_hashable(x) for x in v)
    if isinstance(v, dict):
        return tuple(sorted((k, _hashable(x)) for k, x in v.items()))
    try:
        hash(v)
        return v
    except TypeError:
        return id(v)


class Script(
    GenericInstructions,
    HopperInstructions,
    RandomInstructions,
    AsyncCopyInstructions,
    AtomicInstructions,
    CudaQueryInstructions,
    ClusterInstructions,
    LowBitInstructions,
    LayoutInstructions,
    NamedBarrierInstructions,
):
    """Base class of tilus kernels.

    Subclasses store compile-time hyper-parameters in ``__init__`` and write the kernel body in
    ``__call__``, which is transpiled (never run as Python). ``MyKernel(...)`` returns a cached
    :class:`InstantiatedScript`; calling that compiles (or interprets) and launches.
    """

    debug_schedule: dict | None = None

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        # the source as imported, which is what tilus transpiles (tilus/source_cache.py)
        source_cache.snapshot(cls, sys._getframe(1))

    def __new__(cls, *args, **kwargs):
        key = (cls, _hashable(args), _hashable(kwargs))
        inst = _instances.get(key)
        if inst is None:
            inst = InstantiatedScript(cls, args, kwargs)
            _instances[key] = inst
        return inst

    def __init__(self):
        pass


class InstantiatedScript:
    """A Script class bound to its constructor arguments: the callable kernel."""

    def __init__(self, cls, args, kwargs):
        self.script_cls = cls
        self.args = tuple(args)
        self.kwargs = dict(kwargs)
        space = getattr(cls, "_autotune_space", {})
        if cls.debug_schedule is not None:
            self._configs = [dict(cls.debug_schedule)]
        else:
            self._configs = expand_space(space, self.kwargs) if space else [{}]
        sig = inspect.signature(cls.__init__)
        for cfg in self._configs:
            try:
                sig.bind(None, *self.args, **{**self.kwargs, **cfg})
            except TypeError as e:
                raise TilusError(
                    f"{cls.__name__}: constructor arguments do not fit the autotune space ({e})"
                ) from None
        self._programs: dict = {}
        # config key -> why it was dropped: set when lowering or tuning fails a config, and
        # restored from the dispatch table when a later process reuses a stored winner
        self.failed_configs: dict = {}
        self._params = None
        # backend name -> that backend's state of this kernel (made by the backend, opaque here)
        self._backend_states: dict = {}

    def __repr__(self):
        return f"<tilus kernel {self.script_cls.__name__} with {len(self._configs)} config(s)>"

    # --- the space -----------------------------------------------------------------------------
    @property
    def configs(self) -> list[dict]:
        """The autotune configurations (constructor keyword arguments) of this kernel."""
        return [dict(c) for c in self._configs]

    @property
    def params(self):
        """(name, annotation) of the kernel parameters."""
        if self._params is None:
            from tilus.lang.frontend.kernel import kernel_params

            self._params = [(n, a) for n, a, _ in kernel_params(self.script_cls)]
        return self._params

    def instance(self, config: dict):
        """A configured Script object (its ``__init__`` run with ``config``)."""
        obj = object.__new__(self.script_cls)
        obj.__init__(*self.args, **{**self.kwargs, **config})
        return obj

    def program(self, config: dict, const_args: dict):
        """The lowered program of one config (transpiled and checked once, then cached).

        ``const_args`` may hold ``UNALIGNED_ARG`` (the CUDA backend adds it for a call with a
        pointer that is not 16-byte aligned): the program then assumes nothing of the
        pointers' alignment (``Function.pointer_align``)."""
        from tilus.lang.frontend.kernel import transpile
        from tilus.passes.pipeline import lower
        from tilus.target import transpile_target

        # per target: self.cuda answers for it
        key = (_hashable(config), _hashable(const_args), transpile_target().arch)
        hit = self._programs.get(key)
        if hit is None:
            args = dict(const_args)
            align = 1 if args.pop(UNALIGNED_ARG, False) else POINTER_ALIGN
            try:
                fn = transpile(self.instance(config), args, config)
                hit = lower(dataclasses.replace(fn, pointer_align=align))
            except TilusProgramError as e:  # kept, so a failing config fails once and quickly
                hit = e
                self.record_failure(config, str(e))
            self._programs[key] = hit
        if isinstance(hit, Exception):
            raise hit
        return hit

    def compile(self, *args, **kwargs):
        """Transpile and check every config for these arguments without running anything."""
        const_args, _ = self.bind(args, kwargs)
        out = []
        for cfg in self._configs:
            try:
                out.append(self.program(cfg, const_args))
            except TilusCompileError:
                pass
        if not out:
            raise self._none_compiled()
        return out

    def record_failure(self, config: dict, reason: str) -> None:
        """Note in ``failed_configs`` why ``config`` was dropped (lowering, building, tuning)."""
        self.failed_configs[_hashable(config)] = reason

    def _none_compiled(self):
        from tilus.tune.failures import no_config_error

        errors = [(k[0], e) for k, e in self._programs.items() if isinstance(e, Exception)]
        if errors and len({str(e) for _, e in errors}) == 1:
            return errors[0][1]  # every config fails the same way: show that error as it is
        # the error points at the first failure's line and lists every config's reason
        failures = [(dict(k), str(e), e) for k, e in errors]
        return no_config_error(self.script_cls.__name__, failures)

    # --- calling -------------------------------------------------------------------------------
    def bind(self, args, kwargs):
        """Split call arguments into compile-time arguments and runtime values (checked)."""
        params = self.params
        names = [n for n, _ in params]
        name = self.script_cls.__name__
        if len(args) > len(names):
            raise TilusArgumentError(
                f"{name} takes {len(names)} arguments ({', '.join(names)}) "
                f"but {len(args)} were given"
            )
        values = dict(zip(names, args))
        for k, v in kwargs.items():
            if k not in names:
                raise TilusArgumentError(f"{name} has no parameter {k!r}")
            if k in values:
                raise TilusArgumentError(f"{name} got parameter {k!r} twice")
            values[k] = v
        defaults = {
            k: p.default
            for k, p in inspect.signature(self.script_cls.__call__).parameters.items()
            if p.default is not inspect.Parameter.empty
        }
        const_args, runtime = {}, []
        for n, ann in params:
            if n not in values:
                if n in defaults:
                    values[n] = defaults[n]
                else:
                    raise TilusArgumentError(f"{name} is missing the argument {n!r}")
            v = values[n]
            if ann in (int, float, bool, str):
                const_args[n] = _check_const(name, n, ann, v)
            else:
                if isinstance(ann, PointerType) and hasattr(v, "__dlpack__"):
                    v = _from_dlpack(name, n, v)
                runtime.append((n, ann, v))
        return const_args, runtime

    #: ``fast(args)``: a backend's launcher of calls seen before, and what it returns for a
    #: call it cannot take (``tilus.backends.base.MISS``); set with the backend's state
    _fast = None
    _miss = None

    def __call__(self, *args, **kwargs):
        try:
            fast = self._fast
            if fast is not None and not kwargs:
                out = fast(args)
                if out is not self._miss:
                    return out
            return self._call(args, kwargs)
        except TilusError as e:
            raise e.with_traceback(None) from None

    def _call(self, args, kwargs):
        from tilus.backends import backend_for  # a backend is loaded on the first call

        const_args, runtime = self.bind(args, kwargs)
        backend = backend_for(runtime)
        state = self.backend_state(backend)
        return backend.run(self, state, const_args, runtime, None if kwargs else args)

    def backend_state(self, backend):
        """What ``backend`` keeps for this kernel (compiled kernels, dispatch), made by
        ``backend.new_state(self)`` on first use and kept as long as the kernel; the first
        backend that has a fast path gets it tried before every call."""
        states = self._backend_states
        if backend.name in states:
            return states[backend.name]
        state = states[backend.name] = backend.new_state(self)
        fast = backend.fast_path(state)
        if fast is not None and self._fast is None:
            from tilus.backends.base import MISS

            self._fast, self._miss = fast, MISS
        return state

    def runnable_programs(self, const_args, all_configs: bool):
        """The programs to run: the first config that compiles, or all that compile."""
        progs = []
        for cfg in self._configs:
            try:
                progs.append((cfg, self.program(cfg, const_args)))
            except TilusProgramError as e:  # the spec: configs that fail are dropped
                if len(self._configs) == 1:
                    raise
                warnings.warn(
                    f"{self.script_cls.__name__} config {cfg} skipped: {e.msg}", stacklevel=4
                )
                continue
            if not all_configs:
                break
        if not progs:
            raise self._none_compiled()
        return progs


def _from_dlpack(kernel, name, v):
    """A DLPack array (CuPy, JAX, ...) as a torch tensor on its memory (NumPy without torch);
    torch tensors and NumPy arrays are taken as they are."""
    if isinstance(v, np.ndarray) or type(v).__module__.startswith("torch"):
        return v
    try:
        try:
            import torch
        except ImportError:
            return np.from_dlpack(v)
        return torch.from_dlpack(v)
    except Exception as e:  # noqa: BLE001 - the producer's reason, named after the argument
        raise TilusArgumentError(
            f"{kernel}: argument {name!r} ({type(v).__name__}) cannot be taken through DLPack: "
            f"{type(e).__name__}: {e}"
        ) from None


def _check_const(kernel, name, ann, v):
    if ann is bool:
        if not isinstance(v, bool):
            raise TilusArgumentError(
                f"{kernel}: argument {name!r} is a compile-time bool, got {type(v).__name__}"
            )
        return v
    if ann is int:
        if isinstance(v, bool) or not isinstance(v, int):
            try:  # NumPy/torch integer scalars; an array here is a shifted argument list
                return operator.index(v)
            except TypeError:
                pass
            shifted = " (a missing argument before it?)" if hasattr(v, "shape") else f" {v!r}"
            raise TilusArgumentError(
                f"{kernel}: argument {name!r} is a compile-time int, got "
                f"{type(v).__name__}{shifted}"
            )
        return v
    if ann is float:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise TilusArgumentError(
                f"{kernel}: argument {name!r} is a compile-time float, got {type(v).__name__}"
            )
        return float(v)
    if not isinstance(v, str):
        raise TilusArgumentError(
            f"{kernel}: argument {name!r} is a compile-time str, got {type(v).__name__}"
        )
    return v
