"""``tilus.compile``: build a kernel's CUDA binaries without a GPU (for CI and inspection)."""

from __future__ import annotations

import numpy as np


def compile(kernel, *args, target=None, config: dict | None = None, **kwargs):  # noqa: A001
    """Compile ``kernel`` for ``target`` through NVRTC, no GPU needed.

    Several configs are compiled in parallel: each config is constructed, transpiled and
    generated here (user code never runs elsewhere) while ``tilus.option.parallel_workers``
    build workers (fresh interpreters, default one per usable core; 1 compiles everything here)
    run NVRTC on the sources, with a progress bar on stderr; the result does not depend on the
    number of workers.

    Args:
        kernel: an instantiated Script (``MyKernel(...)``).
        *args, **kwargs: the call's arguments: ints for compile-time ``int`` parameters; for
            the others anything (torch tensors of any device, "meta" included, NumPy arrays,
            dtypes, numbers) since only the compile-time arguments shape the kernel, and
            whether every array's (torch or NumPy) address is a multiple of 16 bytes: the
            usual build assumes so (a launch checks it); a misaligned one gives the build
            that assumes nothing of the pointers' alignment (``Function.pointer_align``).
        target: a ``tilus.target.Target`` or its name: "sm_80", "sm_86", "sm_89", "sm_90" or
            "sm_90a"; None: the current target if one is set (``tilus.target.scope``), else
            sm_90a.
        config: compile only this autotune configuration (errors are raised, not skipped).

    Returns:
        A ``CompiledKernel`` (``.source``, ``.cubin``, ``.resources``, ``.sass()``,
        ``.compile_seconds``) when one config is compiled; a list of them, one per config that
        compiles, in config order, when the kernel has several configs and ``config`` is None
        (configs that fail with ``TilusCompileError`` are skipped).

    Raises:
        TilusCompileError: the config (or every config) cannot be compiled; with several
            configs the message points at the first failure's line and lists every config's
            reason.
        Exception: a config failed for another reason (a constructor's exception, NVRTC): the
            first such error, raised after every config was tried.
    """
    from tilus.target import buildable, building_for, current_or

    target = buildable(current_or("sm_90a") if target is None else target)
    with building_for(target):  # self.cuda answers for the target
        return _compile(kernel, *args, target=target, config=config, **kwargs)


def _compile(kernel, *args, target, config: dict | None = None, **kwargs):
    """The body of :func:`compile`, inside ``building_for(target)``."""
    from tilus.backends.cuda.launch import CUDA, with_alignment

    build = CUDA.build
    const_args, runtime = kernel.bind(args, kwargs)
    const_args = with_alignment(const_args, [a for _, _, v in runtime if (a := _address(v))])
    if config is not None:
        return build(kernel.program(dict(config), const_args), dict(config), arch=target)
    configs = kernel.configs
    if len(configs) == 1:
        return build(kernel.program(configs[0], const_args), configs[0], arch=target)
    return _build_space(kernel, configs, const_args, target)


def _build_space(kernel, configs, const_args, target) -> list:
    """Build every config (``tilus.tune.compile_all``): constructors, transpiling and code
    generation run here, one config after another; NVRTC runs in build workers meanwhile.

    Configs that tilus refuses are skipped (their reasons land in ``kernel.failed_configs``);
    any other failure is raised, after every config has been tried.
    """
    from tilus.backends.cuda.codegen.build import build_steps
    from tilus.tune.failures import no_config_error
    from tilus.tune.parallel import compile_all

    def build_one(cfg):
        return (yield from build_steps(kernel.program(cfg, const_args), cfg, arch=target))

    results = compile_all(configs, build_one, label=f"compiling {kernel.script_cls.__name__}")
    for r in results:
        if not r.ok:
            kernel.record_failure(r.config, r.error)
    broken = next((r for r in results if not r.ok and not r.refused), None)
    if broken is not None:
        raise broken.exception
    out = [r.value for r in results if r.ok]
    if not out:
        failures = [(r.config, r.error, r.exception) for r in results]
        raise no_config_error(kernel.script_cls.__name__, failures)
    return out


def _address(v) -> int | None:
    """The address of a torch tensor or NumPy array argument (whose alignment picks the
    build), else None."""
    if isinstance(v, np.ndarray):
        return int(v.ctypes.data)
    if type(v).__module__.startswith("torch") and hasattr(v, "data_ptr"):
        return int(v.data_ptr())
    return None
