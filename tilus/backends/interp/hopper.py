"""The interpreter's model of Hopper's asynchronous machinery and its protocol checks.

mbarriers follow PTX ISA 9.7.13.15 (phases, pending arrivals, tx-count); TMA loads follow
9.7.9.25.5.2 (cp.async.bulk.tensor: data lands later and completes bytes on an mbarrier);
WGMMA follows 9.7.15 (mma_async results appear only when their group is retired by
wgmma.wait_group). Every misuse is reported as a TilusRuntimeError naming the user's line.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tilus.backends.interp import races
from tilus.errors import SourceLoc, TilusRuntimeError, at
from tilus.ir.effects import EFFECTS, Out
from tilus.ir.enums import TensorKind
from tilus.ir.tensor import TensorVar


@dataclass
class MBarrier:
    """One mbarrier (PTX ISA 9.7.13.15.1: phase, pending arrival count, tx-count)."""

    name: str
    index: int
    count: int
    pending: int
    tx: int = 0
    phase: int = 0  # number of completed phases; the current phase's parity is phase & 1
    expect_loc: SourceLoc | None = None  # last arrive_and_expect_tx of the current phase
    key: int = 0  # its key in the happens-before clocks (races.py)
    vc: dict = field(default_factory=dict)  # releases into the current phase
    last_vc: dict = field(default_factory=dict)  # what the last completed phase releases

    @property
    def label(self) -> str:
        return f"{self.name}[{self.index}]"

    def arrive(self, n: int, loc: SourceLoc, who: str) -> bool:
        """``n`` arrivals; returns True if the phase completed."""
        if n > self.pending:
            raise TilusRuntimeError(
                f"mbarrier {self.label}: {who} arrives {n} time(s) but only {self.pending} "
                f"arrival(s) remain in phase {self.phase} (count {self.count}): more arrivals "
                f"than the barrier's count in one phase",
                loc,
            )
        self.pending -= n
        return self._maybe_complete(loc)

    def expect_tx(self, nbytes: int, loc: SourceLoc | None = None):
        self.tx += nbytes
        self.expect_loc = loc

    def complete_tx(self, nbytes: int, loc: SourceLoc) -> bool:
        self.tx -= nbytes
        return self._maybe_complete(loc)

    def _maybe_complete(self, loc) -> bool:
        if self.pending == 0 and self.tx < 0:
            raise TilusRuntimeError(
                f"mbarrier {self.label}: transaction mismatch: {-self.tx} more byte(s) were "
                f"delivered than expected in phase {self.phase} (all {self.count} arrival(s) "
                f"are in)",
                loc,
            )
        if self.pending == 0 and self.tx == 0:
            self.phase += 1
            self.pending = self.count
            self.vc[self.key] = self.phase  # the TMA writes that landed in it (races.py)
            self.last_vc, self.vc = self.vc, {}
            return True
        return False

    def parity_done(self, parity: int) -> bool:
        """try_wait.parity: true once the phase of this parity has completed.

        The current (incomplete) phase has parity ``phase & 1``; waiting on the other parity
        refers to the previous phase, which counts as complete, so it returns at once.
        """
        return (self.phase & 1) != (parity & 1)


@dataclass
class PendingTma:
    """A TMA load in flight: the destination, the data it will write, its barrier."""

    dst: object  # SharedView
    data: np.ndarray
    barrier: MBarrier
    nbytes: int
    loc: SourceLoc
    seq: int
    phase: int  # the barrier's phase when the load was issued
    vc: dict  # the issuing group's clock at issue
    who: str  # the issuing group


@dataclass
class WgmmaOp:
    """One wgmma.mma_async: operands (shared views) and the accumulator tile. A register A
    operand has ``a = None``, its tile in ``a_tile`` and its values at issue in ``a_regs``."""

    a: object
    b: object
    d: object  # TensorVar
    loc: SourceLoc
    a_tile: object = None
    a_regs: object = None

    def shared_operands(self) -> list:
        """The operands the wgmma reads from shared memory."""
        return [v for v in (self.a, self.b) if v is not None]

    def a_values(self) -> np.ndarray:
        """The A operand's values (the shared tile now, or the registers at issue)."""
        return self.a_regs if self.a is None else self.a.arr


def written_tiles(inst):
    """The register tiles an instruction writes (its ``out`` and in-place updated fields)."""
    fields = _WRITES.get(type(inst))
    if fields is None:
        eff = EFFECTS.lookup(inst)
        fields = (("out",) if eff.out is not Out.NONE else ()) + tuple(eff.updates)
        _WRITES[type(inst)] = fields
    for name in fields:
        t = getattr(inst, name, None)
        if isinstance(t, TensorVar) and t.kind == TensorKind.REGISTER:
            yield t


