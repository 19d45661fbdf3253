"""Register loops instead of straight-line code: closed forms of register index maps."""

# NVRTC's time grows with the source it is given, not only with the unrolled code: a
# straight-line body of one statement per register takes several times longer to compile than
# the same work written as a `#pragma unroll` loop of constant trip count (which ptxas unrolls
# to the same SASS, every register index a constant). Big tiles (a row of 32768 over 256
# threads is 128 registers a thread) made kernels of thousands of lines. These helpers give the
# C expression of a register index as a function of a loop variable, so the generators emit
# one loop body: a layout's local coordinates are affine in the register index's mixed-radix
# digits (the layout's definition), and a map between two tiles' registers (a broadcast
# operand, the registers reduced into one output) is fitted, and checked at every point, as an
# affine function of the digits of the index (else the caller keeps its straight-line code).

from __future__ import annotations

import itertools

#: Below this many registers the straight-line code stays (it is short and reads well).
LOOP_MIN = 16


def _digit(i: str, below: int, extent: int, total: int) -> str:
    """C expression of the digit of ``i`` of weight ``below`` and radix ``extent``."""
    i = i if i.isidentifier() else f"({i})"
    d = i if below == 1 else f"({i} / {below})"
    return d if below * extent >= total else f"({d} % {extent})"


def local_coord_exprs(layout, i: str) -> list[str]:
    """Per dim, the C expression of register ``i``'s coordinate contribution (``i`` a C int)."""
    total = layout.local_size
    out: list[list[str]] = [[] for _ in layout.shape]
    below = 1
    for f in reversed(layout.locals):
        if f.dim >= 0 and f.extent > 1:
            d = _digit(i, below, f.extent, total)
            out[f.dim].append(d if f.stride == 1 else f"{d} * {f.stride}")
        below *= f.extent
    return [" + ".join(x) if x else "0" for x in out]


def _prime_factors(n: int) -> list[int]:
    out, p = [], 2
    while p * p <= n:
        while n % p == 0:
            out.append(p)
            n //= p
        p += 1
    if n > 1:
        out.append(n)
    return out


def _orders(n: int, cap: int = 24):
    """Orders of the prime factors of ``n`` to try as digit radices (little-endian)."""
    ps = _prime_factors(n)
    if len(set(ps)) == 1:
        yield ps
        return
    seen = set()
    for order in itertools.permutations(ps):
        if order not in seen:
            seen.add(order)
            yield list(order)
            if len(seen) >= cap:
                return


def fit(m: list[int]) -> list[tuple[int, int, int]] | None:
    """``m`` (a list of ints) as ``m[0] + sum(((i // below) % extent) * step)`` over terms
    ``(below, extent, step)``, checked at every ``i``; None when it is not of that form."""
    n = len(m)
    if n == 0:
        return None
    for order in _orders(n):
        terms = _fit_digits(m, order)
        if terms is not None:
            return terms
    return None


def _fit_digits(m: list[int], radices: list[int]) -> list[tuple[int, int, int]] | None:
    n = len(m)
    terms, below = [], 1
    for p in radices:  # the little-endian digits of i
        terms.append((below, p, m[below] - m[0] if below < n else 0))
        below *= p
    merged: list[list[int]] = []  # a digit that continues the one below: one wider term
    for b, e, s in terms:
        if merged and merged[-1][2] * merged[-1][1] == s and merged[-1][2] != 0:
            merged[-1][1] *= e
        else:
            merged.append([b, e, s])
    out = [(b, e, s) for b, e, s in merged if s != 0]
    for i in range(n):
        if m[0] + sum(((i // b) % e) * s for b, e, s in out) != m[i]:
            return None
    return out


def fitted_expr(m: list[int], i: str) -> str | None:
    """The C expression of ``m[i]`` for a C int ``i`` (see :func:`fit`), or None."""
    terms = fit(m)
    if terms is None:
        return None
    n = len(m)
    parts = [str(m[0])] if m[0] else []
    for b, e, s in terms:
        d = _digit(i, b, e, n)
        parts.append(d if s == 1 else f"{d} * {s}")
    return " + ".join(parts) or "0"
