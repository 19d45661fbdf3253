"""Build workers: fresh Python interpreters that run tilus jobs (e.g. NVRTC) and nothing else.

A worker is started with ``python -c`` (not forked from this process): it imports tilus only,
never the user's ``__main__`` or kernels, so it cannot touch a GPU that this process may have
initialized, and what it runs is a ``Job`` naming a function of the tilus package with
picklable arguments. The parent keeps everything that runs user code (constructors,
transpiling, host lambdas) and sends the workers only the generated source.
"""

from __future__ import annotations

import atexit
import importlib
import inspect
import os
import pickle
import queue
import struct
import subprocess
import sys
import threading
import warnings
from concurrent.futures import Future
from dataclasses import dataclass

_HEADER = struct.Struct("<Q")
_WORKER_ENV = "TILUS_BUILD_WORKER"  # set in a worker to its own pid


@dataclass(frozen=True)
class Job:
    """One unit of work for a build worker: ``func`` ("tilus.module:function") called on
    ``args`` (picklable; so is its result)."""

    func: str
    args: tuple = ()

    def resolve(self):
        """The function this job calls (only functions of the tilus package are allowed)."""
        module, _, name = self.func.partition(":")
        if not (module == "tilus" or module.startswith("tilus.")) or not name:
            raise ValueError(f"a build job must name a tilus function, got {self.func!r}")
        return getattr(importlib.import_module(module), name)

    def run(self):
        """Run the job in this process."""
        return self.resolve()(*self.args)


def run_here(steps):
    """Drive ``steps`` (a generator yielding ``Job``s and receiving their results, as
    ``tilus.tune.compile_all`` drives it) to its return value, running each job in this
    process; anything else is returned as it is."""
    if not inspect.isgenerator(steps):
        return steps
    how, payload = steps.send, None
    while True:
        try:
            job = how(payload)
        except StopIteration as stop:
            return stop.value
        try:
            how, payload = steps.send, job.run()
        except Exception as e:  # noqa: BLE001 - raised inside the generator, as in a worker
            how, payload = steps.throw, e


class WorkerLost(RuntimeError):
    """A build worker exited (or could not start) before answering; the job can run here."""


def ping(*args):
    """A job for tests and diagnostics: returns the worker's pid, the arguments, and the loaded
    modules whose names start with ``args[0]`` (a str). ``ping("warn", text)`` also warns;
    ``ping("exit")`` makes a build worker exit without answering (it returns elsewhere)."""
    if args[:1] == ("warn",):
        warnings.warn(str(args[1]), UserWarning, stacklevel=2)
    if args[:1] == ("exit",) and os.environ.get(_WORKER_ENV) == str(os.getpid()):
        os._exit(3)
    prefix = args[0] if args and isinstance(args[0], str) else None
    loaded = sorted(m for m in sys.modules if prefix is not None and m.startswith(prefix))
    return os.getpid(), args, loaded


# --- the worker side ---------------------------------------------------------------------------
def _read(stream):
    head = stream.read(_HEADER.size)
    if len(head) < _HEADER.size:
        return None
    (n,) = _HEADER.unpack(head)
    return pickle.loads(stream.read(n))


def _write(stream, obj) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_HEADER.pack(len(data)) + data)
    stream.flush()


def _reply(job: Job):
    """``("ok", value, warnings)`` or ``("err", exception, warnings)`` of one job."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            out = ("ok", job.run())
        except Exception as e:  # noqa: BLE001 - sent back and raised there
            out = ("err", e)
    notes = [(w.category, str(w.message)) for w in caught]
    try:
        pickle.dumps((out, notes))
    except Exception:  # noqa: BLE001 - an exception (or warning class) that cannot travel
        if out[0] == "err":
            out = ("err", RuntimeError(f"{type(out[1]).__name__}: {out[1]}"))
        notes = [(UserWarning, m) for _, m in notes]
    return (*out, notes)


def serve() -> None:
    """The worker's loop: read jobs from stdin, write replies to stdout, until stdin closes."""
    proto = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # anything a library prints goes to stderr, never into the protocol
    os.environ[_WORKER_ENV] = str(os.getpid())
    stdin = sys.stdin.buffer
    while True:
        job = _read(stdin)
        if job is None:
            return
        try:
            _write(proto, _reply(job))
        except OSError:  # the parent is gone
            return


