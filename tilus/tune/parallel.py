"""Compiling every config of a space in parallel, with per-config errors and a progress bar."""

from __future__ import annotations

import concurrent.futures as cf
import itertools
import multiprocessing
import os
import pickle
import sys
import threading
import time
import traceback
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass
class Result:
    """The outcome of compiling one config: ``value`` on success, else ``error`` (a reason)."""

    config: Any
    value: Any = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        """Whether the config compiled."""
        return self.error is None


def _describe(exc: BaseException) -> str:
    msg = str(exc).strip()
    return f"{type(exc).__name__}: {msg}" if msg else type(exc).__name__


def _run_one(compile_one, config):
    """Run in a worker: never raises, so a failing config cannot break the pool."""
    try:
        return True, compile_one(config)
    except Exception as e:
        tb = traceback.extract_tb(e.__traceback__)
        where = f" (at {tb[-1].filename}:{tb[-1].lineno})" if tb else ""
        if getattr(e, "__module__", "").startswith("tilus"):
            where = ""  # tilus errors carry their own source locations
        return False, _describe(e) + where


class Progress:
    """A one-line progress bar on stderr (redrawn in place on a terminal, printed once at the
    end otherwise)."""

    def __init__(self, total: int, label: str = "compiling", enabled: bool = True, stream=None):
        """Start a bar for ``total`` items."""
        self.total, self.label, self.done, self.failed = total, label, 0, 0
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled and total > 0
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.start = time.perf_counter()
        self._lock = threading.Lock()
        if self.enabled and self.tty:
            self._draw()

    def _line(self) -> str:
        width = 24
        filled = width * self.done // max(self.total, 1)
        bar = "#" * filled + "." * (width - filled)
        fail = f", {self.failed} failed" if self.failed else ""
        secs = time.perf_counter() - self.start
        return f"tilus {self.label} [{bar}] {self.done}/{self.total}{fail} {secs:.1f}s"

    def _draw(self):
        self.stream.write("\r" + self._line())
        self.stream.flush()

    def step(self, ok: bool = True) -> None:
        """Count one finished item."""
        with self._lock:
            self.done += 1
            self.failed += not ok
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
            self.stream.write(self._line() + "\n")
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


def _picklable(*objs) -> bool:
    try:
        pickle.dumps(objs)
        return True
    except Exception:
        return False


# Callables handed to forked workers by inheritance (a token travels instead of the callable).
_FORKED: dict[int, Callable] = {}
_next_token = itertools.count()


def _run_forked(token: int, config):
    return _run_one(_FORKED[token], config)


def _fork_available() -> bool:
    return sys.platform.startswith("linux") and "fork" in multiprocessing.get_all_start_methods()


def _process_pool(workers: int, fork: bool):
    ctx = multiprocessing.get_context("fork" if fork else "spawn")
    return cf.ProcessPoolExecutor(max_workers=workers, mp_context=ctx)


# Python 3.12+ warns on every fork of a multi-threaded process (torch starts threads); the
# workers only run compile_one, so the warning is silenced for the pool's forks.
_FORK_WARNING = r".*use of fork\(\) may lead to deadlocks.*"


def compile_all(
    configs: Sequence,
    compile_one: Callable[[Any], Any],
    *,
    workers: int | None = None,
    progress: bool = True,
    label: str = "compiling",
    executor: str = "auto",
) -> list[Result]:
    """Run ``compile_one(config)`` for every config, in parallel, and collect the outcomes.

    Work is spread over a process pool. On Linux the workers are forked and inherit
    ``compile_one``, so closures and lambdas work too (only configs and values are pickled);
    elsewhere a ``compile_one`` that cannot be pickled runs on a thread pool instead. Side
    effects of ``compile_one`` in a worker process (e.g. in-memory caches) do not reach this
    process: return what is needed, or write it to the on-disk cache. An exception in
    ``compile_one`` becomes that config's ``Result.error``; it never stops the others. A value
    that cannot be sent back from a worker (or a worker that died) is recomputed here.

    Args:
        configs: The configs, in order.
        compile_one: Compiles one config and returns anything (picklable, for processes).
        workers: Pool size; default ``default_workers()``. 1 runs everything in this process.
        progress: Show a progress bar on stderr.
        label: The word shown on the progress bar.
        executor: ``"auto"`` (processes, as above), ``"process"`` (processes, or an error if
            impossible), ``"thread"`` or ``"serial"``.

    Returns:
        One ``Result`` per config, in the order of ``configs``.
    """
    configs = list(configs)
    n = len(configs)
    workers = min(default_workers() if workers is None else max(int(workers), 1), max(n, 1))
    bar = Progress(n, label, enabled=progress and n > 1)
    results: list[Result | None] = [None] * n

    def finish(i: int, ok: bool, payload) -> None:
        results[i] = Result(configs[i], payload, None) if ok else Result(configs[i], None, payload)
        bar.step(ok)

    if executor not in ("auto", "process", "thread", "serial"):
        raise ValueError(f"unknown executor {executor!r}")
    token = None
    try:
        if workers <= 1 or executor == "serial":
            for i, cfg in enumerate(configs):
                finish(i, *_run_one(compile_one, cfg))
            return results  # type: ignore[return-value]
        fork = _fork_available()
        # a daemonic process (e.g. a pool worker itself) may not start processes
        in_daemon = multiprocessing.current_process().daemon
        if executor == "thread" or in_daemon or not (fork or _picklable(compile_one)):
            if executor == "process":
                raise ValueError("compile_all: compile_one cannot be pickled for processes")
            pool, submit = cf.ThreadPoolExecutor(workers), _run_one
            first = compile_one
        elif fork:
            token = next(_next_token)
            _FORKED[token] = compile_one  # before the pool forks its workers
            pool, submit, first = _process_pool(workers, True), _run_forked, token
        else:  # pragma: no cover - platforms without fork
            pool, submit, first = _process_pool(workers, False), _run_one, compile_one
        retry = []
        with pool, warnings.catch_warnings():
            warnings.filterwarnings("ignore", _FORK_WARNING, DeprecationWarning)
            futures = {pool.submit(submit, first, cfg): i for i, cfg in enumerate(configs)}
            for fut in cf.as_completed(futures):
                i = futures[fut]
                try:
                    ok, payload = fut.result()
                except Exception:  # the value did not pickle back, or the worker died
                    retry.append(i)
                    continue
                finish(i, ok, payload)
        for i in sorted(retry):
            finish(i, *_run_one(compile_one, configs[i]))
        return results  # type: ignore[return-value]
    finally:
        if token is not None:
            _FORKED.pop(token, None)
        bar.close()
