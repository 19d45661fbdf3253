"""Register layouts: how a tile is spread over the threads of a group and their registers."""

# A layout is an affine mixed-radix map. The thread index t (relative to the group) is split
# into digits by `threads` (first factor most significant), the register index i by `locals`;
# each digit d of a factor (dim, extent, stride) adds d * stride to the coordinate along dim.
# A factor with dim == -1 replicates: those digits select copies. Spatial factors are the
# thread digits, local factors the register digits; composing them gives the usual
# local(...).spatial(...) layouts, and the wgmma/mma.sync fragments are written this way.

from __future__ import annotations

import math
from dataclasses import dataclass

from tilus.ir.layout.algebra import Factor, LayoutAlgebra


def _digits(x: int, factors: tuple[Factor, ...]) -> list[int]:
    out = []
    for f in reversed(factors):
        out.append(x % f.extent)
        x //= f.extent
    return out[::-1]


@dataclass(frozen=True)
class RegisterLayout(LayoutAlgebra):
    """A tile of ``shape`` over ``num_threads`` threads, ``local_size`` registers each."""

    shape: tuple[int, ...]
    threads: tuple[Factor, ...]
    locals: tuple[Factor, ...]
    kind: str = "generic"  # "wgmma_acc", "replicated", "blocked", "generic"

    @property
    def num_threads(self) -> int:
        """Threads the layout spans."""
        return math.prod(f.extent for f in self.threads)

    @property
    def local_size(self) -> int:
        """Registers (elements) each thread holds."""
        return math.prod(f.extent for f in self.locals)

    @property
    def replicated(self) -> bool:
        """True when every thread holds the whole tile."""
        return all(f.dim == -1 for f in self.threads)

    def local_coords(self, i: int) -> tuple[int, ...]:
        """The coordinate contribution of register ``i`` (add ``thread_coords``)."""
        c = [0] * len(self.shape)
        for f, d in zip(self.locals, _digits(i, self.locals)):
            if f.dim >= 0:
                c[f.dim] += d * f.stride
        return tuple(c)

    def thread_coords(self, t: int) -> tuple[int, ...]:
        """The coordinate contribution of thread ``t`` of the group."""
        c = [0] * len(self.shape)
        for f, d in zip(self.threads, _digits(t, self.threads)):
            if f.dim >= 0:
                c[f.dim] += d * f.stride
        return tuple(c)

    def coords(self, t: int, i: int) -> tuple[int, ...]:
        """The tile coordinate held by register ``i`` of thread ``t``."""
        return tuple(a + b for a, b in zip(self.thread_coords(t), self.local_coords(i)))

    def is_complete(self) -> bool:
        """True when every coordinate of the tile is held by some thread, each exactly once
        per replica (checked by enumeration; meant for tests and small tiles)."""
        size = math.prod(self.shape)
        reps = math.prod(f.extent for f in self.threads if f.dim == -1)
        seen: dict = {}
        for t in range(self.num_threads):
            for i in range(self.local_size):
                c = self.coords(t, i)
                if any(not 0 <= x < n for x, n in zip(c, self.shape)):
                    return False
                seen[c] = seen.get(c, 0) + 1
        return len(seen) == size and all(v == reps for v in seen.values())


def replicated(shape, num_threads: int) -> RegisterLayout:
    """Every thread of the group holds the whole tile (row-major registers)."""
    shape = tuple(shape)
    locs = [Factor(d, shape[d], 1) for d in range(len(shape))] or [Factor(-1, 1, 0)]
    return RegisterLayout(shape, (Factor(-1, num_threads, 0),), tuple(locs), "replicated")


