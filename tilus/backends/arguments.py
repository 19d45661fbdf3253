"""Argument checks both backends make before a launch: view extents, assume() facts."""

from __future__ import annotations

from tilus.errors import TilusArgumentError, TilusRuntimeError, at
from tilus.ir import inst as I
from tilus.ir.expr import Expr
from tilus.ir.visit import free_vars
from tilus.passes.walk import instructions


def check_view_extents(kname: str, program, scalars: dict) -> None:
    """Refuse a call whose integer arguments give a global view a negative extent.

    A grid computed from a negative size is usually empty (``cdiv(-5, 32)`` is 0), so such a
    call would otherwise do nothing, silently. Only extents computed from kernel parameters
    alone are checked (the others depend on values the kernel computes).

    Args:
        kname: The kernel's name, for the message.
        program: The lowered program (``tilus.passes.pipeline.Program``).
        scalars: Parameter name -> value of the call's integer and bool arguments.

    Raises:
        TilusArgumentError: naming the arguments the negative extent is computed from.
    """
    from tilus.ir.evaluate import eval_scalar

    params = {p: scalars[p.name] for p in program.fn.params if p.name in scalars}
    for stmt, inst in instructions(program.fn.body):
        if not isinstance(inst, I.GlobalView):
            continue
        for extent in inst.out.shape:
            if not isinstance(extent, Expr):
                continue
            names = free_vars(extent)
            if not names or any(v not in params for v in names):
                continue
            value = int(eval_scalar(extent, params))
            if value >= 0:
                continue
            args = ", ".join(f"{v.name}={params[v]}" for v in names)
            ptr = getattr(inst.ptr, "name", "a pointer")
            raise TilusArgumentError(
                f"{kname}: {'arguments' if len(names) > 1 else 'argument'} {args} "
                f"{'give' if len(names) > 1 else 'gives'} the global view "
                f"of {ptr!r} ({at(stmt.loc)}) an extent of {value}; sizes must not be negative"
            )


def check_assumptions(fn, env) -> None:
    """Raise at the ``assume()`` whose condition the arguments break, before anything runs.

    Both backends call it: the CUDA code generator hands the facts to the compiler
    (``__builtin_assume``), so a launch that broke one would be undefined behaviour.
    ``env`` maps the parameter variables to the call's values.
    """
    from tilus.ir.evaluate import eval_scalar
    from tilus.ir.printer import print_ir

    for cond, loc in fn.assumes:
        if not eval_scalar(cond, env, loc):
            p = cond.a.a  # param % c == 0
            raise TilusRuntimeError(
                f"{fn.name}: assume({print_ir(cond)}) does not hold for this launch: "
                f"{p.name} = {env[p]} is not a multiple of {cond.a.b.value}",
                loc,
            )


def check_cluster_grid(fn, grid, values: dict) -> None:
    """Refuse a grid that is not a whole number of thread-block clusters in every dim.

    ``values`` maps the parameter variables to the call's values; the message names the
    arguments the grid is computed from, the grid and the cluster shape.

    Raises:
        TilusArgumentError: at the ``self.attrs.blocks`` of the kernel.
    """
    if fn.cluster_size == 1:
        return
    for axis, g, c in zip("xyz", grid, fn.cluster):
        if g % c:
            names = sorted(
                {v for b in fn.blocks if isinstance(b, Expr) for v in free_vars(b)},
                key=lambda v: v.name,
            )
            args = ", ".join(f"{v.name}={values[v]}" for v in names if v in values)
            given = f" (from {args})" if args else ""
            raise TilusArgumentError(
                f"{fn.name}: grid {list(grid)}{given} is not a multiple of the cluster shape "
                f"{list(fn.cluster)} in dim {axis} ({g} blocks, clusters of {c}): "
                f"self.attrs.blocks must be a whole number of clusters"
                + (f" ({at(fn.cluster_loc)})" if fn.cluster_loc is not None else "")
            )


def check_pointer_alignment(kname: str, tensors, ptrs, mask: int) -> None:
    """Refuse a pointer with any of ``mask``'s address bits set: the build of kernel ``kname``
    assumes ``mask + 1``-byte aligned pointers (``Function.pointer_align``). ``tensors``: the
    ``(position, name, elements, shape)`` of each pointer argument, ``ptrs`` their addresses. A
    call through the dispatcher never trips it: it picks the build for any alignment."""
    for (_, name, _, _), ptr in zip(tensors, ptrs):
        if ptr & mask:
            raise TilusArgumentError(
                f"{kname}: argument {name!r} is at address {ptr:#x}, not a multiple of "
                f"{mask + 1} bytes, but this build of the kernel assumes {mask + 1}-byte aligned "
                "pointers (calling the kernel picks the build for any alignment)"
            )


def tma_error(kname: str, name: str, e) -> TilusArgumentError:
    """The error for argument ``name`` of kernel ``kname`` that TMA cannot read (``e``: why)."""
    return TilusArgumentError(
        f"{kname}: argument {name!r} cannot be read by TMA: {e} (TMA needs 16-byte aligned data "
        "and rows whose byte size is a multiple of 16)"
    )
