"""tune(): cross-checked picking with fake runners; benchmark statistics."""

import time

import numpy as np
import pytest

from tilus import option
from tilus.tune import DispatchTable, TuneError, TuneWarning, benchmark, compare, tolerance, tune

FP = {"device": "cpu-interpreter", "torch": None, "tilus": "0.1.0"}
FAST = dict(warmup=0, repeat=3)


def make_args():
    a = np.arange(64, dtype=np.float32)
    return [a, a * 2, np.zeros(64, dtype=np.float32)]


def runner(delay, error=0.0, fail=False, nan=False):
    def run(a, b, out):
        if fail:
            raise RuntimeError("illegal memory access")
        time.sleep(delay)
        out[...] = a + b + error
        if nan:
            out[5] = np.nan

    return run


def test_benchmark_host_statistics():
    t = benchmark(lambda: time.sleep(0.002), warmup=1, repeat=5, cuda=False)
    assert len(t.samples) == 5 and t.min <= t.median
    assert 1.5 < t.median < 50  # milliseconds
    calls = []
    with option.scoped(bench_warmup=2, bench_repeat=4):
        benchmark(lambda: calls.append(1))
    assert len(calls) == 6
    with pytest.raises(ValueError):
        benchmark(lambda: None, repeat=0)


def test_picks_fastest_correct_never_a_faster_wrong_one():
    candidates = [
        ({"block": 64}, runner(0.012)),
        ({"block": 128}, runner(0.002)),
        ({"block": 256}, runner(0.0, error=1.0)),  # fastest, but wrong
        ({"block": 512}, runner(0.0, nan=True)),  # fastest, but NaN
        ({"block": 1024}, runner(0.0, fail=True)),  # crashes
        ({"block": 32}, runner(0.007)),
    ]
    with pytest.warns(TuneWarning) as rec:
        res = tune(candidates, make_args, outputs=[2], **FAST)
    assert res.winner == {"block": 128} and not res.cached
    msgs = [str(w.message) for w in rec]
    assert any('"block":256' in m and "relative error" in m for m in msgs)
    assert any('"block":512' in m and "NaN" in m for m in msgs)
    assert any('"block":1024' in m and "illegal memory access" in m for m in msgs)
    assert [c for c, _ in res.disagreements] == [{"block": 512}, {"block": 256}]
    assert [c for c, _ in res.failures] == [{"block": 1024}]
    assert set(res.timings) == {'{"block":64}', '{"block":128}', '{"block":32}'}


def test_majority_beats_an_early_wrong_candidate():
    candidates = [
        ({"v": 0}, runner(0.0, error=3.0)),
        ({"v": 1}, runner(0.001)),
        ({"v": 2}, runner(0.003)),
    ]
    with pytest.warns(TuneWarning, match='"v":0'):
        res = tune(candidates, make_args, outputs=[2], **FAST)
    assert res.winner == {"v": 1}


def test_reference_and_no_survivor():
    candidates = [({"v": 0}, runner(0.0, error=1.0)), ({"v": 1}, runner(0.0, error=1.0))]
    ok = tune(candidates, make_args, outputs=[2], **FAST)  # they agree with each other
    assert ok.winner in ({"v": 0}, {"v": 1}) and not ok.disagreements
    with pytest.warns(TuneWarning), pytest.raises(TuneError, match="wrong outputs"):
        tune(candidates, make_args, outputs=[2], reference=runner(0.0), **FAST)


def test_fresh_arguments_per_candidate():
    seen = []

    def accumulate(a, b, out):
        seen.append(float(out.sum()))
        out += a

    tune([({"v": 0}, accumulate), ({"v": 1}, accumulate)], make_args, outputs=[2], **FAST)
    assert seen[:2] == [0.0, 0.0]


def test_single_candidate_and_check_off():
    calls = []
    res = tune([({"v": 0}, lambda *a: calls.append(1))], make_args, outputs=[2])
    assert res.winner == {"v": 0} and calls == [] and res.timings == {}
    res = tune(
        [({"v": 0}, runner(0.003)), ({"v": 1}, runner(0.0, error=1.0))],
        make_args,
        outputs=[2],
        check=False,
        **FAST,
    )
    assert res.winner == {"v": 1}  # unchecked: the wrong one is not caught


