"""compile_all: process and thread pools, per-config errors, order, progress."""

import io
import os
import sys

import pytest

from tilus.tune import Progress, compile_all, parallel


def square_or_fail(cfg):
    if cfg["block"] == 3:
        raise ValueError("block 3 does not fit")
    return cfg["block"] ** 2, os.getpid()


def unpicklable_value(cfg):
    return lambda: cfg  # a value that cannot travel back from a worker process


def test_process_pool_with_a_failing_config():
    configs = [{"block": b} for b in range(6)]
    res = compile_all(configs, square_or_fail, workers=3, progress=False)
    assert [r.config for r in res] == configs
    assert [r.ok for r in res] == [True, True, True, False, True, True]
    assert "ValueError: block 3 does not fit" in res[3].error and res[3].value is None
    assert [r.value[0] for r in res if r.ok] == [0, 1, 4, 16, 25]
    assert any(r.value[1] != os.getpid() for r in res if r.ok)  # ran in worker processes


@pytest.mark.parametrize("executor", ["auto", "thread", "serial"])
def test_non_picklable_callable(executor):
    offset = 10
    res = compile_all(
        [{"block": b} for b in range(5)],
        lambda c: (c["block"] + offset, os.getpid()) if c["block"] != 2 else 1 / 0,
        workers=4,
        progress=False,
        executor=executor,
    )
    assert [r.value[0] if r.ok else None for r in res] == [10, 11, None, 13, 14]
    assert res[2].error.startswith("ZeroDivisionError")
    pids = {r.value[1] for r in res if r.ok}
    if executor == "auto" and sys.platform.startswith("linux"):
        assert os.getpid() not in pids  # forked workers inherit the closure
    else:
        assert pids == {os.getpid()}


def test_thread_fallback_without_fork(monkeypatch):
    monkeypatch.setattr(parallel, "_fork_available", lambda: False)
    res = compile_all([1, 2, 3], lambda c: (c, os.getpid()), workers=3, progress=False)
    assert [r.value for r in res] == [(c, os.getpid()) for c in (1, 2, 3)]
    with pytest.raises(ValueError):
        compile_all([1, 2], lambda c: c, workers=2, progress=False, executor="process")


def test_unpicklable_values_are_recomputed_here():
    res = compile_all([{"b": 1}, {"b": 2}], unpicklable_value, workers=2, progress=False)
    assert all(r.ok and r.value() == r.config for r in res)


def test_serial_and_empty():
    assert compile_all([], square_or_fail, progress=False) == []
    res = compile_all([{"block": 3}, {"block": 2}], square_or_fail, workers=1, progress=False)
    assert not res[0].ok and res[1].value[0] == 4


def test_progress_bar(capsys):
    compile_all([{"block": b} for b in range(4)], square_or_fail, workers=2)
    err = capsys.readouterr().err
    assert "4/4" in err and "1 failed" in err
    buf = io.StringIO()
    buf.isatty = lambda: True
    bar = Progress(2, "building", stream=buf)
    bar.step()
    bar.step(ok=False)
    bar.close()
    out = buf.getvalue()
    assert out.count("\r") == 4 and out.endswith("\n") and "[" + "#" * 24 + "]" in out


def _nested(_):
    # inside a daemonic pool worker: compile_all must not try to start processes
    res = compile_all([1, 2], lambda c: c * 2, workers=2, progress=False)
    return [r.value for r in res]


def test_nested_compile_all_in_a_worker():
    res = compile_all(["x"], _nested, workers=1, progress=False)
    assert res[0].value == [2, 4]
    res = compile_all(["x", "y"], _nested, workers=2, progress=False)
    assert [r.value for r in res] == [[2, 4], [2, 4]]
