"""Autotuning: tuning keys, benchmarking, parallel compilation, cross-checked picking, dispatch."""

from tilus.tune.autotuner import Autotuner, Selection, clone_arg
from tilus.tune.dispatch import DispatchTable, DispatchTableWarning, Entry, dispatch_dir
from tilus.tune.keys import (
    config_id,
    device_fingerprint,
    dispatch_key,
    fingerprint_matches,
    script_file_name,
    script_identity,
    tuning_bucket,
    tuning_ints,
)
from tilus.tune.parallel import Progress, Result, compile_all, default_workers
from tilus.tune.timing import Timing, benchmark, cuda_available
from tilus.tune.tuner import TuneError, TuneResult, TuneWarning, compare, tolerance, tune

__all__ = [
    "Autotuner",
    "DispatchTable",
    "DispatchTableWarning",
    "Entry",
    "Progress",
    "Result",
    "Selection",
    "Timing",
    "TuneError",
    "TuneResult",
    "TuneWarning",
    "benchmark",
    "clone_arg",
    "compare",
    "compile_all",
    "config_id",
    "cuda_available",
    "default_workers",
    "device_fingerprint",
    "dispatch_dir",
    "dispatch_key",
    "fingerprint_matches",
    "script_file_name",
    "script_identity",
    "tolerance",
    "tune",
    "tuning_bucket",
    "tuning_ints",
]