def wgmma_acc(m: int, n: int) -> RegisterLayout:
    """The wgmma m64nNk16 f32 accumulator over a 128-thread warp group, ``m // 64`` repeats.

    Register ``i`` of an m64 tile sits at row ``warp*16 + lane/4 + 8*((i/2)%2)`` and column
    ``(i/4)*8 + (lane%4)*2 + i%2`` (PTX ISA, wgmma D register fragment).
    """
    if m % 64 or n % 8:
        raise ValueError(f"a wgmma accumulator is [64k, 8j], got [{m}, {n}]")
    threads = (Factor(0, 4, 16), Factor(0, 8, 1), Factor(1, 4, 2))
    locs = (Factor(0, m // 64, 64), Factor(1, n // 8, 8), Factor(0, 2, 8), Factor(1, 2, 1))
    return RegisterLayout((m, n), threads, locs, "wgmma_acc")


def blocked(shape, num_threads: int, vector: int = 1) -> RegisterLayout:
    """Threads laid over the tile row-major, ``vector`` contiguous elements each along the last
    dim; whatever the threads do not cover repeats in registers. Extra threads replicate."""
    shape = tuple(shape)
    rank = len(shape)
    last = shape[-1]
    v = math.gcd(vector, last)
    thr: list[Factor] = []
    left = num_threads
    # threads along the last dim first (innermost), then outer dims
    spans = [0] * rank
    t_last = math.gcd(left, last // v)
    spans[-1] = t_last
    left //= t_last
    for d in reversed(range(rank - 1)):
        g = math.gcd(left, shape[d])
        spans[d] = g
        left //= g
    # registers: outer repeats then the vector
    locs: list[Factor] = []
    for d in range(rank):
        per = shape[d] // (spans[d] * (v if d == rank - 1 else 1))
        if d == rank - 1:
            stride = spans[d] * v
        else:
            stride = spans[d]
        if per > 1:
            locs.append(Factor(d, per, stride))
    if v > 1:
        locs.append(Factor(rank - 1, v, 1))
    if left > 1:
        thr.append(Factor(-1, left, 0))
    for d in range(rank):
        if spans[d] > 1:
            thr.append(Factor(d, spans[d], v if d == rank - 1 else 1))
    if not thr:
        thr.append(Factor(-1, 1, 0))
    if not locs:
        locs.append(Factor(rank - 1, 1, 1))
    return RegisterLayout(shape, tuple(thr), tuple(locs), "blocked")


def mma_warps(num_warps: int, m: int, n: int) -> tuple[int, int] | None:
    """How warps tile an [m, n] mma.sync accumulator: (warps along m, warps along n).

    Uses as many of the ``num_warps`` warps as the tile allows (a power-of-two share of them);
    the warps left over hold copies (``num_warps // (wm * wn)`` replicas).
    """
    used = num_warps
    while used >= 1:
        options = []
        wm = 1
        while wm <= used:
            if used % wm == 0:
                wn = used // wm
                if m % (16 * wm) == 0 and n % (8 * wn) == 0:
                    options.append((abs((m // wm) - (n // wn)), wm, wn))
            wm *= 2
        if options:
            _, wm, wn = min(options)
            return wm, wn
        if used % 2:
            return None
        used //= 2
    return None


def _rep(num_warps: int, wm: int, wn: int) -> tuple[Factor, ...]:
    r = num_warps // (wm * wn) if num_warps else 1
    return (Factor(-1, r, 0),) if r > 1 else ()


def mma_c(m: int, n: int, wm: int, wn: int, num_warps: int = 0) -> RegisterLayout:
    """The mma.sync m16n8 f32 accumulator over ``wm x wn`` warps, repeated over the tile.

    Register ``r`` of an m16n8 atom sits at row ``lane/4 + 8*(r/2)``, column
    ``(lane%4)*2 + r%2`` (PTX ISA, mma.m16n8k16 C/D fragment).
    """
    threads = _rep(num_warps, wm, wn) + (
        Factor(0, wm, m // wm),
        Factor(1, wn, n // wn),
        Factor(0, 8, 1),
        Factor(1, 4, 2),
    )
    locs = (
        Factor(0, m // (16 * wm), 16),
        Factor(1, n // (8 * wn), 8),
        Factor(0, 2, 8),
        Factor(1, 2, 1),
    )
    return RegisterLayout((m, n), threads, locs, "mma_c")


def mma_a(m: int, k: int, wm: int, wn: int, num_warps: int = 0, pack: int = 2) -> RegisterLayout:
    """The mma.sync A fragment (row major), replicated over the ``wn`` warp columns.

    ``pack`` elements share a 32-bit register: 2 (16-bit types, m16k16), 4 (8-bit, m16k32) or
    1 (tf32, m16k8). Element ``h`` of an atom sits at row ``lane/4 + 8*((h/pack)%2)``, column
    ``(lane%4)*pack + h%pack + 4*pack*(h/(2*pack))`` (PTX ISA, mma.m16n8k{8,16,32} A fragment).
    """
    threads = _rep(num_warps, wm, wn) + (
        Factor(0, wm, m // wm),
        Factor(-1, wn, 0),
        Factor(0, 8, 1),
        Factor(1, 4, pack),
    )
    locs = (
        Factor(0, m // (16 * wm), 16),
        Factor(1, k // (8 * pack), 8 * pack),
        Factor(1, 2, 4 * pack),
        Factor(0, 2, 8),
    ) + _pack(1, pack)
    return RegisterLayout((m, k), threads, locs, "mma_a")


def mma_b(k: int, n: int, wm: int, wn: int, num_warps: int = 0, pack: int = 2) -> RegisterLayout:
    """The mma.sync B fragment (column major), replicated over the ``wm`` warp rows.

    Element ``h`` of an atom sits at row (k) ``(lane%4)*pack + h%pack + 4*pack*(h/pack)``,
    column ``lane/4`` (``pack`` as in :func:`mma_a`).
    """
    threads = _rep(num_warps, wm, wn) + (
        Factor(-1, wm, 0),
        Factor(1, wn, n // wn),
        Factor(1, 8, 1),
        Factor(0, 4, pack),
    )
    locs = (
        Factor(1, n // (8 * wn), 8),
        Factor(0, k // (8 * pack), 8 * pack),
        Factor(0, 2, 4 * pack),
    ) + _pack(0, pack)
    return RegisterLayout((k, n), threads, locs, "mma_b")


def _pack(dim: int, pack: int) -> tuple[Factor, ...]:
    # the elements sharing a 32-bit register (none for tf32: one element per register)
    return (Factor(dim, pack, 1),) if pack > 1 else ()


def permute(layout: RegisterLayout, dims) -> RegisterLayout:
    """The same registers seen with dims permuted (``out.shape[k] = shape[dims[k]]``)."""
    dims = tuple(dims)
    where = {d: k for k, d in enumerate(dims)}

    def f(x: Factor) -> Factor:
        """The factor with its dim renumbered."""
        return Factor(where[x.dim] if x.dim >= 0 else -1, x.extent, x.stride)

    shape = tuple(layout.shape[d] for d in dims)
    return RegisterLayout(
        shape, tuple(map(f, layout.threads)), tuple(map(f, layout.locals)), layout.kind
    )