def test_tolerances():
    assert tolerance("float16") == tolerance("bfloat16") == 1e-2
    assert tolerance("float32") == 1e-4 and tolerance("int32") == 0.0
    ref = np.linspace(1, 2, 100)
    assert compare((ref * (1 + 1e-3)).astype(np.float16), ref.astype(np.float16), 1e-2) is None
    assert compare((ref * (1 + 1e-3)).astype(np.float32), ref.astype(np.float32), 1e-4)
    assert compare(np.array([1, 2, 3]), np.array([1, 2, 4]), 0.0) == "1 element(s) differ"
    assert "shape" in compare(np.zeros(3), np.zeros(4), 1e-4)


def test_records_and_reuses_the_table(tmp_path):
    table = DispatchTable(tmp_path / "t.json")
    candidates = [({"v": 0}, runner(0.004)), ({"v": 1}, runner(0.0))]
    res = tune(
        candidates,
        make_args,
        outputs=[2],
        table=table,
        key="k",
        fingerprint=FP,
        failed=[({"v": 2}, "TilusCompileError: smem")],
        **FAST,
    )
    assert res.winner == {"v": 1} and res.entry.failed[0]["config"] == {"v": 2}

    def boom(*args):
        raise AssertionError("a cached decision must not run candidates")

    again = tune(
        [({"v": 0}, boom), ({"v": 1}, boom)],
        make_args,
        outputs=[2],
        table=DispatchTable(table.path),
        key="k",
        fingerprint=FP,
    )
    assert again.cached and again.winner == {"v": 1}
    # another machine re-tunes
    other = tune(
        candidates,
        make_args,
        outputs=[2],
        table=table,
        key="k",
        fingerprint={**FP, "device": "NVIDIA H200"},
        **FAST,
    )
    assert not other.cached


def test_torch_tensors():
    torch = pytest.importorskip("torch")

    def make():
        a = torch.linspace(0, 1, 256, dtype=torch.bfloat16)
        return [a, a, torch.zeros(256, dtype=torch.bfloat16)]

    def good(a, b, out):
        out.copy_(a + b)

    def bad(a, b, out):
        out.copy_(a + b * 1.5)

    with pytest.warns(TuneWarning, match="relative error"):
        res = tune([({"v": 0}, good), ({"v": 1}, bad), ({"v": 2}, good)], make, outputs=[2], **FAST)
    assert res.winner in ({"v": 0}, {"v": 2}) and res.disagreements[0][0] == {"v": 1}


def test_close_candidates_are_retimed_in_interleaved_rounds(monkeypatch):
    # a GPU whose clocks drop under sustained load: every timing is 5% slower than the one
    # before. Screened one after the other, the truly faster config (timed second) looks
    # slower; in interleaved rounds with rotating order the drift falls on both alike
    from tilus.tune import tuner
    from tilus.tune.timing import Timing

    calls, ran = [], []
    base = {"slow": 1.00, "fast": 0.97, "far": 3.0}

    def drifting(fn, **kw):
        fn()
        calls.append(ran[-1])
        return Timing.of([base[ran[-1]] * (1 + 0.05 * (len(calls) - 1))])

    def runner_of(name):
        return lambda *args: ran.append(name)

    monkeypatch.setattr(tuner, "benchmark", drifting)
    cands = [({"c": name}, runner_of(name)) for name in ("slow", "fast", "far")]
    res = tune(cands, lambda: [], outputs=[], check=False)
    assert res.winner == {"c": "fast"}
    assert calls[:3] == ["slow", "fast", "far"]  # screening; "far" is no finalist
    assert "far" not in calls[3:] and len(calls[3:]) == 2 * tuner.FINAL_ROUNDS
    assert calls[3:5] == ["slow", "fast"] and calls[5:7] == ["fast", "slow"]


