"""``tilus.compile``: build a kernel's CUDA binaries without a GPU (for CI and inspection)."""

from __future__ import annotations


def compile(kernel, *args, target: str = "sm_90a", config: dict | None = None, **kwargs):  # noqa: A001
    """Compile ``kernel`` for ``target`` through NVRTC, no GPU needed.

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
        compiles, when the kernel has several configs and ``config`` is None.

    Raises:
        TilusCompileError: the config (or every config) cannot be compiled.
    """
    from tilus.backends.cuda.codegen.build import build
    from tilus.errors import TilusCompileError

    const_args, _ = kernel.bind(args, kwargs)
    if config is not None:
        return build(kernel.program(dict(config), const_args), dict(config), arch=target)
    configs = kernel.configs
    if len(configs) == 1:
        return build(kernel.program(configs[0], const_args), configs[0], arch=target)
    out, reasons = [], []
    for cfg in configs:
        try:
            out.append(build(kernel.program(cfg, const_args), cfg, arch=target))
        except TilusCompileError as e:
            reasons.append(f"  {cfg}: {e.msg if hasattr(e, 'msg') else e}")
    if not out:
        raise TilusCompileError(
            f"no config of {kernel.script_cls.__name__} compiles:\n" + "\n".join(reasons)
        )
    return out
