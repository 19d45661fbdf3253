"""The backends (CUDA, the interpreter) and the choice of the one that runs a call."""

from __future__ import annotations


def backend_for(runtime):
    """The backend that runs a call with these runtime arguments (see ``backends.base``).

    The interpreter when ``tilus.option.interpret`` is set or when no tensor argument is on a
    GPU (NumPy arrays, CPU tensors); CUDA otherwise. Imported on first use, so that importing
    tilus loads neither backend.

    Args:
        runtime: ``(name, annotation, value)`` of the runtime arguments (``kernel.bind``).
    """
    from tilus.backends.interp.launch import INTERPRETER, wants_interpreter

    if wants_interpreter(runtime):
        return INTERPRETER
    from tilus.backends.cuda.launch import CUDA

    return CUDA