# --- the parent side ---------------------------------------------------------------------------
def _command() -> list[str]:
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    boot = f"import sys; sys.path.insert(0, {root!r}); from tilus.runtime.workers import serve; serve()"
    flags = ["-P"] if sys.version_info >= (3, 11) else []  # no cwd on sys.path
    return [sys.executable, *flags, "-c", boot]


#: A worker with nothing to do for this long exits (a later job starts a new one).
IDLE_SECONDS = 30.0


class WorkerPool:
    """Up to ``size`` build workers, started on demand, fed from one queue.

    ``submit(job)`` returns a ``Future`` (with ``.pid``, the worker that ran it, once done); a
    worker that dies fails its job with ``WorkerLost`` (the caller runs it here) and is
    replaced once. A worker idle for ``idle`` seconds exits. ``close()`` ends the workers.
    """

    def __init__(self, size: int, idle: float = IDLE_SECONDS):
        """A pool of at most ``size`` workers (none started yet)."""
        self.size, self.idle = max(int(size), 1), idle
        self.owner = os.getpid()
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._closed = False
        self.pids: set[int] = set()

    def submit(self, job: Job) -> Future:
        """Queue ``job``; its result (or exception) arrives in the returned future."""
        fut: Future = Future()
        with self._lock:
            if self._closed:
                raise RuntimeError("the worker pool is closed")
            self._jobs.put((job, fut))
            if len(self._threads) < self.size:
                t = threading.Thread(target=self._drive, name="tilus-build-worker", daemon=True)
                self._threads.append(t)
                t.start()
        return fut

    def _start(self):
        try:
            proc = subprocess.Popen(_command(), stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        except OSError:
            return None
        self.pids.add(proc.pid)
        return proc

    def _next(self):
        """The next queued item; None when the pool closes or this worker has been idle."""
        while True:
            try:
                return self._jobs.get(timeout=self.idle)
            except queue.Empty:
                with self._lock:  # a job queued from now on starts a new thread
                    if self._jobs.empty():
                        self._threads.remove(threading.current_thread())
                        return None

    def _drive(self) -> None:
        """One worker's thread: start the worker, send it jobs one at a time."""
        proc, restarts = None, 1
        try:
            while True:
                item = self._next()
                if item is None:
                    return
                job, fut = item
                if proc is None:
                    proc = self._start()
                if proc is None:
                    fut.set_exception(WorkerLost("a build worker could not be started"))
                    continue
                try:
                    _write(proc.stdin, job)
                    reply = _read(proc.stdout)
                except (OSError, EOFError, pickle.UnpicklingError):
                    reply = None
                fut.pid = proc.pid
                if reply is None:
                    fut.set_exception(WorkerLost(f"build worker {proc.pid} exited"))
                    _stop(proc)
                    proc = self._start() if restarts > 0 else None
                    restarts -= 1
                    continue
                kind, value, notes = reply
                fut.notes = notes
                if kind == "ok":
                    fut.set_result(value)
                else:
                    fut.set_exception(value)
        finally:
            if proc is not None:
                _stop(proc)

    def close(self) -> None:
        """End every worker (after the jobs already queued)."""
        with self._lock:
            self._closed = True
            threads = list(self._threads)
            for _ in threads:
                self._jobs.put(None)
        for t in threads:
            t.join()


_SHARED: list[WorkerPool] = []


def shared_pool(size: int) -> WorkerPool:
    """The process's pool of build workers, allowed at least ``size`` workers (its workers
    stay for the next compile while they have work within ``IDLE_SECONDS``)."""
    pool = _SHARED[0] if _SHARED else None
    if pool is None or pool.owner != os.getpid() or pool._closed:
        pool = WorkerPool(size)
        _SHARED[:] = [pool]
        if len(_SHARED) == 1 and not getattr(shared_pool, "registered", False):
            atexit.register(_close_shared)
            shared_pool.registered = True
    pool.size = max(pool.size, int(size))
    return pool


def _close_shared() -> None:
    for pool in _SHARED:
        if pool.owner == os.getpid():
            pool.close()


def _stop(proc) -> None:
    try:
        proc.stdin.close()
    except OSError:
        pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()
