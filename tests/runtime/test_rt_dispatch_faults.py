"""Fault injection into the dispatch table: an unreadable, inconsistent, foreign, partial or
unwritable table (or one entry of it) is tuned again, never trusted and never fatal."""

from __future__ import annotations

import errno
import json
import multiprocessing
import os
import signal
import stat
import warnings

import numpy as np
import pytest

from tests.cuda.conftest import needs_nvrtc
from tests.helpers_fakegpu import OPTIONS, FakeGPU, fresh
from tests.helpers_fakegpu import make_args as fake_args
from tilus import option
from tilus.errors import TilusCacheWarning
from tilus.tune import DispatchTable, TuneWarning, tune
from tilus.tune import dispatch as D
from tilus.tune.dispatch import verify_tables
from tilus.tune.keys import dispatch_key

pytestmark = pytest.mark.filterwarnings("ignore:.*use of fork:DeprecationWarning")

FP = {"device": "cpu-interpreter", "torch": None, "tilus": "0.1.0"}
SPACE = [{"block": 1}, {"block": 2}, {"block": 3}]


@pytest.fixture(autouse=True)
def quick():
    with option.scoped(bench_warmup=0, bench_repeat=2, tune_rest=0.0):
        yield


def key_of(name, fp=FP):
    return dispatch_key(f"Vec.{name}", {}, SPACE, {"n": 100}, fp)


class Counter:
    """Candidates that compute out = a + b and count how often they ran."""

    def __init__(self):
        self.runs = 0

    def candidates(self):
        def run(a, b, out):
            self.runs += 1
            out[:] = a + b

        return [(cfg, run) for cfg in SPACE]


_A, _B = np.random.default_rng().standard_normal((2, 100))


def make_args():
    """The same inputs for every candidate (fresh copies): they agree, so all are timed."""
    return [_A.copy(), _B.copy(), np.full(100, np.nan)]


def tuned(path, key, fp=FP):
    """Tune ``key`` through the table at ``path`` (a fresh object: as a later process would);
    returns (winner, how many runs it took, the TilusCacheWarnings raised)."""
    c = Counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = tune(
            c.candidates(),
            make_args,
            outputs=[2],
            table=DispatchTable(path),
            key=key,
            fingerprint=fp,
            cuda=False,
        )
    mine = [str(w.message) for w in caught if issubclass(w.category, TilusCacheWarning)]
    assert result.winner in SPACE
    return result.winner, c.runs, mine


def assert_trusted(path, key):
    """The table now holds an intact entry for ``key``: no run, no warning."""
    _, runs, caught = tuned(path, key)
    assert runs == 0 and caught == []


@pytest.fixture
def table(tmp_path):
    """A table path holding three tuned keys."""
    path = tmp_path / "dispatch" / "vec.json"
    for name in ("a", "b", "c"):
        _, runs, caught = tuned(path, key_of(name))
        assert runs > 0 and caught == []
    return path


# --- the whole table damaged -------------------------------------------------------------------
def _cut(frac):
    return lambda raw: raw[: int(len(raw) * frac)]


TABLE_DAMAGE = {
    "random bytes": lambda raw: np.random.default_rng().bytes(len(raw)),
    "random text": lambda raw: bytes(np.random.default_rng().integers(32, 127, len(raw))),
    "empty": _cut(0),
    "cut after 1 byte": lambda raw: raw[:1],
    "cut in half": _cut(0.5),
    "cut before the last byte": lambda raw: raw[:-2],
    "a list": lambda raw: b"[1, 2]",
    "no entries": lambda raw: b'{"version": 1}',
    "entries a list": lambda raw: b'{"version": 1, "entries": []}',
    "another format version": lambda raw: raw.replace(b'"version": 1', b'"version": 99'),
}


@pytest.mark.parametrize("name", list(TABLE_DAMAGE))
def test_damaged_table_is_tuned_again(table, name):
    table.write_bytes(TABLE_DAMAGE[name](table.read_bytes()))
    _, runs, caught = tuned(table, key_of("b"))
    assert runs > 0, "a damaged table must not be trusted"
    assert len(caught) == 1 and str(table) in caught[0], caught
    json.loads(table.read_text())  # rewritten whole
    assert_trusted(table, key_of("b"))


# --- one entry damaged -------------------------------------------------------------------------
def _on_b(fn, drop_check=False):
    """Damage the entry of key b; ``drop_check``: also drop its checksum, so that the field
    checks (not the checksum) must catch the damage."""

    def damage(entries):
        fn(entries)
        b = entries[key_of("b")]
        if drop_check and isinstance(b, dict):
            b.pop("check", None)

    return damage


def _set(field, value):
    return _on_b(lambda e: e[key_of("b")].__setitem__(field, value), drop_check=True)