_WRITES: dict = {}


@dataclass
class WgmmaState:
    """Per-warp-group wgmma bookkeeping: uncommitted ops and committed, unretired groups."""

    open: list = field(default_factory=list)
    groups: list = field(default_factory=list)
    pending_acc: dict = field(default_factory=dict)  # TensorVar -> loc of the pending mma
    accumulators: set = field(default_factory=set)  # tiles ever used as wgmma accumulators
    fenced: bool = False  # a wgmma.fence since the last generic access to an accumulator
    pending_a: dict = field(default_factory=dict)  # register A tile -> loc of the pending mma
    written: set = field(default_factory=set)  # register tiles written since the last fence

    def unretired(self):
        for g in self.groups:
            yield from g
        yield from self.open

    def note_writes(self, inst, loc):
        """Before ``inst`` runs: it must not write a register A operand of a wgmma in flight
        (PTX ISA 9.7.15.7.3: the wgmma reads those registers until its group is retired);
        what it writes needs a wgmma.fence before a wgmma reads it (9.7.15.7.1)."""
        for t in written_tiles(inst):
            if t in self.pending_a:
                raise TilusRuntimeError(
                    f"register tile `{t.name}` is written while the wgmma issued at "
                    f"{at(self.pending_a[t])} still reads it as its A operand (PTX ISA "
                    f"9.7.15.7.3); retire that wgmma with wgmma.commit_group() and "
                    f"wgmma.wait_group(...) first",
                    loc,
                )
            self.written.add(t)

    def retired(self):
        """Recompute what is pending after groups were retired."""
        ops = list(self.unretired())
        self.pending_acc = {op.d: op.loc for op in ops}
        self.pending_a = {op.a_tile: op.loc for op in ops if op.a_tile is not None}


