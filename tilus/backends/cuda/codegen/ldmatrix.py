"""``load_shared`` into mma.sync operand fragments with ldmatrix (PTX ISA 9.7.14.5.15)."""

# ldmatrix.x{1,2,4} loads 1, 2 or 4 matrices of 8 rows x 16 bytes: lane L gives the address of
# row L % 8 of matrix L / 8, and lane l receives 32-bit word l % 4 of row l / 4 of each matrix
# (.trans, b16 only: the two 16-bit elements of rows 2(l % 4) and 2(l % 4) + 1 at column
# l / 4). Each 32-bit register of an mma.sync A fragment (any element width: 4 bytes of one
# row) and of a 16-bit B fragment read from a [K, N] tile (.trans: two K-adjacent elements of
# one column) is one such word, 8 lanes apart in rows, so a thread's fragment registers, four
# at a time, are one ldmatrix.x4 instead of 4-16 shared loads.

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from tilus.backends.cuda.codegen import registers as R
from tilus.backends.cuda.ptx import mma as P
from tilus.ir.layout.register import RegisterLayout


@dataclass(frozen=True)
class LdmatrixPlan:
    """How a fragment layout is loaded: ``pack`` elements per 32-bit word, ``trans`` for
    .trans, and ``groups`` of (first word, matrices) per ldmatrix."""

    pack: int
    trans: bool
    groups: tuple[tuple[int, int], ...]

    @staticmethod
    def source(trans: bool, row: int) -> tuple[int, int]:
        """For the lane that gives row ``row`` of a matrix: the lane (of its warp) whose
        word holds that row's first element, and which element of the word it is."""
        return (row >> 1, row & 1) if trans else (row << 2, 0)


@functools.lru_cache(maxsize=256)
def plan_for(layout: RegisterLayout, elem_bits: int) -> LdmatrixPlan | None:
    """The ldmatrix plan of a 2-D register layout, or None when ldmatrix cannot deliver it
    (each candidate is checked against ldmatrix's distribution for every thread)."""
    if len(layout.shape) != 2 or elem_bits not in (8, 16, 32) or layout.num_threads % 32:
        return None
    pack = 32 // elem_bits
    if layout.local_size % pack:
        return None
    words = layout.local_size // pack
    groups, w = [], 0
    while w < words:
        x = 4 if words - w >= 4 else 2 if words - w >= 2 else 1
        groups.append((w, x))
        w += x
    for trans in (False, True) if elem_bits == 16 else (False,):
        plan = LdmatrixPlan(pack, trans, tuple(groups))
        if _delivers(layout, plan, elem_bits // 8):
            return plan
    return None


def _coords_table(layout) -> np.ndarray:
    """``table[t, i]``: the tile coordinates of register ``i`` of thread ``t``."""

    def part(factors, n):
        out = np.zeros((n, len(layout.shape)), np.int64)
        rem = np.arange(n)
        for f in reversed(factors):
            if f.dim >= 0:
                out[:, f.dim] += (rem % f.extent) * f.stride
            rem = rem // f.extent
        return out

    return (
        part(layout.threads, layout.num_threads)[:, None]
        + part(layout.locals, layout.local_size)[None]
    )


def _delivers(layout, plan: LdmatrixPlan, elem_bytes: int) -> bool:
    table = _coords_table(layout)
    tid = np.arange(layout.num_threads)
    lane, warp = tid & 31, tid & ~31
    src, e_src = LdmatrixPlan.source(plan.trans, lane & 7)
    p = plan.pack
    for w0, x in plan.groups:
        j = {1: 0, 2: (lane >> 3) & 1, 4: lane >> 3}[x]
        rows = table[warp | src, (w0 + j) * p + e_src]  # the row each thread gives
        if (rows[:, 1] * elem_bytes % 16).any():
            return False  # a row that does not start a 16-byte chunk
        for q in range(x):
            for e in range(p):
                if plan.trans:  # rows 2(l%4)+e of matrix q, column l/4
                    got = rows[warp + 8 * q + 2 * (lane % 4) + e] + np.stack(
                        [0 * lane, lane // 4], 1
                    )
                else:  # word l%4 of row l/4 of matrix q
                    got = rows[warp + 8 * q + lane // 4] + np.stack(
                        [0 * lane, (lane % 4) * p + e], 1
                    )
                if not np.array_equal(got, table[tid, (w0 + q) * p + e]):
                    return False
    return True


def view_fits(view) -> bool:
    """Whether every 16-byte row chunk ldmatrix reads is contiguous and aligned in the tile."""
    lo = view.layout
    return (
        view.perm is None and lo.row_bytes % 16 == 0 and (not lo.swizzle or lo.block_cols % 8 == 0)
    )


def _select(index: str, values: list[str]) -> str:
    """``values[index]`` as a select chain (constants fold away)."""
    if len(set(values)) == 1:
        return values[0]
    code = values[-1]
    for i in range(len(values) - 2, -1, -1):
        code = f"({index} == {i} ? {values[i]} : {code})"
    return code


def emit_load(ctx, plan: LdmatrixPlan, view, off: str, reg, lin, swz) -> None:
    """Load register tile ``reg`` from shared ``view`` (byte offset ``off``) with ldmatrix;
    ``lin(coords)`` is the linear byte offset of tile coordinates (C code), ``swz(off, lin)``
    the swizzled byte offset (``memory.swizzled``)."""
    layout = R.layout_of(ctx, reg)
    ct = R.ctype(reg.dtype)
    tid = ctx.tid(ctx.group)
    p = plan.pack
    ctx.open("")
    ctx.emit(f"const int tl_lr = {tid} & 7, tl_lj = ({tid} >> 3) & 3;")
    lane = "(tl_lr >> 1)" if plan.trans else "(tl_lr << 2)"
    ctx.emit(f"const int tl_lt = ({tid} & ~31) | {lane};")
    base = []
    for code in R.thread_coords(ctx, layout, ctx.group, "tl_lt"):
        n = ctx.fresh("c")
        ctx.emit(f"const int {n} = {code};")
        base.append(n)
    elem = "(tl_lr & 1)" if plan.trans else "0"
    for w0, x in plan.groups:
        j = {1: "0", 2: "(tl_lj & 1)", 4: "tl_lj"}[x]
        # the (matrix, element) choices of this lane: local coordinates are constants
        combos = [(m, e) for m in range(x) for e in range(2 if plan.trans else 1)]
        sel = f"({j}) * 2 + {elem}" if plan.trans else j
        coords = []
        for d, b in enumerate(base):
            vals = [str(layout.local_coords((w0 + m) * p + e)[d]) for m, e in combos]
            coords.append(f"{b} + {_select(sel, vals)}")
        r = ctx.fresh("lm")
        addr = f"tl_smem + {swz(off, lin(coords))}"
        frag = P.LDMATRIX[(x, plan.trans)]
        ctx.emit(f"uint32_t {r}[{x}];")
        ctx.emit(f"{frag.name}({r}, {addr});")
        for q in range(x):
            for e in range(p):
                dst = R.elem(ctx, reg, (w0 + q) * p + e)
                if p == 1:
                    ctx.emit(f"{dst} = __uint_as_float({r}[{q}]);")
                else:
                    bits = 32 // p
                    mask = (1 << bits) - 1
                    ctx.emit(f"{dst} = ({ct})(({r}[{q}] >> {bits * e}) & {mask:#x}u);")
    ctx.close()
