"""The interpreter's block machine: thread groups as cooperative tasks under a scheduler.

Each thread group runs as a generator that yields when it must wait (an mbarrier, a ``sync``)
or forks a child group. Sibling groups therefore interleave like warps on the GPU. The default
schedule is deterministic (a forked group runs first; woken groups queue in order); a seeded
schedule shuffles the choices to shake out order dependence. In-flight TMA loads land only
when no group can run (or at random points when shuffled), so missing waits are caught.
"""

from __future__ import annotations

import random

import numpy as np

from tilus.backends.interp import races
from tilus.backends.interp.hopper import AsyncUnits, WgmmaState
from tilus.backends.interp.sched import TICK, ClusterWait, Fork, SemWait, Sync, Tick, Wait
from tilus.errors import TilusRuntimeError, at
from tilus.ir.cscalar import convert as scalar_convert
from tilus.ir.evaluate import eval_scalar
from tilus.ir.stmt import (
    AssignStmt,
    BreakStmt,
    DeclareStmt,
    ForStmt,
    IfStmt,
    InstStmt,
    ReturnStmt,
    SeqStmt,
    ThreadGroupStmt,
    WhileStmt,
)

MAX_STEPS = 20_000_000  # statements per block before we call it an infinite loop


class _Break(Exception):
    pass


class _Return(Exception):
    pass


def _sem_holds(req) -> bool:
    """Whether a :class:`SemWait` is satisfied now."""
    ptr = req.ptr
    return int(ptr.buf[ptr.offset]) == req.value


def _in_program_order(task) -> bool:
    """Whether ``task`` may run now: the single_thread() blocks of one group are one thread
    (elect.sync elects the same lane every time), so they run in the order they were forked."""
    return not task.elected or task.parent is None or task.parent.elected_live[0] is task


class Task:
    """A thread group executing part of the kernel."""

    def __init__(self, cta, env, begin, size, elected, parent):
        self.cta = cta
        self.env = env
        self.begin = begin
        self.size = size
        self.elected = elected
        self.parent = parent
        self.children: set = set()
        self.gen = None
        self.blocked: Wait | Sync | SemWait | None = None
        self.loc = None
        self.wgmma: WgmmaState | None = None
        self.done = False  # its own statements have all run (children may still be live)
        self.elected_live: list = []  # live single_thread() children, in the order they were forked
        # happens-before state (races.py): keys, own epoch, vector clock, last sync()
        self.key = self.skey = 0
        self.epoch = 1
        self.vc: dict = {}
        self.synced = 0
        self.unjoined: dict = {}  # clocks of ended children, joined at the next sync()
        self.elected_key = None  # the key of its single_thread() children (one thread)
        self.elected_last = None  # (epoch, clock) of its last ended single_thread() child
        self._label = None

    @property
    def label(self) -> str:
        if self._label is None:
            if self.elected:
                end = self.parent.begin + self.parent.size
                self._label = f"single_thread() of threads [{self.begin}, {end})"
            else:
                self._label = f"thread group [{self.begin}, {self.begin + self.size})"
        return self._label

    def wgmma_state(self) -> WgmmaState:
        if self.wgmma is None:
            self.wgmma = WgmmaState()
            self.cta.units.wgmma_states.append(self.wgmma)
        return self.wgmma


