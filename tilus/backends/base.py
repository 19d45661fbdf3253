"""The backend interface: what the front end asks of a backend that runs (or builds) kernels."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

#: What a fast path returns for a call it cannot take (the checked path runs it instead).
MISS = object()


class Backend(Protocol):
    """A way to run kernel calls (the CUDA backend, the interpreter).

    The front end (``tilus.lang.script.InstantiatedScript``) binds a call's arguments, asks
    ``tilus.backends.backend_for`` which backend runs it, and hands it over. It never looks
    inside a backend's state: it only keeps, per kernel, the object ``new_state`` made, so that
    the state lives exactly as long as the kernel.
    """

    #: Names the backend's state in the kernel (one state per backend and kernel).
    name: str

    def new_state(self, kernel) -> Any:
        """The per-kernel state of this backend (compiled kernels, dispatch), made on first use.

        Args:
            kernel: The ``InstantiatedScript``; a backend may keep a reference to it.
        """

    def fast_path(self, state) -> Callable[[tuple], Any] | None:
        """``fast(args)`` that launches a call seen before and returns ``MISS`` for any other;
        None when the backend has none. The front end tries it before binding a call."""

    def run(self, kernel, state, const_args: dict, runtime: list, raw_args: tuple | None):
        """Run one call (checked arguments).

        Args:
            kernel: The ``InstantiatedScript`` (its ``configs``, ``program(...)``...).
            state: What ``new_state(kernel)`` made.
            const_args, runtime: From ``kernel.bind``.
            raw_args: The call's positional arguments when it had no keywords (what a fast path
                is keyed on), else None.
        """


class BuildingBackend(Backend, Protocol):
    """A backend that also compiles ahead of a call (``tilus.compile``)."""

    def build(self, program, config: dict, *, arch: str) -> Any:
        """Compile one lowered program of ``config`` for ``arch`` (a ``CompiledKernel``)."""
