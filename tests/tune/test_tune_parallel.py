"""compile_all: user code here, jobs in fresh build workers, per-config errors, order, progress."""

import io
import os
import sys

import pytest

from tilus.runtime.workers import Job, run_here
from tilus.tune import Progress, compile_all

PING = "tilus.runtime.workers:ping"
HERE = os.getpid()  # the process that imported this module (the 'initialized' parent)


def square_or_fail(cfg):
    if cfg["block"] == 3:
        raise ValueError("block 3 does not fit")
    return cfg["block"] ** 2, os.getpid()


def pinged(cfg):
    """A generator compile_one: the user part here, a ping job in a worker."""
    if os.getpid() != HERE:  # the V6 case: user code that breaks in any other process
        raise RuntimeError("Cannot re-initialize CUDA in forked subprocess (stand-in)")
    if cfg["block"] == 3:
        raise ValueError("block 3 does not fit")
    pid, args, _ = yield Job(PING, (cfg["block"],))
    return args[0] ** 2, pid


def test_user_code_here_jobs_in_workers():
    configs = [{"block": b} for b in range(6)]
    res = compile_all(configs, pinged, workers=3, progress=False)
    assert [r.config for r in res] == configs
    assert [r.ok for r in res] == [True, True, True, False, True, True]
    assert res[3].error.startswith("ValueError: block 3 does not fit (at ")
    assert res[3].error.endswith("test_tune_parallel.py:27)") and not res[3].refused
    assert isinstance(res[3].exception, ValueError) and res[3].value is None
    assert [r.value[0] for r in res if r.ok] == [0, 1, 4, 16, 25]
    workers = {r.value[1] for r in res if r.ok}
    assert HERE not in workers and len(workers) > 1  # jobs ran in several workers
    assert all(r.worker == r.value[1] for r in res if r.ok)


def test_serial_runs_jobs_here():
    res = compile_all([{"block": 1}, {"block": 2}], pinged, workers=4, executor="serial")
    assert [r.value for r in res] == [(1, HERE), (4, HERE)]
    res = compile_all([{"block": 2}], pinged, workers=1, progress=False)
    assert res[0].value == (4, HERE) and res[0].worker is None
    assert run_here(pinged({"block": 5})) == (25, HERE)


def test_a_plain_function_runs_here():
    offset = 10
    res = compile_all(
        [{"block": b} for b in range(5)],
        lambda c: (c["block"] + offset, os.getpid(), lambda: c) if c["block"] != 2 else 1 / 0,
        workers=4,
        progress=False,
    )
    assert [r.value[0] if r.ok else None for r in res] == [10, 11, None, 13, 14]
    assert res[2].error.startswith("ZeroDivisionError") and "test_tune_parallel.py:" in res[2].error
    assert {r.value[1] for r in res if r.ok} == {HERE}
    assert all(r.value[2]() == r.config for r in res if r.ok)  # values never travel


def test_workers_are_fresh_interpreters_that_run_tilus_jobs_only():
    def probe(cfg):
        return (yield Job(PING, (cfg,)))

    res = compile_all(["tests", "torch", "__mp_main__"], probe, workers=2, progress=False)
    assert [r.value[2] for r in res] == [[], [], []]  # no test module, torch or user script
    res = compile_all([1], lambda c: (yield Job("os:getpid")), workers=2, progress=False)
    assert "must name a tilus function" in res[0].error


def test_job_errors_are_raised_at_the_yield():
    def caught(cfg):
        try:
            yield Job("tilus.runtime.workers:no_such_job")
        except AttributeError as e:
            return f"caught {type(e).__name__}"

    res = compile_all([1, 2], caught, workers=2, progress=False)
    assert [r.value for r in res] == ["caught AttributeError"] * 2
    res = compile_all([1], lambda c: (yield 42), workers=2, progress=False)
    assert "not a Job" in res[0].error


def test_a_worker_that_dies_is_replaced_and_its_job_runs_here():
    def dying(cfg):
        pid, _, _ = yield Job(PING, ("exit",) if cfg == 0 else (cfg,))
        return pid

    res = compile_all([0, 1, 2, 3], dying, workers=2, progress=False)
    assert all(r.ok for r in res) and res[0].value == HERE  # retried here
    assert all(r.value != HERE for r in res[1:])


def test_worker_warnings_reach_the_caller():
    with pytest.warns(UserWarning, match="from a worker"):
        res = compile_all([1, 2], lambda c: (yield Job(PING, ("warn", "from a worker"))), workers=2)
    assert all(r.ok and r.worker != HERE for r in res)


def test_serial_and_empty():
    assert compile_all([], square_or_fail, progress=False) == []
    res = compile_all([{"block": 3}, {"block": 2}], square_or_fail, workers=1, progress=False)
    assert not res[0].ok and res[1].value[0] == 4
    with pytest.raises(ValueError, match="unknown executor"):
        compile_all([1], square_or_fail, executor="fork")


def test_progress_bar_names_the_reasons(capsys):
    compile_all([{"block": b} for b in range(4)], square_or_fail, workers=2)
    err = capsys.readouterr().err
    assert "4/4, 1 failed: 1 x ValueError: block 3 does not fit (at " in err
    buf = io.StringIO()
    buf.isatty = lambda: True
    bar = Progress(3, "building", stream=buf)
    bar.step()
    bar.step(ok=False, reason="RuntimeError: boom\nmore", refused=False)
    bar.step(ok=False, reason="TilusCompileError: too big", refused=True)
    bar.fail_one("RuntimeError: boom")
    bar.close()
    out = buf.getvalue()
    assert out.count("\r") == 6 and out.endswith("\n") and "[" + "#" * 24 + "]" in out
    assert "3/3, 3 failed: 2 x RuntimeError: boom, 1 refused by the compiler" in out


def _nested(_):
    res = compile_all([1, 2], pinged_value, workers=2, progress=False)
    return [r.value for r in res]


def pinged_value(c):
    pid, args, _ = yield Job(PING, (c,))
    return args[0] * 2


def test_nested_compile_all_runs_its_jobs_here():
    res = compile_all(["x", "y"], _nested, workers=2, progress=False)
    assert [r.value for r in res] == [[2, 4], [2, 4]]


def test_sys_path_of_workers_picks_this_tilus():
    import tilus

    res = compile_all([0], lambda c: (yield Job(PING, ("tilus",))), workers=2, progress=False)
    assert "tilus.runtime.workers" in res[0].value[2] and "tilus.lang" in sys.modules
    assert tilus.__file__  # the same tree: the worker was started with its root first
