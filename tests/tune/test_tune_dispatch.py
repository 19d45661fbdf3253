"""The persistent dispatch table: round trip, fingerprints, concurrent writers, corruption."""

import json
import multiprocessing
import warnings

import pytest

from tilus import option
from tilus.tune import DispatchTable, DispatchTableWarning, Entry, dispatch_dir

FP = {"device": "cpu-interpreter", "torch": None, "tilus": "0.1.0"}


def entry(block=128, fp=FP):
    return Entry(
        winner={"block": block},
        times=[
            {"config": {"block": block}, "median_ms": 1.0, "min_ms": 0.9},
            {"config": {"block": 64}, "median_ms": 2.0, "min_ms": 1.8},
        ],
        failed=[{"config": {"block": 512}, "reason": "TilusCompileError: too much smem"}],
        disagreed=[{"config": {"block": 32}, "error": "relative error 0.5 > 1e-4"}],
        fingerprint=dict(fp),
        info={"script": "VecAdd", "buckets": {"n": 6144}},
    )


def test_round_trip(tmp_path):
    t = DispatchTable(tmp_path / "dispatch" / "vec_add.json")
    assert t.lookup("k1", FP) is None
    t.record("k1", entry())
    assert t.path.is_file() and t.report_path.is_file()
    # a later process: a fresh object reading the file
    got = DispatchTable(t.path).lookup("k1", FP)
    assert got is not None and got.winner == {"block": 128}
    assert got.failed[0]["config"] == {"block": 512}
    assert got.disagreed[0]["config"] == {"block": 32}
    assert got.times == entry().times and got.fingerprint == FP
    report = t.report_path.read_text()
    assert "winner: block=128" in report and "FAILED block=512" in report
    assert "WRONG  block=32" in report
    doc = json.loads(t.path.read_text())
    assert doc["version"] == 1 and set(doc["entries"]) == {"k1"}


def test_fingerprint_mismatch_is_ignored(tmp_path):
    t = DispatchTable(tmp_path / "t.json")
    t.record("k", entry())
    assert t.lookup("k", {**FP, "device": "NVIDIA H200"}) is None
    assert t.lookup("k", {**FP, "tilus": "9.9"}) is None
    assert t.lookup("k", FP) is not None
    t.record("w", entry(fp={**FP, "tilus": "*"}))
    assert t.lookup("w", {**FP, "tilus": "9.9"}) is not None


def test_overwrite_and_remove(tmp_path):
    t = DispatchTable(tmp_path / "t.json")
    t.record("k", entry(64))
    t.record("k", entry(256))
    assert t.lookup("k", FP).winner == {"block": 256}
    assert t.remove("k") and not t.remove("k")
    assert t.lookup("k", FP) is None


def test_for_script_uses_cache_dir_option(tmp_path):
    with option.scoped(cache_dir=str(tmp_path)):
        t = DispatchTable.for_script("MatmulV4")
        assert dispatch_dir() == tmp_path / "dispatch"
    assert t.path == tmp_path / "dispatch" / "matmul_v4.json"


@pytest.mark.parametrize(
    "content", ["{not json", "", "[1, 2]", '{"version": 99, "entries": {}}', '{"version": 1}']
)
def test_corrupt_file_is_ignored_with_a_warning(tmp_path, content):
    path = tmp_path / "t.json"
    path.write_text(content)
    t = DispatchTable(path)
    with pytest.warns(DispatchTableWarning):
        assert t.lookup("k", FP) is None
    # the next write replaces the broken file
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        t.record("k", entry())
        assert DispatchTable(path).lookup("k", FP).winner == {"block": 128}


def test_malformed_entry_is_a_miss(tmp_path):
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"version": 1, "entries": {"k": {"times": []}}}))
    with pytest.warns(DispatchTableWarning, match="entry k is damaged"):
        assert DispatchTable(path).lookup("k", FP) is None


def _writer(path, tag, n):
    t = DispatchTable(path)
    for i in range(n):
        t.record(f"{tag}-{i}", entry(i))


@pytest.mark.filterwarnings("ignore:.*use of fork:DeprecationWarning")
def test_concurrent_writers_merge(tmp_path):
    path = tmp_path / "dispatch" / "shared.json"
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_writer, args=(path, tag, 15)) for tag in ("a", "b")]
    for p in procs:
        p.start()
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    t = DispatchTable(path)
    assert sorted(t.keys()) == sorted(f"{tag}-{i}" for tag in "ab" for i in range(15))
    assert t.lookup("b-7", FP).winner == {"block": 7}
    leftovers = [p.name for p in path.parent.iterdir() if p.name.endswith(".tmp")]
    assert leftovers == []
