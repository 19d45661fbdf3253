"""A fresh process that makes one autotuned call of ``TunedAdd`` on the fake GPU and prints what
it did as one JSON line (run by test_tune_next_process.py; not a test module itself).

Usage: ``TILUS_CACHE_DIR=... python tests/tune/tuning_child.py LOG [--gpu NAME] [--version V]``
where LOG is a file that every build appends to (builds run in this process; NVRTC in build
workers, named by their pids).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def _log(path, **what) -> None:
    with open(path, "a") as f:
        f.write(json.dumps({"pid": os.getpid(), **what}) + "\n")


def main() -> None:
    """Parse the arguments, install the fakes, make the call and print the counters."""
    ap = argparse.ArgumentParser()
    ap.add_argument("log")
    ap.add_argument("--gpu", default="NVIDIA H200 (fake)")
    ap.add_argument("--version", default=None, help="pretend to be this tilus version")
    opts = ap.parse_args()

    import numpy as np

    import tilus
    from tests.helpers_fakegpu import OPTIONS, FakeGPU, fresh, make_args
    from tilus.backends.cuda import launch as L
    from tilus.backends.cuda.codegen import build as B

    if opts.version is not None:
        tilus.version.__version__ = opts.version
    gpu = FakeGPU(opts.gpu)
    gpu.install()
    real_steps = B.build_steps

    def build_steps(program, config, **kw):
        _log(opts.log, build=dict(config))
        ck = yield from real_steps(program, config, **kw)
        if not ck.cached:  # NVRTC ran (in a build worker or here): which process
            _log(opts.log, nvrtc=ck.name, nvrtc_pid=ck.compiled_in)
        return ck

    B.build_steps = build_steps
    kernel = fresh()
    n, a, b, c = args = make_args()
    with tilus.option.scoped(**OPTIONS):
        kernel(*args)
    events = [json.loads(line) for line in pathlib.Path(opts.log).read_text().splitlines()]
    print(
        json.dumps(
            {
                "pid": os.getpid(),
                "fingerprint_device": gpu.name,
                "builds": [e["build"] for e in events if "build" in e],
                "build_pids": sorted({e["pid"] for e in events if "build" in e}),
                "nvrtc": sum("nvrtc" in e for e in events),
                "nvrtc_pids": sorted({e["nvrtc_pid"] for e in events if "nvrtc" in e}),
                "benchmarks": gpu.benchmarks,
                "launches": gpu.launches,
                "last_tuning": L.dispatcher(kernel).last_tuning,
                "failed_configs": {
                    json.dumps(dict(k)): v for k, v in kernel.failed_configs.items()
                },
                "correct": bool(np.array_equal(c.array, a.array + b.array)),
            }
        )
    )


if __name__ == "__main__":
    main()
