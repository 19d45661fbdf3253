"""The dispatch table across processes: a later process reuses the winner without timing or
compiling the losers, unless the fingerprint changed; a table hit restores the stored failure
reasons. Real NVRTC builds on the fake GPU of tests/helpers_fakegpu.py."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

from tests.cuda.conftest import needs_nvrtc
from tests.helpers_fakegpu import OPTIONS, FakeGPU, fresh, make_args
from tilus import option
from tilus.backends.cuda import launch as L
from tilus.tune import TuneWarning

pytestmark = needs_nvrtc

CHILD = pathlib.Path(__file__).with_name("tuning_child.py")


def _child(cache, log, *flags) -> dict:
    """Run tuning_child.py in a new interpreter against the cache dir ``cache``."""
    env = {**os.environ, "TILUS_CACHE_DIR": str(cache)}
    for name in ("TILUS_AUTOTUNE", "TILUS_INTERPRET", "TILUS_PARALLEL_WORKERS"):
        env.pop(name, None)
    proc = subprocess.run(
        [sys.executable, str(CHILD), str(log), *flags],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _tuned(out: dict) -> bool:
    return out["last_tuning"] is not None and out["benchmarks"] > 0


def test_a_later_process_reuses_the_winner(tmp_path):
    cache = tmp_path / "cache"
    first = _child(cache, tmp_path / "1.log")
    assert _tuned(first) and first["last_tuning"]["winner"] == {"block": 64}
    assert first["benchmarks"] == 2 and first["nvrtc"] == 3  # 256 fails before NVRTC
    assert first["correct"] and {first["pid"]} == set(first["build_pids"])  # user code here
    nvrtc_pids = first["nvrtc_pids"]  # NVRTC in build workers
    assert first["pid"] not in nvrtc_pids and first["last_tuning"]["build_pids"] == nvrtc_pids

    second = _child(cache, tmp_path / "2.log")
    assert second["pid"] != first["pid"]
    assert second["last_tuning"] is None and second["benchmarks"] == 0  # nothing timed
    assert second["builds"] == [{"block": 64}] and second["nvrtc"] == 0  # no loser built
    assert second["build_pids"] == [second["pid"]]  # and no compile workers started
    assert second["launches"] == [64] and second["correct"]
    # the hit restores why configs were dropped
    assert list(second["failed_configs"]) == ['{"block": 256}']
    assert second["failed_configs"] == first["failed_configs"]
    assert "shared memory" in second["failed_configs"]['{"block": 256}']


@pytest.mark.parametrize(
    "changed", [["--gpu", "NVIDIA H100 80GB HBM3 (fake)"], ["--version", "0.0.0+other"]]
)
def test_a_changed_fingerprint_tunes_again(tmp_path, changed):
    cache = tmp_path / "cache"
    assert _tuned(_child(cache, tmp_path / "1.log"))
    other = _child(cache, tmp_path / "2.log", *changed)
    assert _tuned(other) and other["benchmarks"] == 2
    assert len(other["builds"]) > 1 and other["correct"]
    table = json.loads((cache / "dispatch" / "tuned_add.json").read_text())
    assert len(table["entries"]) == 2  # both machines' decisions are kept
    # and the first machine still finds its own
    again = _child(cache, tmp_path / "3.log")
    assert not _tuned(again) and again["builds"] == [{"block": 64}]


@pytest.fixture
def gpu(monkeypatch, tmp_path):
    fake = FakeGPU()
    monkeypatch.setenv("TILUS_CACHE_DIR", str(tmp_path))
    fake.install(monkeypatch.setattr)
    with option.scoped(**OPTIONS):
        yield fake


def test_a_table_hit_restores_failed_configs(gpu):
    tuned = fresh()
    with pytest.warns(TuneWarning):
        tuned(*make_args())
    assert list(tuned.failed_configs) == [(("block", 256),)]

    kernel = fresh()  # as in a later process: only the table is shared
    assert kernel.failed_configs == {}
    gpu.benchmarks = 0
    kernel(*make_args())
    assert gpu.benchmarks == 0 and L.dispatcher(kernel).last_tuning is None
    assert kernel.failed_configs == tuned.failed_configs
    assert "shared memory" in kernel.failed_configs[(("block", 256),)]
    # the selection also carries the stored disagreements (configs with wrong outputs)
    (sel,) = L.dispatcher(kernel).tuner._fast.values()
    assert sel.result.cached and sel.config == {"block": 64}
    assert [(c, e.split(":")[0]) for c, e in sel.result.disagreements] == [
        ({"block": 128}, "output #2")
    ]
    assert sel.result.entry.winner == {"block": 64}