class AsyncUnits:
    """The block's barriers and in-flight asynchronous copies, with the race checks."""

    def __init__(self):
        self.barriers: dict[int, MBarrier] = {}
        self.tma: list[PendingTma] = []
        self.seq = 0
        self.wgmma_states: list[WgmmaState] = []
        # TMA stores still reading their shared source: owner task -> [open, *committed groups]
        self.stores: dict = {}
        # their global writes (races.Access, pending until waited for without read=True)
        self.gstores: dict = {}
        # cp.async copies not yet landed: owner task -> [open, *committed groups] of PendingCopy
        # (tilus.backends.interp.rules_async)
        self.copies: dict = {}

    def barrier(self, addr, loc) -> MBarrier:
        bar = self.barriers.get(int(addr))
        if bar is None:
            raise TilusRuntimeError(
                f"{addr} is not the address of an mbarrier (use an element "
                f"of a tile made by self.mbarrier.alloc)",
                loc,
            )
        return bar

    # --- races ---------------------------------------------------------------------------------
    def check_read(self, view, loc, what: str):
        for p in self.tma:
            if view.overlaps(p.dst.lo, p.dst.hi):
                raise TilusRuntimeError(
                    f"race: {what} reads shared tile `{view.name}` while a TMA write into it "
                    f"(issued at {at(p.loc)}, completing on mbarrier {p.barrier.label}) "
                    f"is still in flight; wait on that mbarrier first",
                    loc,
                )
        for groups in self.copies.values():
            for group in groups:
                for p in group:
                    if view.overlaps(p.dst.lo, p.dst.hi):
                        raise TilusRuntimeError(
                            f"race: {what} reads shared tile `{view.name}` while the copy_async "
                            f"into it (issued at {at(p.loc)}) has not been waited for (call "
                            f"copy_async_commit_group() and copy_async_wait_group(...) first)",
                            loc,
                        )

    def check_write(self, view, loc, what: str):
        self.check_read(view, loc, what)
        for groups in self.stores.values():
            for group in groups:
                for src, sloc in group:
                    if view.overlaps(src.lo, src.hi):
                        raise TilusRuntimeError(
                            f"race: {what} overwrites shared tile `{view.name}` while the TMA "
                            f"store issued at {at(sloc)} may still read it (wait for it "
                            f"with tma.commit_group() and tma.wait_group(...) first)",
                            loc,
                        )
        for st in self.wgmma_states:
            for op in st.unretired():
                for opnd in op.shared_operands():
                    if view.overlaps(opnd.lo, opnd.hi):
                        raise TilusRuntimeError(
                            f"race: {what} overwrites shared tile `{view.name}` while the wgmma "
                            f"issued at {op.loc} still reads it (its group has not "
                            f"been retired by wgmma.wait_group)",
                            loc,
                        )

    # --- TMA -----------------------------------------------------------------------------------
    def issue_tma(self, task, dst, data, bar: MBarrier, nbytes: int, loc):
        for p in self.tma:
            if dst.overlaps(p.dst.lo, p.dst.hi):
                raise TilusRuntimeError(
                    f"race: TMA write into shared tile `{dst.name}` overlaps another TMA write "
                    f"still in flight (issued at {at(p.loc)}); the stage is refilled "
                    f"before it was consumed",
                    loc,
                )
        self.check_write(dst, loc, "this TMA load")
        races.check_shared(task, dst, True, races.ASYNC, loc, "tma.global_to_shared")
        self.seq += 1
        vc = races.release(task)
        self.tma.append(
            PendingTma(dst, data, bar, nbytes, loc, self.seq, bar.phase, vc, task.label)
        )

    def complete_tma(self, index: int = 0) -> MBarrier:
        """Land one in-flight TMA load (the oldest by default) and complete its bytes."""
        p = self.tma.pop(index)
        p.dst.arr[...] = p.data
        bar = p.barrier
        # the write is ordered before whoever waits on the phase it completes
        races.join(bar.vc, p.vc)
        races.record_shared(
            p.dst, True, races.ASYNC, bar.key, bar.phase + 1, p.loc, "the TMA load", p.who
        )
        if p.barrier.complete_tx(p.nbytes, p.loc):
            self.phase_completed(p.barrier, p.loc)
        return p.barrier

    def phase_completed(self, bar: MBarrier, loc):
        """A phase may only complete once every TMA load issued in it has landed."""
        for p in self.tma:
            if p.barrier is bar and p.phase == bar.phase - 1:
                raise TilusRuntimeError(
                    f"mbarrier {bar.label}: transaction mismatch: phase {p.phase} completed while "
                    f"the TMA load into `{p.dst.name}` (issued at {at(p.loc)}, {p.nbytes} "
                    f"bytes) was still in flight: more bytes are delivered than the phase "
                    f"expected (arrive_and_expect_tx's transaction_bytes is too small, or a plain "
                    f"arrive was used)",
                    bar.expect_loc or loc,
                )

    # --- TMA stores (PTX ISA 9.7.9.25.6 bulk async-groups) --------------------------------------
    def store_issued(self, owner, src, loc, grec):
        self.stores.setdefault(owner, [[]])[0].append((src, loc))
        if grec is not None:
            self.gstores.setdefault(owner, [[]])[0].append(grec)

    def store_commit(self, owner):
        for table in (self.stores, self.gstores):
            groups = table.setdefault(owner, [[]])
            if groups[0]:
                groups.append(groups[0])
                groups[0] = []

    def store_wait(self, task, owner, n: int, read: bool):
        """``task`` waits until at most ``n`` of ``owner``'s bulk groups are pending (their
        source reads only, with ``read``); what completes is ordered before ``task``."""
        groups = self.stores.get(owner)
        if groups:
            while len(groups) - 1 > n:
                for src, sloc in groups.pop(1):
                    races.record_shared(
                        src,
                        False,
                        races.ASYNC,
                        task.key,
                        task.epoch,
                        sloc,
                        "the TMA store (source)",
                        task.label,
                    )
        groups = self.gstores.get(owner)
        if groups and not read:
            while len(groups) - 1 > n:
                for r in groups.pop(1):
                    r.key, r.epoch = task.key, task.epoch

    def store_task_end(self, owner, label):
        groups = self.stores.pop(owner, None)
        if groups and any(groups):
            src, sloc = next(x for g in groups for x in g)
            raise TilusRuntimeError(
                f"{label} ends with the TMA store of `{src.name}` (issued at {at(sloc)}) "
                f"never waited for: shared memory must stay valid until the store has read it "
                f"(tma.commit_group() + tma.wait_group(0))",
                sloc,
            )

    def end_checks(self, loc):
        """Protocol checks when the block's last task ends."""
        for groups in self.copies.values():
            for group in groups:
                for p in group:
                    raise TilusRuntimeError(
                        f"the kernel ended with the copy_async into `{p.dst.name}` (issued at "
                        f"{at(p.loc)}) never waited for (copy_async_wait_group/wait_all)",
                        p.loc,
                    )
        if self.tma:
            p = self.tma[0]
            raise TilusRuntimeError(
                f"the kernel ended with a TMA load into `{p.dst.name}` (issued at "
                f"{at(p.loc)}) still in flight",
                p.loc,
            )
        for bar in self.barriers.values():
            if bar.tx > 0:
                raise TilusRuntimeError(
                    f"transaction mismatch: mbarrier {bar.label} still expects {bar.tx} "
                    f"byte(s) when the kernel ends (expected by arrive_and_expect_tx, never "
                    f"delivered)",
                    loc,
                )