class CTA:
    """One thread block: shared memory, async units and the task scheduler."""

    def __init__(
        self, program, env, rules, seed=None, block=(0, 0, 0), workspace=None, cluster=None
    ):
        self.program = program
        # the block's thread-block cluster (interp/cluster.py) and its rank there
        self.cluster = cluster
        self.rank = 0
        self.exited = False
        if cluster is not None:
            self.rank = len(cluster.ctas)
            cluster.ctas.append(self)
        # global_tensor allocations of this launch, shared by its blocks: inst -> (array, loc)
        self.workspace = {} if workspace is None else workspace
        self.rules = rules
        self.units = AsyncUnits()
        self.shared: dict = {}  # AllocShared.out -> SharedAlloc
        self.gacc: dict = {}  # id(caller's buffer) -> (writes, reads, address) of this block
        self.packed: dict = {}  # element numbers of the packed views' buffers (packed.py)
        self.keys = 0
        self.rng = random.Random(seed) if seed is not None else None
        self.block = block
        self.steps = 0
        fn = program.fn
        self.root = Task(self, env, 0, fn.num_threads, False, None)
        self.assign_keys(self.root)
        self.ready: list[Task] = []
        self.waiting: list[Task] = []
        self.live = 0

    def new_key(self) -> int:
        """A fresh key of the happens-before clocks (a thread group's or an mbarrier's); the
        blocks of a cluster share one key space."""
        if self.cluster is not None:
            return self.cluster.new_key()
        self.keys += 1
        return self.keys

    def assign_keys(self, task: Task):
        task.key = self.new_key()
        task.skey = self.new_key() if task.size > 1 else task.key

    # --- scheduling ----------------------------------------------------------------------------
    def run(self):
        """Run the block alone to its end (a semaphore nobody else can release deadlocks)."""
        for _ in self.run_steps():
            self._deadlock()

    def run_steps(self):
        """Run the block; yields whether it made progress each time every task left is
        spinning on a semaphore (the grid then runs other blocks before resuming it)."""
        root = self.root
        root.gen = self._top(self.program.fn.body, root)
        self.live = 1
        self.ready = [root]
        progressed = True
        while self.live:
            runnable = [k for k, t in enumerate(self.ready) if _in_program_order(t)]
            if runnable:
                self._maybe_land_random()
                i = runnable[self.rng.randrange(len(runnable))] if self.rng else runnable[0]
                self._step(self.ready.pop(i))
                progressed = True
            elif self.units.tma:
                self._land(0)
                progressed = True
            elif self._wake_semaphores():
                progressed = True
            elif self.cluster is not None or any(type(t.blocked) is SemWait for t in self.waiting):
                # a peer of the cluster (or another block) may release it
                yield progressed
                progressed = False
            else:
                self._deadlock()
        self.units.end_checks(self.program.fn.body.loc)
        if self.cluster is not None:
            self.cluster.block_exited(self)

    def _wake_semaphores(self) -> bool:
        woke = False
        for t in list(self.waiting):
            if type(t.blocked) is SemWait and _sem_holds(t.blocked):
                t.blocked = None
                self.waiting.remove(t)
                self.ready.append(t)
                woke = True
        return woke

    def _maybe_land_random(self):
        if self.rng is not None and self.units.tma and self.rng.random() < 0.3:
            self._land(self.rng.randrange(len(self.units.tma)))

    def _land(self, i):
        bar = self.units.complete_tma(i)
        self.wake(bar)

    def wake(self, bar):
        """Make tasks waiting on ``bar`` runnable if their phase completed."""
        still = []
        for t in self.waiting:
            w = t.blocked
            if type(w) is Wait and w.bar is bar and bar.parity_done(w.parity):
                t.blocked = None
                races.join(t.vc, bar.last_vc)  # the wait acquires the completed phase
                self.ready.append(t)
            else:
                still.append(t)
        self.waiting = still

    def wake_cluster(self):
        """Make tasks waiting in cluster.sync() runnable if their phase completed."""
        cl = self.cluster
        still = []
        for t in self.waiting:
            w = t.blocked
            if type(w) is ClusterWait and cl.completed >= w.phase:
                t.blocked = None
                races.join(t.vc, cl.last_vc)
                self.ready.append(t)
            else:
                still.append(t)
        self.waiting = still

    def _top(self, body, task):
        try:
            yield from self.exec(body, task)
        except _Return:
            pass

    def _step(self, task: Task):
        while True:
            try:
                req = next(task.gen)
            except StopIteration:
                self._finish(task)
                return
            kind = type(req)
            if kind is Fork:
                self.ready.insert(0, task)
                self.ready.insert(0, self._fork(task, req.stmt))
                return
            if kind is Wait:
                bar = req.bar
                if bar.parity_done(req.parity):
                    races.join(task.vc, bar.last_vc)
                    continue
                task.blocked = req
                self.waiting.append(task)
                return
            if kind is Sync:
                if not task.children:
                    races.synced(task)
                    continue
                task.blocked = req
                self.waiting.append(task)
                return
            if kind is SemWait:
                if _sem_holds(req):
                    continue
                task.blocked = req
                self.waiting.append(task)
                return
            if kind is Tick:
                self.ready.append(task)
                return
            if kind is ClusterWait:
                if self.cluster.completed >= req.phase:
                    races.join(task.vc, self.cluster.last_vc)
                    continue
                task.blocked = req
                self.waiting.append(task)
                return

    def _fork(self, parent: Task, stmt: ThreadGroupStmt) -> Task:
        elected = stmt.begin < 0
        begin = parent.begin if elected else parent.begin + stmt.begin
        child = Task(self, dict(parent.env), begin, stmt.num_threads, elected, parent)
        child.gen = self._top(stmt.body, child)
        child.vc = races.fork_clock(parent)
        if elected:
            # every single_thread() of a group is the same thread: one key, program order
            if parent.elected_key is None:
                parent.elected_key = self.new_key()
            child.key = child.skey = parent.elected_key
            if not parent.elected_live and parent.elected_last is not None:
                child.epoch = parent.elected_last[0] + 1
                races.join(child.vc, parent.elected_last[1])
            parent.elected_live.append(child)
        else:
            self.assign_keys(child)
        parent.children.add(child)
        self.live += 1
        return child

    def _finish(self, task: Task):
        self.live -= 1
        st = task.wgmma
        if st is not None and (st.open or st.groups):
            op = next(iter(st.unretired()))
            raise TilusRuntimeError(
                f"{task.label} ends with wgmma operations never retired (the mma at "
                f"{at(op.loc)} needs wgmma.commit_group and wgmma.wait_group)",
                op.loc,
            )
        # a group's TMA stores may be issued by its single_thread() children (see
        # rules_hopper._bulk_owner): checked once the group and all of them have ended
        task.done = True
        if not task.children:
            self.units.store_task_end(task, task.label)
        p = task.parent
        if p is not None:
            self._hand_clock(task)
            p.children.discard(task)
            if task.elected:
                p.elected_live.remove(task)
            if p.done and not p.children:
                self.units.store_task_end(p, p.label)
            if not p.children and type(p.blocked) is Sync:
                p.blocked = None
                races.synced(p)
                self.waiting.remove(p)
                self.ready.append(p)

    def _hand_clock(self, task: Task):
        """An ended group's clock goes to the next sync() of the nearest live ancestor, and an
        ended single_thread() block's to the next one of its group (the same thread)."""
        final = races.release(task)
        races.join(final, task.unjoined)
        p = task.parent
        if task.elected:
            p.elected_last = (task.epoch, final)
            nxt = next((c for c in p.elected_live if c is not task), None)
            if nxt is not None:
                nxt.epoch = task.epoch + 1
                races.join(nxt.vc, final)
        while p.done and p.parent is not None:
            p = p.parent
        races.join(p.unjoined, final)

    def _deadlock(self):
        ctas = self.cluster.ctas if self.cluster is not None else [self]
        waits = [t.blocked for c in ctas for t in c.waiting]
        # a cluster.sync() that some threads never reach is the cause of whatever else waits
        first = next((w.loc for w in waits if type(w) is ClusterWait), None)
        if first is None:
            for c in ctas:
                c._tx_mismatch()
            first = next((w.loc for w in waits), None)
        if self.cluster is None:
            x, y, z = self.block
            raise TilusRuntimeError(
                f"deadlock in block ({x}, {y}, {z}): every thread group is blocked and no "
                f"asynchronous operation is in flight",
                first,
                self.blocked_lines(),
            )
        x, y, z = ctas[0].block
        raise TilusRuntimeError(
            f"deadlock in the cluster of block ({x}, {y}, {z}): every thread group of its "
            f"{len(ctas)} blocks is blocked and no asynchronous operation is in flight",
            first,
            self.cluster.waiting_lines(),
        )

    def _tx_mismatch(self):
        for t in self.waiting:
            if type(t.blocked) is Wait:
                bar = t.blocked.bar
                if bar.pending == 0 and bar.tx > 0:
                    raise TilusRuntimeError(
                        f"transaction mismatch: mbarrier {bar.label} expects {bar.tx} more "
                        f"byte(s) in phase {bar.phase} but no TMA load in flight will deliver "
                        f"them; {t.label} waits for it forever at {t.blocked.loc}",
                        bar.expect_loc or t.blocked.loc,
                    )

    def blocked_lines(self) -> list[str]:
        """One line per blocked thread group: where it waits and for what."""
        lines = []
        for t in self.waiting:
            loc = t.blocked.loc
            if type(t.blocked) is SemWait:
                ptr, value = t.blocked.ptr, t.blocked.value
                lines.append(
                    f"  {t.label} spins at {loc} in lock_semaphore until `{ptr.name}`"
                    f"[{ptr.offset}] == {value} (it holds {int(ptr.buf[ptr.offset])}; no other "
                    f"block releases it)"
                )
            elif type(t.blocked) is Wait and hasattr(t.blocked.bar, "describe"):
                # a named barrier (rules_sync.py) says itself what it waits for
                lines.append(f"  {t.label} waits at {loc} on {t.blocked.bar.describe(0)}")
            elif type(t.blocked) is Wait:
                bar, parity = t.blocked.bar, t.blocked.parity
                lines.append(
                    f"  {t.label} waits at {loc} on mbarrier {bar.label} for the phase of parity "
                    f"{parity} (the barrier is in phase {bar.phase}, parity {bar.phase & 1}; "
                    f"{bar.pending} of {bar.count} arrivals and {max(bar.tx, 0)} byte(s) "
                    f"outstanding)"
                )
            elif type(t.blocked) is ClusterWait:
                cl = self.cluster
                missing = [
                    f"rank {c.rank}: {int(np.sum(cl.arrived[c.rank] < t.blocked.phase))}"
                    for c in cl.ctas
                    if not c.exited and np.any(cl.arrived[c.rank] < t.blocked.phase)
                ]
                lines.append(
                    f"  {t.label} waits in cluster.sync() at {loc} for threads that never "
                    f"arrive ({', '.join(missing)} thread(s) missing)"
                )
            else:
                kids = ", ".join(sorted(c.label for c in t.children))
                lines.append(f"  {t.label} waits in sync() at {loc} for {kids}")
        return lines

    # --- statements ----------------------------------------------------------------------------
    def exec(self, s, task):
        t = type(s)
        if s.loc is not None:
            task.loc = s.loc
        self.steps += 1
        if self.steps > MAX_STEPS:
            raise TilusRuntimeError(
                f"block {self.block} did not finish after {MAX_STEPS} "
                f"statements (an endless loop?)",
                task.loc,
            )
        env = task.env
        if t is SeqStmt:
            for x in s.stmts:
                yield from self.exec(x, task)
        elif t is InstStmt:
            if task.wgmma is not None:
                task.wgmma.note_writes(s.inst, s.loc)
            r = self.rules[type(s.inst)](task, s.inst, s.loc)
            if r is not None:
                yield from r
            if self.rng is not None:
                yield TICK
        elif t is DeclareStmt:
            if s.init is not None:
                env[s.var] = scalar_convert(eval_scalar(s.init, env, s.loc), s.var.dtype)
        elif t is AssignStmt:
            env[s.var] = scalar_convert(eval_scalar(s.value, env, s.loc), s.var.dtype)
        elif t is ForStmt:
            i = eval_scalar(s.start, env, s.loc)
            stop = eval_scalar(s.stop, env, s.loc)
            step = s.step
            while (i < stop) if step > 0 else (i > stop):
                env[s.var] = i
                try:
                    yield from self.exec(s.body, task)
                except _Break:
                    break
                i += step
        elif t is WhileStmt:
            while eval_scalar(s.cond, env, s.loc):
                try:
                    yield from self.exec(s.body, task)
                except _Break:
                    break
                self.steps += 1
        elif t is IfStmt:
            if eval_scalar(s.cond, env, s.loc):
                yield from self.exec(s.then_body, task)
            elif s.else_body is not None:
                yield from self.exec(s.else_body, task)
        elif t is ThreadGroupStmt:
            yield Fork(s)
        elif t is BreakStmt:
            raise _Break()
        elif t is ReturnStmt:
            raise _Return()
        else:
            raise TilusRuntimeError(f"the interpreter cannot run {t.__name__}", s.loc)
