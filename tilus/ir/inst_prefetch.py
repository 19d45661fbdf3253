"""L2 prefetch: a TMA tensor prefetch pulls a box of global memory into L2 (no shared memory)."""

from __future__ import annotations

from tilus.ir.inst import Inst, InstError, _tma_box_error, instruction
from tilus.ir.tensor import TensorVar


@instruction("tma_prefetch", ptx="9.7.9.25.5.3 cp.async.bulk.prefetch.tensor")
class TmaPrefetch(Inst):
    """Prefetch into L2 the box of global view ``src`` at ``offsets`` that a TMA load into the
    shared tile ``like`` would read (``like`` gives the box and the tensor map; it is neither
    read nor written). No barrier, no completion: only a hint that makes the later load hit."""

    src: TensorVar
    like: TensorVar
    offsets: tuple
    dims: tuple[int, ...]

    def validate(self) -> None:
        """The shared tile fits one TMA box per dimension."""
        if msg := _tma_box_error("tma.prefetch", self.like):
            raise InstError(msg)