def test_close_finalists_get_more_rounds_on_a_gpu(monkeypatch):
    # two configs 0.5% apart under noise that favours the slower one in the first three rounds:
    # on a GPU the finalists still within 1% get more rounds, and the truly faster one wins;
    # one 5% behind stops after three rounds; the interpreter (host timing) keeps three
    from tilus.tune import tuner
    from tilus.tune.timing import Timing

    noise = {"a": [1.01, 1.012, 1.012] + [1.0] * 9, "b": [1.0] * 12, "c": [1.0] * 12}
    base = {"a": 1.000, "b": 1.005, "c": 1.05}
    calls, ran = [], []

    def noisy(fn, **kw):
        fn()
        name = ran[-1]
        calls.append(name)
        return Timing.of([base[name] * noise[name][calls.count(name) - 1]])

    def runner_of(name):
        return lambda *args: ran.append(name)

    monkeypatch.setattr(tuner, "benchmark", noisy)
    cands = [({"c": name}, runner_of(name)) for name in ("a", "b", "c")]
    res = tune(cands, lambda: [], outputs=[], check=False, cuda=True)
    assert res.winner == {"c": "a"}
    finals = calls[3:]
    assert finals.count("c") == tuner.FINAL_ROUNDS
    assert finals.count("a") == finals.count("b") == tuner.FINAL_MAX_ROUNDS
    calls.clear()
    res = tune(cands, lambda: [], outputs=[], check=False, cuda=False)
    assert res.winner == {"c": "b"} and len(calls) == 3 + 3 * tuner.FINAL_ROUNDS


def test_finalists_are_timed_after_a_rest_on_a_gpu(monkeypatch):
    # with `tune_rest` > 0 configs are ranked from idle: on a GPU screening runs short bursts
    # with pauses three times as long, and every final timing follows a pause ten times its
    # expected length (at most `tune_rest`); by default (0) they are ranked hot, no pauses
    import tilus
    from tilus.tune import tuner
    from tilus.tune.timing import Timing

    clock = [0.0]
    slept, repeats = [], []

    def bench(fn, **kw):
        fn()
        repeats.append(kw["repeat"])
        clock[0] += burst[0] * (kw["repeat"] or 50) / 10  # seconds per 10 runs
        return Timing.of([1.0])

    monkeypatch.setattr(tuner.time, "sleep", slept.append)
    monkeypatch.setattr(tuner.time, "perf_counter", lambda: clock[0])
    monkeypatch.setattr(tuner, "benchmark", bench)
    monkeypatch.setattr(tuner, "FINAL_MAX_ROUNDS", tuner.FINAL_ROUNDS)  # tied: no extra rounds
    cands = [({"c": i}, lambda *a: None) for i in range(3)]
    finals = 3 * tuner.FINAL_ROUNDS
    burst = [0.03]  # a big matmul: 30 ms per screening timing of 10 runs
    with tilus.option.scoped(bench_repeat=50, tune_rest=0.4):
        tune(cands, lambda: [], outputs=[], check=False, cuda=True)
    assert repeats == [10] * 3 + [None] * finals  # None: bench_repeat
    assert slept[:3] == pytest.approx([0.09] * 3)  # 3 x 30 ms
    # final rounds: between the timings of round r (the pauses after screening come first)
    assert slept[3:] == pytest.approx([0.4] * finals)  # 10 x 5 x 30 ms, capped at tune_rest
    slept.clear()
    burst[0] = 1e-4  # a small kernel: next to no pause
    with tilus.option.scoped(bench_repeat=50, tune_rest=0.4):
        tune(cands, lambda: [], outputs=[], check=False, cuda=True)
    assert slept[3:] == pytest.approx([10 * 5 * 1e-4] * finals)
    slept.clear()
    burst[0] = 0.03
    with tilus.option.scoped(tune_rest=0.0):
        tune(cands, lambda: [], outputs=[], check=False, cuda=True)
    tune(cands, lambda: [], outputs=[], check=False, cuda=True)  # the default: ranked hot
    tune(cands, lambda: [], outputs=[], check=False, cuda=False)  # the interpreter: no rest
    assert slept == []
    with pytest.raises(ValueError):
        tilus.option.tune_rest(-1)