ENTRY_DAMAGE = {
    "winner edited": _on_b(lambda e: e[key_of("b")]["winner"].update(block=9)),
    "times edited": _on_b(lambda e: e[key_of("b")].update(times=[])),
    "copied from another key": _on_b(lambda e: e.__setitem__(key_of("b"), e[key_of("a")])),
    "a string": _on_b(lambda e: e.__setitem__(key_of("b"), "garbage")),
    "no winner": _on_b(lambda e: e[key_of("b")].pop("winner"), drop_check=True),
    "winner a list": _set("winner", [1]),
    "times not a list": _set("times", {"a": 1}),
    "timing without median": _set("times", [{"config": {"block": 1}}]),
    "fingerprint a number": _set("fingerprint", 7),
    "timestamp text": _set("timestamp", "yesterday"),
}


@pytest.mark.parametrize("name", list(ENTRY_DAMAGE))
def test_one_damaged_entry_is_tuned_again(table, name):
    doc = json.loads(table.read_text())
    ENTRY_DAMAGE[name](doc["entries"])
    table.write_text(json.dumps(doc))
    before = {k: doc["entries"][k] for k in (key_of("a"), key_of("c"))}
    _, runs, caught = tuned(table, key_of("b"))
    assert runs > 0, "a damaged entry must not be trusted"
    assert len(caught) == 1 and key_of("b") in caught[0] and str(table) in caught[0], caught
    after = json.loads(table.read_text())["entries"]
    assert {k: after[k] for k in before} == before  # the intact entries are kept as they were
    for name in ("a", "b", "c"):
        assert_trusted(table, key_of(name))


def test_hand_written_entry_without_checksum_is_used(table):
    doc = json.loads(table.read_text())
    for e in doc["entries"].values():
        del e["check"], e["key"]
        e["winner"] = {"block": 3}
    table.write_text(json.dumps(doc))
    winner, runs, caught = tuned(table, key_of("a"))
    assert (winner, runs, caught) == ({"block": 3}, 0, [])


# --- another machine, another version ----------------------------------------------------------
@pytest.mark.parametrize(
    "other", [{**FP, "tilus": "0.0.9"}, {**FP, "device": "NVIDIA H100 80GB HBM3"}]
)
def test_table_of_another_version_or_gpu_is_ignored_for_that_key(tmp_path, other):
    path = tmp_path / "vec.json"
    _, runs, _ = tuned(path, key_of("a", other), other)
    assert runs > 0
    _, runs, caught = tuned(path, key_of("a"))  # our key: tuned here, the foreign one kept
    assert runs > 0 and caught == []
    assert sorted(json.loads(path.read_text())["entries"]) == sorted(
        [key_of("a"), key_of("a", other)]
    )
    assert_trusted(path, key_of("a"))
    # an entry under our key that says it was measured elsewhere is not used either
    doc = json.loads(path.read_text())
    doc["entries"][key_of("a")] = doc["entries"][key_of("a", other)] | {"key": key_of("a")}
    doc["entries"][key_of("a")]["check"] = D._checksum(doc["entries"][key_of("a")])
    path.write_text(json.dumps(doc))
    _, runs, caught = tuned(path, key_of("a"))
    assert runs > 0 and caught == []
    assert_trusted(path, key_of("a"))


# --- unwritable --------------------------------------------------------------------------------
def test_unwritable_table_keeps_decisions_in_memory(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    path = blocker / "dispatch" / "vec.json"
    _, runs, caught = tuned(path, key_of("a"))
    assert runs > 0 and len(caught) == 1 and str(blocker) in caught[0]
    assert "cannot be written" in caught[0]
    assert_trusted(path, key_of("a"))  # this process still has the decision, no 2nd warning


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EROFS])
def test_failing_table_writes_are_not_fatal(table, monkeypatch, code):
    before = table.read_bytes()

    def failing(path, text):
        raise OSError(code, os.strerror(code), str(path))

    monkeypatch.setattr(D, "_atomic_write", failing)
    _, runs, caught = tuned(table, key_of("d"))
    assert runs > 0 and len(caught) == 1 and os.strerror(code) in caught[0]
    assert table.read_bytes() == before
    assert_trusted(table, key_of("d"))
    monkeypatch.undo()
    _, runs, _ = tuned(table, key_of("e"))  # writable again: the kept decision lands too
    assert key_of("d") in json.loads(table.read_text())["entries"]


def test_shared_table_directory_warns_once(tmp_path):
    path = tmp_path / "dispatch" / "vec.json"
    tuned(path, key_of("a"))
    path.parent.chmod(0o777)
    _, runs, caught = tuned(path, key_of("a"))
    assert runs == 0 and len(caught) == 1 and "writable by other users" in caught[0]
    assert_trusted(path, key_of("a"))
    path.parent.chmod(0o700)


def test_new_table_directory_is_owner_only(tmp_path):
    path = tmp_path / "root" / "dispatch" / "vec.json"
    tuned(path, key_of("a"))
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700


