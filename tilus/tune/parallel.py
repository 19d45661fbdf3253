"""Compiling every config of a space: user code here, the compiler in workers, a progress bar."""

from __future__ import annotations

import concurrent.futures as cf
import inspect
import os
import sys
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tilus.runtime.workers import Job, WorkerLost, shared_pool
from tilus.tune.failures import describe_failure, is_refusal, summary


@dataclass
class Result:
    """The outcome of compiling one config: ``value`` on success, else ``error`` (a reason).

    Attributes:
        config: The config.
        value: What ``compile_one`` returned (None on failure).
        error: Why it failed: a tilus error as it prints, another exception as
            ``Type: message (at file:line)`` (None on success).
        refused: The failure is tilus refusing the config (a ``TilusProgramError``: a limit,
            a layout); False for a broken one (any other exception).
        exception: The exception itself (None on success).
        worker: The pid of the build worker that ran the config's last job (None: none did).
    """

    config: Any
    value: Any = None
    error: str | None = None
    refused: bool = False
    exception: BaseException | None = field(default=None, repr=False, compare=False)
    worker: int | None = field(default=None, compare=False)

    @property
    def ok(self) -> bool:
        """Whether the config compiled."""
        return self.error is None


def _describe(exc: BaseException) -> str:
    msg = str(exc).strip()
    return f"{type(exc).__name__}: {msg}" if msg else type(exc).__name__


class Progress:
    """A one-line progress bar on stderr (redrawn in place on a terminal, printed once at the
    end otherwise); failures are summarized by reason."""

    def __init__(self, total: int, label: str = "compiling", enabled: bool = True, stream=None):
        """Start a bar for ``total`` items."""
        self.total, self.label, self.done = total, label, 0
        self.failures: list[tuple[bool, str]] = []  # (refused, reason) of each failed item
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled and total > 0
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.start = time.perf_counter()
        self._lock = threading.Lock()
        if self.enabled and self.tty:
            self._draw()

    @property
    def failed(self) -> int:
        """How many items failed."""
        return len(self.failures)

    def line(self) -> str:
        """The bar's text, e.g. ``tilus compiling K [####....] 8/8, 7 failed: 7 x ... 1.2s``."""
        width = 24
        filled = width * self.done // max(self.total, 1)
        bar = "#" * filled + "." * (width - filled)
        fail = f", {self.failed} failed: {summary(self.failures)}" if self.failures else ""
        secs = time.perf_counter() - self.start
        return f"tilus {self.label} [{bar}] {self.done}/{self.total}{fail} {secs:.1f}s"

    def _draw(self):
        self.stream.write("\r\x1b[2K" + self.line())
        self.stream.flush()

    def step(self, ok: bool = True, reason: str | None = None, refused: bool = False) -> None:
        """Count one finished item (a failed one with its reason)."""
        with self._lock:
            self.done += 1
            if not ok:
                self.failures.append((refused, reason or "failed"))
            if self.enabled and self.tty:
                self._draw()

    def fail_one(self, reason: str, refused: bool = False) -> None:
        """Count an item already counted as done as failed after all (e.g. it did not load)."""
        with self._lock:
            self.failures.append((refused, reason))
            if self.enabled and self.tty:
                self._draw()

    def close(self) -> None:
        """Finish the bar with a newline (or print the summary line when not a terminal)."""
        if not self.enabled:
            return
        if self.tty:
            self._draw()
            self.stream.write("\n")
        else:
            self.stream.write(self.line() + "\n")
        self.stream.flush()


