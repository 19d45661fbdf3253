"""Passes: register tiles a thread can hold, and ``setmaxnreg`` requests against an SM."""

from __future__ import annotations

from tilus.errors import TilusCompileError
from tilus.ir import inst as I
from tilus.ir.enums import TensorKind
from tilus.ir.function import Function
from tilus.ir.stmt import InstStmt, ThreadGroupStmt
from tilus.passes.walk import children

REGISTER_FILE = 65536  # 32-bit registers per SM (sm_90)
WARP_GROUP = 128


def tile_registers_message(t, regs: int, threads: int, limit: str, how: str = "") -> str:
    """The error text of a register tile too large for its threads (both backends use it)."""
    how = f" ({how})" if how else ""
    return (
        f"tile %{t.name} ({t.type_str()}) needs {regs} registers per thread over {threads} "
        f"threads{how}; {limit}; use smaller tiles or more threads"
    )


def check_tile_registers(fn: Function) -> Function:
    """Refuse a register tile that no GPU could hold: one larger than the whole register file
    of an SM, however many threads share it. Checked before anything runs, so the interpreter
    never allocates such a tile (a 65536x65536 one would exhaust the host's memory); the CUDA
    backend's layouts then apply its own, lower, limit per thread."""
    _tiles(fn.body, fn.num_threads)
    return fn


def _tiles(s, size: int) -> None:
    if isinstance(s, ThreadGroupStmt):
        size = s.num_threads if s.begin >= 0 else 1
    elif isinstance(s, InstStmt):
        t = s.inst.output()
        if t is not None and t.kind == TensorKind.REGISTER:
            words = max(1, t.dtype.nbits // 32)
            if t.size * words > REGISTER_FILE:
                raise TilusCompileError(
                    tile_registers_message(
                        t,
                        -(-t.size // size) * words,
                        size,
                        f"{t.size * words} in all, more than the {REGISTER_FILE} of an SM",
                        "at best",
                    ),
                    s.loc,
                )
    for c in children(s):
        _tiles(c, size)


def entry_registers(num_threads: int) -> int:
    """The most registers per thread a block of ``num_threads`` can start with (one block per
    SM; registers are allocated per warp group, in units of 8 per thread)."""
    groups = -(-num_threads // WARP_GROUP)
    return min(255, REGISTER_FILE // (groups * WARP_GROUP) // 8 * 8)


def check_register_budget(fn: Function) -> Function:
    """Refuse ``setmaxnreg`` in a block that is not whole warp groups, and requests whose sum
    over the warp groups could exceed the register file: ``setmaxnreg.inc`` waits until the
    registers are free, so an over-subscribed block would hang. Each warp group is counted at
    the largest count any request gives it (the entry count where none does)."""
    requests: list = []  # (first warp group, number of warp groups, count, stmt)
    _collect(fn.body, 0, fn.num_threads, requests)
    if not requests:
        return fn
    if fn.num_threads % WARP_GROUP:
        stmt = requests[0][3]
        raise TilusCompileError(
            f"setmaxnreg needs a block of whole warp groups; this one has {fn.num_threads} "
            "threads (set self.attrs.warps to a multiple of 4)",
            stmt.loc,
        )
    start = entry_registers(fn.num_threads)
    requested: dict = {}  # warp group -> largest count asked for it
    for first, n, count, _stmt in requests:
        for w in range(first, first + n):
            requested[w] = max(requested.get(w, 0), count)
    per_group = [requested.get(w, start) for w in range(fn.num_threads // WARP_GROUP)]
    total = sum(per_group) * WARP_GROUP
    if total > REGISTER_FILE:
        stmt = max(requests, key=lambda r: r[2])[3]  # the largest raise
        detail = ", ".join(f"warp group {w}: {c}" for w, c in enumerate(per_group))
        raise TilusCompileError(
            f"setmaxnreg: the warp groups would hold {total} registers ({detail} per thread), "
            f"more than the {REGISTER_FILE} of an SM; the raise would wait forever",
            stmt.loc,
        )
    return fn


def _collect(s, begin: int, size: int, out: list) -> None:
    if isinstance(s, ThreadGroupStmt):
        if s.begin >= 0:
            begin, size = begin + s.begin, s.num_threads
        else:
            begin, size = begin, 1
    elif isinstance(s, InstStmt) and isinstance(s.inst, I.SetMaxNReg):
        out.append((begin // WARP_GROUP, max(1, size // WARP_GROUP), s.inst.count, s))
    for c in children(s):
        _collect(c, begin, size, out)
