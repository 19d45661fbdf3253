"""Interpreter rule of the counter-based random numbers (Philox-4x32 on NumPy uint32 arrays)."""

from __future__ import annotations

import numpy as np

from tilus.backends.interp.rules import reg, rule, scal
from tilus.ir import inst_random as RN

_MASK = 0xFFFFFFFF


def philox4x32(seed: int, offset: np.ndarray, rounds: int) -> tuple[np.ndarray, ...]:
    """The four output words for counters ``(offset, 0, 0, 0)`` under key ``seed`` (uint64)."""
    m0, m1 = (np.uint64(m) for m in RN.Random.MULTIPLIERS)
    w0, w1 = RN.Random.KEY_STEPS
    k0, k1 = seed & _MASK, (seed >> 32) & _MASK
    c0 = offset.astype(np.uint32)
    c1 = c2 = c3 = np.zeros_like(c0)
    for _ in range(rounds):
        p0 = c0.astype(np.uint64) * m0  # 32 x 32 -> 64 bits: exact in uint64
        p1 = c2.astype(np.uint64) * m1
        hi0, lo0 = (p0 >> np.uint64(32)).astype(np.uint32), p0.astype(np.uint32)
        hi1, lo1 = (p1 >> np.uint64(32)).astype(np.uint32), p1.astype(np.uint32)
        c0, c1, c2, c3 = hi1 ^ c1 ^ np.uint32(k0), lo1, hi0 ^ c3 ^ np.uint32(k1), lo0
        k0, k1 = (k0 + w0) & _MASK, (k1 + w1) & _MASK
    return c0, c1, c2, c3


def uniform(word: np.ndarray) -> np.ndarray:
    """float32 in [0, 1): the top 24 bits times 2^-24 (exact in float32)."""
    return ((word >> np.uint32(8)).astype(np.float32) * np.float32(2.0**-24)).astype(np.float32)


def normal(w0: np.ndarray, w1: np.ndarray) -> np.ndarray:
    """float32 N(0, 1) by Box-Muller: u1 in (0, 1] (never log 0), u2 in [0, 1)."""
    u1 = uniform(w0) + np.float32(2.0**-24)
    u2 = uniform(w1)
    # float32 steps as the CUDA lowering takes them; logf/sqrtf/cospif may differ by an ulp
    r = np.sqrt(np.float32(-2.0) * np.log(u1, dtype=np.float32), dtype=np.float32)
    return (r * np.cos(np.float32(2.0) * u2 * np.float32(np.pi), dtype=np.float32)).astype(
        np.float32
    )


@rule(RN.Random)
def _random(task, inst, loc):
    seed = int(scal(task, inst.seed, loc)) & ((1 << 64) - 1)
    offset = reg(task, inst.offset, loc).astype(np.int64).astype(np.uint32)
    words = philox4x32(seed, offset, inst.rounds)
    kind = inst.kind
    if kind is RN.RandomKind.UNIFORM:
        out = uniform(words[0])
    elif kind is RN.RandomKind.NORMAL:
        out = normal(words[0], words[1])
    else:
        out = words[kind.value]
    task.env[inst.out] = out
