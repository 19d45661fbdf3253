"""The random-number instructions of a Script: Philox-4x32 counters over a register tile."""

from __future__ import annotations

from tilus.dtypes import float32, uint32, uint64
from tilus.ir import inst_random as RN
from tilus.ir.enums import TensorKind
from tilus.ir.tensor import TensorVar
from tilus.lang.builder import current


class RandomInstructions:
    """Counter-based random numbers: the same ``seed`` and ``offset`` give the same bits on the
    interpreter and the GPU; distinct offsets give independent streams (use a global element
    index as the offset)."""

    def _random(self, seed, offset, n_rounds, kind, dtype, hint) -> TensorVar:
        b = current()
        off = b.expect_tensor(offset, (TensorKind.REGISTER,), "the random offset")
        sd = b.expect_scalar(seed, "the random seed", uint64)
        if isinstance(n_rounds, bool) or not isinstance(n_rounds, int):
            raise b.error(f"n_rounds must be a compile-time int, got {n_rounds!r}")
        out = b.register(dtype, off.shape, hint)
        b.inst(RN.Random(out, sd, off, n_rounds, kind))
        return out

    def randint4x(self, seed, offset, n_rounds: int = 10):
        """The four uint32 words of Philox-4x32 (``n_rounds`` rounds) for each element of the
        uint32/int32 ``offset`` tile, under the uint64 ``seed``."""
        words = (RN.RandomKind.WORD0, RN.RandomKind.WORD1, RN.RandomKind.WORD2, RN.RandomKind.WORD3)
        return tuple(self._random(seed, offset, n_rounds, w, uint32, "rnd") for w in words)

    def randint(self, seed, offset, n_rounds: int = 10) -> TensorVar:
        """The first uint32 word of :meth:`randint4x`."""
        return self._random(seed, offset, n_rounds, RN.RandomKind.WORD0, uint32, "rnd")

    def rand(self, seed, offset, n_rounds: int = 10) -> TensorVar:
        """float32 uniform in [0, 1): the top 24 bits of :meth:`randint` times 2^-24."""
        return self._random(seed, offset, n_rounds, RN.RandomKind.UNIFORM, float32, "rnd")

    def randn(self, seed, offset, n_rounds: int = 10) -> TensorVar:
        """float32 standard normal by Box-Muller over the first two Philox words."""
        return self._random(seed, offset, n_rounds, RN.RandomKind.NORMAL, float32, "rnd")