# --- interrupted tuning runs -------------------------------------------------------------------
def test_tuning_killed_while_writing_the_table(table):
    before = table.read_bytes()

    def child():
        # killed once the table's temp file is written, before it is renamed into place
        os.fsync = lambda fd: os.kill(os.getpid(), signal.SIGKILL)
        tuned(table, key_of("d"))

    proc = multiprocessing.get_context("fork").Process(target=child)
    proc.start()
    proc.join(60)
    assert proc.exitcode == -signal.SIGKILL
    assert table.read_bytes() == before  # the old table, whole
    (left,) = [p for p in table.parent.iterdir() if p.name.endswith(".tmp")]
    for name in ("a", "b", "c"):
        assert_trusted(table, key_of(name))
    report = verify_tables(table.parent.parent)
    assert report.ok == 3 and report.bad == [] and report.leftovers == [str(left)]
    assert not left.exists()
    _, runs, caught = tuned(table, key_of("d"))  # the lock died with the process
    assert runs > 0 and caught == []


def _tuner(path, name, barrier, die):
    barrier.wait()
    if die:
        os.fsync = lambda fd: os.kill(os.getpid(), signal.SIGKILL)
    tuned(path, key_of(name))


def test_concurrent_tuners_one_killed(table):
    ctx = multiprocessing.get_context("fork")
    names = ["d", "e", "f", "g", "h"]
    barrier = ctx.Barrier(len(names))
    procs = [ctx.Process(target=_tuner, args=(table, name, barrier, name == "f")) for name in names]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0, -signal.SIGKILL, 0, 0]
    entries = json.loads(table.read_text())["entries"]
    assert sorted(entries) == sorted(key_of(n) for n in "abcdegh")
    for name in "abcdegh":
        assert_trusted(table, key_of(name))
    report = verify_tables(table.parent.parent)
    assert report.ok == 7 and report.bad == [] and len(report.leftovers) == 1


def test_interrupt_while_writing_the_table(table, monkeypatch):
    before = table.read_bytes()

    def interrupted(*a):
        raise KeyboardInterrupt

    monkeypatch.setattr(D.os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        tuned(table, key_of("d"))
    monkeypatch.undo()
    assert table.read_bytes() == before
    assert [p for p in table.parent.iterdir() if p.name.endswith(".tmp")] == []


# --- verification ------------------------------------------------------------------------------
def test_verify_tables_reports_and_drops(table):
    doc = json.loads(table.read_text())
    doc["entries"][key_of("b")]["winner"] = {"block": 2, "edited": True}
    table.write_text(json.dumps(doc))
    broken = table.with_name("broken.json")
    broken.write_bytes(b"\xff\xfe{")
    report = verify_tables(table.parent.parent, drop=False)
    assert (report.checked, report.ok) == (4, 2)
    assert sorted(what for what, _ in report.bad) == sorted(
        [str(broken), f"{table} entry {key_of('b')}"]
    )
    assert report.dropped == [] and broken.exists()
    report = verify_tables(table.parent.parent)
    assert len(report.dropped) == 2 and not broken.exists()
    assert sorted(json.loads(table.read_text())["entries"]) == sorted([key_of("a"), key_of("c")])
    assert verify_tables(table.parent.parent).clean
    _, runs, caught = tuned(table, key_of("b"))
    assert runs > 0 and caught == []


# --- an autotuned call (real NVRTC builds; GPU, timing and tensors faked) -----------------------
@needs_nvrtc
def test_autotuned_call_does_not_trust_a_tampered_winner(tmp_path, monkeypatch):
    fake = FakeGPU()
    fake.install(monkeypatch.setattr)
    monkeypatch.setenv("TILUS_CACHE_DIR", str(tmp_path))
    with option.scoped(**OPTIONS, cache_dir=str(tmp_path)):
        with pytest.warns(TuneWarning):
            fresh()(*fake_args())  # tuned: block 64 wins, block 128 computes wrong outputs
        path = tmp_path / "dispatch" / "tuned_add.json"
        doc = json.loads(path.read_text())
        (key,) = doc["entries"]
        doc["entries"][key]["winner"] = {"block": 128}  # edited to pick the wrong config
        path.write_text(json.dumps(doc))
        args = fake_args()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            fresh()(*args)
    mine = [str(w.message) for w in caught if issubclass(w.category, TilusCacheWarning)]
    assert len(mine) == 1 and key in mine[0] and "checksum" in mine[0]
    n, a, b, c = args
    np.testing.assert_array_equal(c.array, a.array + b.array)
    assert json.loads(path.read_text())["entries"][key]["winner"] == {"block": 64}


@needs_nvrtc
def test_autotuned_call_with_an_unwritable_cache_runs(tmp_path, monkeypatch):
    fake = FakeGPU()
    fake.install(monkeypatch.setattr)
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    root = blocker / "cache"
    monkeypatch.setenv("TILUS_CACHE_DIR", str(root))
    with option.scoped(**OPTIONS, cache_dir=str(root)):
        args = fake_args()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            kernel = fresh()
            kernel(*args)
            kernel(*fake_args())  # the decision is kept in memory: no tuning, no warning
    mine = [str(w.message) for w in caught if issubclass(w.category, TilusCacheWarning)]
    assert len(mine) == 1 and str(root) in mine[0] and "cannot be written" in mine[0]
    n, a, b, c = args
    np.testing.assert_array_equal(c.array, a.array + b.array)
    assert fake.launches[-1] == 64 and not blocker.is_dir()
