"""bench/rowwise.py on the CPU: --help, and --dry-run checks every kernel on the interpreter."""

from __future__ import annotations

from tests.helpers_bench import run_bench


def _run(*args):
    return run_bench("rowwise.py", *args)


def test_help():
    p = _run("--help")
    assert p.returncode == 0 and "--dry-run" in p.stdout and "--out" in p.stdout


def test_dry_run_checks_every_kernel():
    p = _run("--dry-run")
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.count(" ok") == 4 and "FAIL" not in p.stdout


class _FakeTorch:
    """Just what the rotate protocol's timing touches: a clock that each call advances."""

    def __init__(self):
        self.now, self.calls, self.sleeps = 0.0, [], []
        torch = self

        class Event:
            def __init__(self, enable_timing=True):
                self.t = None

            def record(self):
                self.t = torch.now

            def synchronize(self):
                pass

            def elapsed_time(self, other):
                return other.t - self.t

        class Cuda:
            @staticmethod
            def _sleep(cycles):
                torch.sleeps.append(cycles)

            @staticmethod
            def synchronize():
                pass

        Cuda.Event = Event
        self.cuda = Cuda

    def call(self, name, ms):
        def fn():
            self.calls.append(name)
            self.now += ms

        return fn


def test_rotate_protocol_times_every_set_back_to_back(monkeypatch):
    from tests.helpers_bench import ROOT

    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    from rowwise import rotated_rounds, rotation_sets

    assert rotation_sets(34 << 20) == 8 and rotation_sets(1 << 30) == 2
    t = _FakeTorch()
    runs = {"a": [t.call("a0", 1.0), t.call("a1", 3.0)], "b": [t.call("b0", 5.0)]}
    r = rotated_rounds(runs, t, rounds=2, reps=3)
    # a warm-up call of every set, then 2 rounds of 3 spans: each span is all of a's sets in
    # turn, its time split among them
    assert t.calls[:3] == ["a0", "a1", "b0"]
    assert t.calls[3:9] == ["a0", "a1"] * 3 and t.calls[9:12] == ["b0"] * 3
    assert r == {"a": [2.0, 2.0], "b": [5.0, 5.0]}
    assert t.sleeps[0] == 2 * t.sleeps[-1]  # the sleep covers every launch of the span
