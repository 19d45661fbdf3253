"""A kernel in tile IR: its runtime parameters, launch attributes and body."""

from __future__ import annotations

from dataclasses import dataclass

from tilus.ir.expr import Expr, Var
from tilus.ir.stmt import Stmt

#: What a kernel may assume of its pointer arguments by default: addresses that are multiples
#: of 16 bytes (every torch allocation is; a slice at an odd offset is not). The launch checks it.
POINTER_ALIGN = 16

#: The compile-time argument (never a Python identifier, so never a parameter's name) that asks
#: for the build that assumes nothing of the pointers' alignment (``Function.pointer_align`` 1).
UNALIGNED_ARG = "(unaligned pointers)"


@dataclass(frozen=True, eq=False, slots=True)
class Function:
    """One kernel.

    Attributes:
        name: the Script class name.
        params: runtime parameters (scalars and pointers) in call order.
        body: the kernel body.
        blocks: grid size (x, y, z) as expressions over ``params`` only.
        warps: warps per block.
        const_args: compile-time arguments baked into this kernel, (name, value) pairs.
        config: the autotune configuration this kernel was built from, (name, value) pairs.
        source_file: the file the Script was defined in.
        assumes: facts the kernel states about its parameters (``self.assume``), each a
            ``(condition, source location)`` pair; every condition is ``param % c == 0``.
        cluster: the thread-block cluster shape (x, y, z) (``self.attrs.cluster_blocks``).
        cluster_loc: where the cluster shape was set (None when it was not).
        min_blocks: blocks an SM must hold at once (``self.attrs.min_blocks``): the CUDA
            compiler keeps registers a thread within ``65536 / (min_blocks * threads)``; the
            interpreter, which has no registers, ignores it.
        pointer_align: bytes that every pointer argument's address is known to be a multiple
            of (``POINTER_ALIGN``, checked at each launch; 1: nothing known). The CUDA backend
            builds a kernel for 16-byte aligned pointers and, on a call with a misaligned one,
            a second build for any alignment (``UNALIGNED_ARG``).
    """

    name: str
    params: tuple[Var, ...]
    body: Stmt
    blocks: tuple[Expr, Expr, Expr]
    warps: int
    const_args: tuple
    config: tuple
    source_file: str
    assumes: tuple = ()
    cluster: tuple[int, int, int] = (1, 1, 1)
    cluster_loc: object = None
    min_blocks: int = 1
    pointer_align: int = 16

    @property
    def cluster_size(self) -> int:
        """Blocks per cluster (1: no cluster)."""
        x, y, z = self.cluster
        return x * y * z

    @property
    def num_threads(self) -> int:
        """Threads per block."""
        return self.warps * 32
