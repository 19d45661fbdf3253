"""tilus kernels as torch custom operators (``torch.library``), usable inside ``torch.compile``.

A tilus kernel writes its results into tensors it is given; a torch operator returns them. So
``custom_op`` makes an operator whose arguments are the kernel's parameters without its
outputs, which the operator allocates (on the device of the first tensor argument), passes to
the kernel and returns::

    import tilus.torch

    add = tilus.torch.custom_op("mylib::vector_add", VectorAdd(), outputs={"z_ptr": "x_ptr"})
    z = add(n, x, y)                    # VectorAdd()(n, x, y, z) with z = torch.empty_like(x)
    f = torch.compile(lambda x, y: add(x.numel(), x, y) * 2)

``torch.compile`` traces the operator through its fake implementation (the outputs' shapes and
dtypes, no kernel run), so the graph keeps it as one opaque call; on CPU tensors the kernel
runs on the interpreter, on CUDA tensors on the GPU, on torch's current stream (inside
``torch.cuda.graph`` the capture stream: call it once before capturing, so that it is compiled
and tuned; the launch itself neither synchronizes nor allocates).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import torch

from tilus.dtypes import DataType, PointerType
from tilus.errors import TilusArgumentError

__all__ = ["custom_op"]

#: compile-time annotation -> schema type
_CONST_TYPES = {int: "int", float: "float", bool: "bool", str: "str"}


def _schema_type(name: str, ann) -> str:
    if isinstance(ann, PointerType):
        return "Tensor"
    if ann in _CONST_TYPES:
        return _CONST_TYPES[ann]
    if isinstance(ann, DataType):
        if ann.kind == "bool":
            return "bool"
        return "SymInt" if ann.is_integer() else "float"
    raise TilusArgumentError(f"parameter {name!r} ({ann!r}) has no torch operator type")


def _allocator(kernel_name: str, out: str, spec, params: dict) -> Callable:
    """``alloc(args, device)`` of one output: ``torch.empty_like`` of a tensor argument (spec
    is its name) or ``torch.empty(shape, dtype=dtype)`` (spec is ``args -> (shape, dtype)``)."""
    if isinstance(spec, str):
        if not isinstance(params.get(spec), PointerType):
            raise TilusArgumentError(
                f"{kernel_name}: output {out!r} is shaped like {spec!r}, which is not a tensor "
                "argument of the operator"
            )
        return lambda args, device: torch.empty_like(args[spec])
    if callable(spec):

        def alloc(args, device):
            shape, dtype = spec(args)
            return torch.empty(tuple(shape), dtype=dtype, device=device)

        return alloc
    raise TilusArgumentError(
        f"{kernel_name}: output {out!r} needs the name of a tensor argument or a function "
        "args -> (shape, dtype)"
    )


def custom_op(
    name: str,
    kernel,
    *,
    outputs: Mapping[str, str | Callable] | None = None,
    mutates: Sequence[str] = (),
    device_types: str | Sequence[str] | None = None,
):
    """Register ``kernel`` as the torch operator ``name`` (``"namespace::op"``).

    Args:
        name: The operator's qualified name, e.g. ``"mylib::softmax"``.
        kernel: An instantiated tilus kernel (``MyKernel()`` or ``MyKernel(block=128)``).
        outputs: Pointer parameters the operator allocates and returns, each with how: the
            name of a tensor parameter to copy the shape, dtype and device of, or a function of
            the operator's arguments (a dict by parameter name) returning ``(shape, dtype)``.
            Returned in this order (one tensor, or a tuple for several).
        mutates: Pointer parameters the kernel writes in place (they stay arguments).
        device_types: Passed to ``torch.library.custom_op`` (default: every device).

    Returns:
        The operator (a ``torch.library.CustomOpDef``; call it like a function), with its fake
        implementation registered, so that ``torch.compile`` can trace it.

    Raises:
        TilusArgumentError: an output or mutated name is not a pointer parameter, or a
            parameter has no torch type.
    """
    outputs = dict(outputs or {})
    params = dict(kernel.params)
    kname = kernel.script_cls.__name__
    for n in [*outputs, *mutates]:
        if not isinstance(params.get(n), PointerType):
            raise TilusArgumentError(
                f"{kname}: {n!r} is not a pointer parameter of the kernel (its parameters: "
                f"{', '.join(params)})"
            )
    inputs = [n for n in params if n not in outputs]
    allocs = {o: _allocator(kname, o, spec, params) for o, spec in outputs.items()}
    order = list(params)
    args_text = ", ".join(
        f"{_schema_type(n, params[n])}{'(a!)' if n in mutates else ''} {n}" for n in inputs
    )
    if not outputs:
        ret = "()"
    elif len(outputs) == 1:
        ret = "Tensor"
    else:
        ret = "(" + ", ".join("Tensor" for _ in outputs) + ")"
    schema = f"({args_text}) -> {ret}"

    def _device(args):
        for v in args.values():
            if isinstance(v, torch.Tensor):
                return v.device
        return torch.device("cpu")

    def _outputs(args):
        device = _device(args)
        return {o: alloc(args, device) for o, alloc in allocs.items()}

    def _result(outs):
        vals = list(outs.values())
        if not vals:
            return None
        return vals[0] if len(vals) == 1 else tuple(vals)

    def impl(*values):
        args = dict(zip(inputs, values))
        outs = _outputs(args)
        call = []
        for n in order:
            v = outs[n] if n in outs else args[n]
            if isinstance(v, torch.Tensor) and n not in mutates and n not in outs:
                v = v.contiguous()  # an input view torch.compile made strided
            call.append(v)
        kernel(*call)
        return _result(outs)

    def fake(*values):
        return _result(_outputs(dict(zip(inputs, values))))

    op = torch.library.custom_op(
        name, impl, mutates_args=tuple(mutates), device_types=device_types, schema=schema
    )
    op.register_fake(fake)
    return op
