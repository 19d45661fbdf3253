"""Random numbers: the counter-based Philox-4x32 generator as one elementwise instruction."""

from __future__ import annotations

from enum import Enum
from typing import ClassVar

from tilus.ir.expr import Expr
from tilus.ir.inst import Inst, InstError, instruction
from tilus.ir.tensor import TensorVar


class RandomKind(Enum):
    """What a :class:`Random` instruction returns from each Philox-4x32 output."""

    WORD0 = 0  # the generator's four 32-bit output words, as uint32
    WORD1 = 1
    WORD2 = 2
    WORD3 = 3
    UNIFORM = "uniform"  # float32 in [0, 1): the top 24 bits of word 0 times 2^-24 (exact)
    NORMAL = "normal"  # float32 N(0, 1): Box-Muller over words 0 and 1


@instruction("random")
class Random(Inst):
    """Counter-based random numbers (Philox-4x32, Salmon et al. 2011), elementwise.

    Each element's counter is ``(offset, 0, 0, 0)`` and the key is the two halves of the uint64
    ``seed``; ``rounds`` rounds (10 by default) give four uint32 words, of which ``kind`` says
    what the element gets. The same seed and offsets give the same bits on every backend.
    """

    out: TensorVar
    seed: Expr
    offset: TensorVar
    rounds: int
    kind: RandomKind

    MAX_ROUNDS: ClassVar[int] = 16
    #: Philox-4x32 round multipliers and Weyl key increments (one source for every backend)
    MULTIPLIERS: ClassVar[tuple[int, int]] = (0xD2511F53, 0xCD9E8D57)
    KEY_STEPS: ClassVar[tuple[int, int]] = (0x9E3779B9, 0xBB67AE85)

    def validate(self) -> None:
        """Rounds are a small compile-time count; offsets are 32-bit unsigned integers."""
        if not 1 <= self.rounds <= self.MAX_ROUNDS:
            raise InstError(f"Philox rounds must be in [1, {self.MAX_ROUNDS}], got {self.rounds}")
        if self.offset.dtype.name not in ("uint32", "int32"):
            raise InstError(f"random offsets must be uint32 or int32, got {self.offset.dtype}")
