"""``tilus.compile``: build a kernel's CUDA binaries without a GPU (for CI and inspection)."""

from __future__ import annotations

import os
import warnings


def compile(kernel, *args, target: str = "sm_90a", config: dict | None = None, **kwargs):  # noqa: A001
    """Compile ``kernel`` for ``target`` through NVRTC, no GPU needed.

    Several configs are compiled in parallel, in ``tilus.option.parallel_workers`` forked
    processes (default: one per usable core; 1 compiles them one after another here), with a
    progress bar on stderr; the result does not depend on the number of workers.

    Args:
        kernel: an instantiated Script (``MyKernel(...)``).
        *args, **kwargs: the call's arguments: ints for compile-time ``int`` parameters; for
            the others anything (torch tensors of any device, "meta" included, NumPy arrays,
            dtypes, numbers) since only the compile-time arguments shape the kernel.
        target: the GPU architecture; only "sm_90a".
        config: compile only this autotune configuration (errors are raised, not skipped).

    Returns:
        A ``CompiledKernel`` (``.source``, ``.cubin``, ``.resources``, ``.sass()``,
        ``.compile_seconds``) when one config is compiled; a list of them, one per config that
        compiles, in config order, when the kernel has several configs and ``config`` is None
        (configs that fail with ``TilusCompileError`` are skipped).

    Raises:
        TilusCompileError: the config (or every config) cannot be compiled; with several
            configs the message lists every config's reason.
    """
    from tilus.backends.cuda.launch import CUDA
    from tilus.errors import TilusCompileError

    build = CUDA.build
    const_args, _ = kernel.bind(args, kwargs)
    if config is not None:
        return build(kernel.program(dict(config), const_args), dict(config), arch=target)
    configs = kernel.configs
    if len(configs) == 1:
        return build(kernel.program(configs[0], const_args), configs[0], arch=target)
    built = _build_in_workers(kernel, configs, const_args, target)
    out, reasons = [], []
    for cfg, done in zip(configs, built):
        if done is not None:
            out.append(done)
            continue
        # not built by a worker (it failed there, or there were no workers): build it here, so
        # errors keep their type and failures land in kernel.failed_configs as when serial
        try:
            out.append(build(kernel.program(cfg, const_args), cfg, arch=target))
        except TilusCompileError as e:
            reasons.append(f"  {cfg}: {e.msg if hasattr(e, 'msg') else e}")
    if not out:
        raise TilusCompileError(
            f"no config of {kernel.script_cls.__name__} compiles:\n" + "\n".join(reasons)
        )
    return out


def _build_in_workers(kernel, configs, const_args, target) -> list:
    """Build ``configs`` in forked worker processes (``tilus.tune.compile_all``).

    Returns, per config, its ``CompiledKernel`` (sent back whole: source, cubin, resources) or
    None where the worker failed; warnings raised in a worker are raised again here.
    """
    from tilus.tune.parallel import compile_all, default_workers

    if default_workers() <= 1:
        return [None] * len(configs)
    here = os.getpid()

    def build_one(cfg):
        from tilus.backends.cuda.launch import CUDA

        build = CUDA.build
        if os.getpid() == here:  # a thread pool or a retry: warnings already reach the caller
            return build(kernel.program(cfg, const_args), cfg, arch=target), []
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")  # a forked worker inherits 'already warned' marks
            ck = build(kernel.program(cfg, const_args), cfg, arch=target)
        return ck, [(w.category, str(w.message)) for w in caught]

    results = compile_all(
        configs, build_one, label=f"compiling {kernel.script_cls.__name__}", executor="auto"
    )
    out = []
    for r in results:
        if not r.ok:
            out.append(None)
            continue
        ck, caught = r.value
        for category, message in caught:
            warnings.warn(message, category, stacklevel=3)
        out.append(ck)
    return out
