"""Typed options of tilus, each with an environment-variable equivalent and a scoped override."""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, fields


def _env_bool(name: str, default: bool) -> bool:
    v = os.environ.get(name)
    if v is None:
        return default
    return v.strip().lower() not in ("", "0", "false", "no", "off")


@dataclass
class _Options:
    interpret: bool = False  # TILUS_INTERPRET: run on the CPU interpreter even with a GPU
    interpret_all_configs: bool = False  # TILUS_INTERPRET_ALL_CONFIGS: run & cross-check all
    schedule_seed: int | None = None  # TILUS_SCHEDULE_SEED: shuffled interpreter scheduling
    cache_dir: str | None = None  # TILUS_CACHE_DIR
    parallel_workers: int | None = None  # TILUS_PARALLEL_WORKERS
    keep_ptx: bool = False  # TILUS_KEEP_PTX: also produce and cache the PTX of each kernel
    bench_warmup: int = 5
    bench_repeat: int = 50
    tune_rest: float = 0.0  # TILUS_TUNE_REST: longest idle pause between tuning timings (CUDA)
    tune_flush: str = "dirty"  # TILUS_TUNE_FLUSH: the L2 state before each tuning timing
    autotune: bool = True  # TILUS_AUTOTUNE: time every config on CUDA (False: first compiling)
    tma_l2_promotion: int = (
        128  # TILUS_TMA_L2_PROMOTION: L2 fetch size of TMA loads (0/64/128/256 B)
    )


_ENV = {
    "interpret": ("TILUS_INTERPRET", bool),
    "interpret_all_configs": ("TILUS_INTERPRET_ALL_CONFIGS", bool),
    "schedule_seed": ("TILUS_SCHEDULE_SEED", int),
    "cache_dir": ("TILUS_CACHE_DIR", str),
    "parallel_workers": ("TILUS_PARALLEL_WORKERS", int),
    "keep_ptx": ("TILUS_KEEP_PTX", bool),
    "autotune": ("TILUS_AUTOTUNE", bool),
    "tune_rest": ("TILUS_TUNE_REST", float),
    "tune_flush": ("TILUS_TUNE_FLUSH", str),
    "tma_l2_promotion": ("TILUS_TMA_L2_PROMOTION", int),
}

_overrides: dict = {}
_DEFAULTS = {f.name: f.default for f in fields(_Options)}
#: Bumped whenever an override changes; the CUDA fast path's cached decisions compare it.
epoch = [0]


def get_option(name: str):
    """The current value of option ``name`` (override, else environment, else default)."""
    if name in _overrides:
        return _overrides[name]
    default = _DEFAULTS
    if name not in default:
        raise KeyError(f"unknown tilus option {name!r}")
    if name in _ENV:
        env, kind = _ENV[name]
        if env in os.environ:
            if kind is bool:
                return _env_bool(env, default[name])
            return kind(os.environ[env])
    return default[name]


def set_option(name: str, value):
    """Set option ``name`` for the rest of the process."""
    get_option(name)
    _overrides[name] = value
    epoch[0] += 1


@contextlib.contextmanager
def scoped(**values):
    """Temporarily set options: ``with tilus.option.scoped(interpret=True): ...``."""
    for k in values:
        get_option(k)
    saved = {k: _overrides[k] for k in values if k in _overrides}
    _overrides.update(values)
    epoch[0] += 1
    try:
        yield
    finally:
        for k in values:
            _overrides.pop(k, None)
        _overrides.update(saved)
        epoch[0] += 1


def interpret(enable: bool = True):
    """Run kernels on the CPU interpreter even when a GPU is present."""
    set_option("interpret", enable)


def interpret_all_configs(enable: bool = True):
    """On the interpreter, run every autotune config and cross-check their outputs."""
    set_option("interpret_all_configs", enable)


def schedule_seed(seed: int | None):
    """Interpreter scheduling: None = deterministic order; an int = seeded shuffled order."""
    set_option("schedule_seed", seed)


def cache_dir(path: str):
    """Directory of the on-disk compile cache."""
    set_option("cache_dir", str(path))


def parallel_workers(n: int):
    """Processes used to compile autotune configs in parallel."""
    set_option("parallel_workers", n)


def keep_ptx(enable: bool = True):
    """Also produce the PTX of each compiled kernel (``CompiledKernel.ptx``, kernel.ptx in the
    cache entry)."""
    set_option("keep_ptx", enable)


def bench_warmup(n: int):
    """Warm-up runs before timing a config."""
    set_option("bench_warmup", n)


def bench_repeat(n: int):
    """Timed runs per config (the median is used)."""
    set_option("bench_repeat", n)


def tune_rest(seconds: float):
    """The longest idle pause the autotuner makes between timings on a GPU (default 0: none).

    By default configs are ranked the way training and serving loops run them: back to back,
    the GPU at its steady (on an H200, power-capped) clocks, the finalists in interleaved
    rounds so that clock drift falls on all of them alike. With ``seconds > 0`` they are ranked
    from idle instead, as a bursty workload sees them: each screening burst is followed by a
    pause three times as long, and each final timing follows a pause ten times as long as it is
    expected to take, both at most ``seconds`` (under a sustained load configs rank by energy
    per tile, not by speed)."""
    if seconds < 0:
        raise ValueError(f"tune_rest needs seconds >= 0, got {seconds}")
    set_option("tune_rest", float(seconds))


#: the L2 states the autotuner can time each run from (``tune_flush``)
TUNE_FLUSHES = ("dirty", "clean")


def tune_flush(protocol: str):
    """The L2 state the autotuner times each run of a config from, on a GPU: ``"dirty"`` (the
    default: a 256 MiB write before each run, so the L2 is full of dirty lines that the run
    writes back) or ``"clean"`` (that write, then a 256 MiB read of another buffer, so the L2
    holds clean lines only, as in a decode loop whose earlier kernels mostly read). A kernel
    that reads little (a decode GEMV) pays the dirty flush's write-back as a larger share of
    its time and may rank its configs differently under the two. The protocol is part of the
    tuning decision's key: a winner found under one is not reused under the other."""
    if protocol not in TUNE_FLUSHES:
        raise ValueError(f"tune_flush must be one of {TUNE_FLUSHES}, got {protocol!r}")
    set_option("tune_flush", protocol)


def autotune(enable: bool = True):
    """On CUDA, time every config of a kernel's space and use the fastest (True, the default),
    or use the first config that compiles (False; also ``TILUS_AUTOTUNE=0``)."""
    set_option("autotune", enable)