def default_workers() -> int:
    """The ``parallel_workers`` option, else the number of usable cores."""
    from tilus.option import get_option

    n = get_option("parallel_workers")
    if n is None:
        try:
            n = len(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            n = os.cpu_count() or 1
    return max(int(n), 1)


#: compile_all calls in progress in this process (a nested one runs its jobs here).
_ACTIVE: list = []


def compile_all(
    configs: Sequence,
    compile_one: Callable[[Any], Any],
    *,
    workers: int | None = None,
    progress: bool | Progress = True,
    label: str = "compiling",
    executor: str = "auto",
) -> list[Result]:
    """Run ``compile_one(config)`` for every config and collect the outcomes.

    ``compile_one`` always runs in this process, on the calling thread, one config after
    another: constructors, transpiling and anything else of the user's may touch the GPU. Only
    the expensive steps go to build workers (fresh interpreters that import tilus alone, see
    ``tilus.runtime.workers``): a ``compile_one`` that is a generator yields ``Job``s (e.g.
    NVRTC on a generated source) and receives each job's result (or has its exception raised
    at the ``yield``); while a worker runs a job, the next configs are prepared here. A plain
    function simply runs here. An exception in ``compile_one`` becomes that config's
    ``Result.error`` (with the user's file:line); it never stops the others.

    Args:
        configs: The configs, in order.
        compile_one: Compiles one config; returns anything, or is a generator (see above).
        workers: Build workers; default ``default_workers()``. 1 runs the jobs here too.
        progress: Show a progress bar on stderr, or a ``Progress`` to step (left open).
        label: The word shown on the progress bar.
        executor: ``"auto"`` (workers as above) or ``"serial"`` (every job here).

    Returns:
        One ``Result`` per config, in the order of ``configs``.
    """
    if executor not in ("auto", "serial"):
        raise ValueError(f"unknown executor {executor!r}")
    configs = list(configs)
    n = len(configs)
    workers = min(default_workers() if workers is None else max(int(workers), 1), max(n, 1))
    own_bar = not isinstance(progress, Progress)
    bar = Progress(n, label, enabled=bool(progress) and n > 1) if own_bar else progress
    results: list[Result | None] = [None] * n
    pool = shared_pool(workers) if workers > 1 and executor == "auto" and not _ACTIVE else None
    pending: dict = {}  # Future -> (index, generator, job): at most ``workers`` in flight
    backlog: list = []  # (index, generator, job) prepared while the workers are busy
    ran_on: dict = {}  # index -> pid of the worker of its last job

    def finish(i: int, value, exc: BaseException | None) -> None:
        if exc is None:
            results[i] = Result(configs[i], value, worker=ran_on.get(i))
            bar.step(True)
            return
        reason, refused = describe_failure(exc), is_refusal(exc)
        results[i] = Result(configs[i], None, reason, refused, exc, ran_on.get(i))
        bar.step(False, reason, refused)

    def send(i, gen, job) -> None:
        if len(pending) < workers:
            pending[pool.submit(job)] = (i, gen, job)
        else:
            backlog.append((i, gen, job))

    def advance(i: int, gen, how, payload) -> None:
        """Run config ``i``'s generator here up to its next job (sent to a worker) or its end."""
        while True:
            try:
                job = how(payload)
            except StopIteration as stop:
                return finish(i, stop.value, None)
            except Exception as e:
                return finish(i, None, e)
            if not isinstance(job, Job):
                how, payload = gen.throw, TypeError(f"compile_one yielded {job!r}, not a Job")
                continue
            if pool is None:
                how, payload = _run_here(gen, job)
                continue
            return send(i, gen, job)

    def harvest(block: bool) -> None:
        done, _ = cf.wait(
            list(pending), timeout=None if block else 0, return_when="FIRST_COMPLETED"
        )
        for fut in done:
            i, gen, job = pending.pop(fut)
            ran_on[i] = getattr(fut, "pid", None)
            if backlog:
                send(*backlog.pop(0))
            for category, message in getattr(fut, "notes", ()):
                warnings.warn(message, category, stacklevel=4)
            exc = fut.exception()
            if isinstance(exc, WorkerLost):  # the worker died: the job is tilus code, run it here
                advance(i, gen, *_run_here(gen, job))
            elif exc is not None:
                advance(i, gen, gen.throw, exc)
            else:
                advance(i, gen, gen.send, fut.result())

    _ACTIVE.append(compile_one)
    try:
        for i, cfg in enumerate(configs):
            try:
                out = compile_one(cfg)
            except Exception as e:
                finish(i, None, e)
            else:
                if inspect.isgenerator(out):
                    advance(i, out, out.send, None)
                else:
                    finish(i, out, None)
            if pending:
                harvest(block=False)
        while pending:
            harvest(block=True)
        return results  # type: ignore[return-value]
    finally:
        _ACTIVE.pop()
        if own_bar:
            bar.close()


def _run_here(gen, job: Job):
    """``(how, payload)`` that continues ``gen`` after running ``job`` in this process."""
    try:
        return gen.send, job.run()
    except Exception as e:  # noqa: BLE001 - raised inside the generator, as from a worker
        return gen.throw, e
