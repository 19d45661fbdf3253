"""Pass: reject reads of values that only some threads changed (thread-group divergence).

A scalar or register tile assigned inside a thread group changes only in that group's threads;
every other thread keeps the old value. Reading it afterwards outside the group would give
different values on different threads (and the interpreter, which runs a group as one task,
could not reproduce that), so such a read is a compile-time error pointing at both lines.
"""

from __future__ import annotations

from tilus.errors import TilusCompileError
from tilus.ir.effects import EFFECTS
from tilus.ir.expr import Var
from tilus.ir.function import Function
from tilus.ir.stmt import ForStmt, InstStmt, Stmt, ThreadGroupStmt, WhileStmt
from tilus.ir.tensor import TensorVar
from tilus.ir.visit import fields, nodes_in, walk


def _reads(e, out: list):
    """Append the variables and tiles that a field value reads (not a tile's shape)."""
    for x in walk(e, lambda n: not isinstance(n, TensorVar)):
        if isinstance(x, (Var, TensorVar)):
            out.append(x)


class _Uniformity:
    def __init__(self, num_threads: int):
        self.groups: list[ThreadGroupStmt] = []  # active groups, outermost first
        # thread range of each active level: (first, end, exact); exact is False for an elected
        # single thread, which is some one thread of [first, end)
        self.ranges: list[tuple[int, int, bool]] = [(0, num_threads, True)]
        self.home: dict = {}  # value -> group stack (tuple) where it was declared
        self.changed: dict = {}  # value -> (group, assignment loc) while divergent
        self.pending: list[dict] = []  # per active group: value -> assignment loc

    def declare(self, v):
        self.home[v] = tuple(self.groups)
        self.changed.pop(v, None)

    def read(self, values, loc):
        lo, hi, exact = self.ranges[-1]
        for v in values:
            hit = self.changed.get(v)
            if hit is None:
                continue
            g, aloc, (wlo, whi, wexact) = hit
            if g in self.groups or hi <= wlo or whi <= lo:
                continue  # inside the writer, or threads that never saw the change
            if wexact and exact and wlo <= lo and hi <= whi:
                continue  # only threads that all made the change
            who = "single_thread()" if g.begin < 0 else f"thread_group({g.begin}, {g.num_threads})"
            raise TilusCompileError(
                f"`{v.name}` was changed only by the {who} at line {g.loc.line} (assignment "
                f"at line {aloc.line}); other threads reading it here still hold the old "
                f"value, so the read is not uniform. Compute it outside the group, or use it "
                f"only inside that group",
                loc,
            )

    def write(self, v, loc):
        home = self.home.get(v, ())
        if len(self.groups) > len(home):
            # changed by a narrower group than the one that owns it
            self.pending[-1][v] = loc
        else:
            self.changed.pop(v, None)

    def stmt(self, s):
        t = type(s)
        if t is InstStmt:
            self.inst(s.inst, s.loc)
        elif t is ForStmt:
            vals: list = []
            _reads((s.start, s.stop), vals)
            self.read(vals, s.loc)
            self.declare(s.var)
            for _ in range(2):  # a second pass sees loop-carried reads
                self.stmt(s.body)
        elif t is WhileStmt:
            for _ in range(2):
                vals = []
                _reads(s.cond, vals)
                self.read(vals, s.loc)
                self.stmt(s.body)
        elif t is ThreadGroupStmt:
            self.thread_group(s)
        else:
            self.generic(s)

    def generic(self, s):
        """Any other statement: its expressions are read, then its sub-statements run; the
        fields it binds are declared and those it writes are assigned."""
        vals: list = []
        subs: list = []
        for name, value in fields(s):
            if name == "loc" or name in s.BINDS or name in s.WRITES:
                continue
            if isinstance(value, Stmt) or (
                isinstance(value, tuple) and value and isinstance(value[0], Stmt)
            ):
                subs.extend(nodes_in(value))
            else:
                _reads(value, vals)
        self.read(vals, s.loc)
        for name in s.BINDS:
            self.declare(getattr(s, name))
        for x in subs:
            self.stmt(x)
        for name in s.WRITES:
            self.write(getattr(s, name), s.loc)

    def thread_group(self, s: ThreadGroupStmt):
        lo, hi, _ = self.ranges[-1]
        rng = (lo, hi, False) if s.begin < 0 else (lo + s.begin, lo + s.begin + s.num_threads, True)
        self.groups.append(s)
        self.ranges.append(rng)
        self.pending.append({})
        self.stmt(s.body)
        self.groups.pop()
        self.ranges.pop()
        done = self.pending.pop()
        for v, loc in done.items():
            depth = len(self.home.get(v, ()))
            if depth <= len(self.groups):
                self.changed[v] = (s, loc, rng)
                if depth < len(self.groups):
                    self.pending[-1][v] = loc  # diverges from the enclosing group too

    def inst(self, inst, loc):
        fx = EFFECTS.lookup(inst)
        out = inst.output()
        vals: list = []
        for name, value in inst.items():
            if name == "out" and not fx.overwrites:
                continue
            if name in fx.binders:
                continue
            _reads(value, vals)
        self.read(vals, loc)
        if out is not None:
            # an allocation always makes a new tile; other definitions given an existing
            # tile (``out=``) change it
            if out in self.home and not fx.allocates:
                self.write(out, loc)
            else:
                self.declare(out)
        for name in fx.updates:
            self.write(getattr(inst, name), loc)


def check_uniformity(fn: Function) -> Function:
    """Raise a located TilusCompileError on the first non-uniform read."""
    u = _Uniformity(fn.num_threads)
    for p in fn.params:
        u.declare(p)
    u.stmt(fn.body)
    return fn
