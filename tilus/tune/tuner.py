"""Picking the fastest correct config: a cross-checked run of every candidate, then timing."""

from __future__ import annotations

import json
import statistics
import sys
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tilus.errors import TilusError
from tilus.option import get_option
from tilus.tune.dispatch import DispatchTable, Entry
from tilus.tune.failures import describe_failure
from tilus.tune.keys import config_id, device_fingerprint
from tilus.tune.timing import Timing, benchmark, synchronize


class TuneWarning(UserWarning):
    """A candidate config produced wrong outputs, or failed for a reason other than tilus's
    refusal (an exception, a load or launch error), while tuning; or more than half of the
    space was lost before the winner was picked."""


class TuneError(TilusError):
    """No candidate config could be run and agreed with the others."""


@dataclass
class TuneResult:
    """The outcome of ``tune``.

    Attributes:
        winner: The chosen config.
        timings: Config id (``config_id``) -> ``Timing`` of every timed candidate.
        failures: ``(config, reason)`` of candidates that failed (compile or run).
        disagreements: ``(config, error)`` of candidates whose outputs were wrong.
        cached: True when the winner came from the dispatch table and nothing was run.
        entry: The dispatch-table entry that was read or written (None without a table).
    """

    winner: Any
    timings: dict = field(default_factory=dict)
    failures: list = field(default_factory=list)
    disagreements: list = field(default_factory=list)
    cached: bool = False
    entry: Entry | None = None


# --- comparing outputs -------------------------------------------------------------------------
_TOLERANCES = {"float16": 1e-2, "bfloat16": 1e-2, "float32": 1e-4, "float64": 1e-6}


def _dtype_name(x) -> str:
    dt = getattr(x, "dtype", None)
    name = str(dt).replace("torch.", "") if dt is not None else type(x).__name__
    return {"half": "float16", "float": "float32", "double": "float64"}.get(name, name)


def tolerance(dtype_name: str) -> float:
    """Relative tolerance of outputs of a dtype: 1e-2 for fp16/bf16, 1e-4 for fp32, 1e-6 for
    fp64, 1e-1 for 8-bit (and smaller) floats, 0 (exact) for integers and booleans."""
    if dtype_name in _TOLERANCES:
        return _TOLERANCES[dtype_name]
    if dtype_name.startswith("float"):
        return 1e-1
    return 0.0


def to_numpy(x) -> np.ndarray:
    """A host NumPy copy of an array or a (CPU or CUDA) torch tensor; bfloat16 and other
    dtypes NumPy lacks are widened to float32."""
    if isinstance(x, np.ndarray):
        return x.copy()
    if type(x).__module__.startswith("torch") and hasattr(x, "detach"):
        t = x.detach()
        if t.device.type != "cpu":
            t = t.cpu()
        try:
            return t.clone().numpy()
        except (TypeError, RuntimeError):
            return t.float().numpy()
    return np.array(x)


def compare(out: np.ndarray, ref: np.ndarray, tol: float) -> str | None:
    """None when ``out`` matches ``ref``, else the error: a NaN, a shape mismatch, or the
    norm-wise relative error ``max|out - ref| / max|ref|`` above ``tol`` (exact when 0)."""
    if out.shape != ref.shape:
        return f"shape {tuple(out.shape)} instead of {tuple(ref.shape)}"
    if out.dtype.kind in "fc":
        if np.isnan(out).any():
            return f"{int(np.isnan(out).sum())} NaN value(s)"
        a, b = out.astype(np.float64), ref.astype(np.float64)
        if np.isnan(b).any():
            return "the reference has NaN values"
        if tol == 0.0:
            bad = int(np.count_nonzero(a != b))
            return f"{bad} element(s) differ" if bad else None
        with np.errstate(invalid="ignore", over="ignore"):
            inf_mismatch = np.isinf(a) | np.isinf(b)
            if inf_mismatch.any() and not np.array_equal(a[inf_mismatch], b[inf_mismatch]):
                return "infinities differ"
            diff = np.abs(np.where(inf_mismatch, 0.0, a - b))
            scale = np.abs(np.where(inf_mismatch, 0.0, b))
        err = float(diff.max(initial=0.0)) / max(float(scale.max(initial=0.0)), 1e-30)
        return None if err <= tol else f"relative error {err:.3g} > {tol:g}"
    bad = int(np.count_nonzero(out != ref))
    return f"{bad} element(s) differ" if bad else None


def _is_cuda_tensor(x) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor) and _on_cuda(x)


def snapshot(x):
    """A private copy of an output for comparing: a device copy of a CUDA torch tensor (compared
    on the GPU: large outputs would be slow on the host), else a host NumPy copy."""
    if _is_cuda_tensor(x):
        return x.detach().clone()
    return to_numpy(x)


def _has_nan(o) -> bool:
    if isinstance(o, np.ndarray):
        return o.dtype.kind in "fc" and bool(np.isnan(o).any())
    return bool((o.is_floating_point() or o.is_complex()) and o.isnan().any())


def compare_tensors(out, ref, tol: float) -> str | None:
    """``compare`` for two torch tensors on one device, computed there (same rules)."""
    import torch

    if tuple(out.shape) != tuple(ref.shape):
        return f"shape {tuple(out.shape)} instead of {tuple(ref.shape)}"
    if not (out.is_floating_point() or out.is_complex()):
        bad = int((out != ref).sum())
        return f"{bad} element(s) differ" if bad else None
    if out.isnan().any():
        return f"{int(out.isnan().sum())} NaN value(s)"
    a, b = out.double(), ref.double()
    if b.isnan().any():
        return "the reference has NaN values"
    if tol == 0.0:
        bad = int((a != b).sum())
        return f"{bad} element(s) differ" if bad else None
    inf = a.isinf() | b.isinf()
    if inf.any() and not torch.equal(a[inf], b[inf]):
        return "infinities differ"
    if a.numel() == 0:
        return None
    diff = float(torch.where(inf, 0.0, a - b).abs().max())
    scale = float(torch.where(inf, 0.0, b).abs().max())
    err = diff / max(scale, 1e-30)
    return None if err <= tol else f"relative error {err:.3g} > {tol:g}"


def _compare_any(o, r, tol: float) -> str | None:
    if isinstance(o, np.ndarray) or isinstance(r, np.ndarray):
        return compare(to_numpy(o), to_numpy(r), tol)
    return compare_tensors(o, r, tol)


def _compare_all(outs, ref, dtypes) -> str | None:
    for pos, (o, r, dt) in enumerate(zip(outs, ref, dtypes)):
        err = _compare_any(o, r, tolerance(dt))
        if err is not None:
            return f"output #{pos}: {err}"
    return None


# --- the tuner ---------------------------------------------------------------------------------
def _cfg_text(cfg) -> str:
    return config_id(cfg) if isinstance(cfg, Mapping) else repr(cfg)


def _pick_cached(entry: Entry, candidates):
    want = config_id(entry.winner)
    for cfg, _ in candidates:
        if isinstance(cfg, Mapping) and config_id(cfg) == want:
            return cfg
    return None


def tune(
    candidates: Sequence[tuple[Any, Callable]],
    make_args: Callable[[], Sequence],
    *,
    outputs: Sequence[int],
    check: bool = True,
    reference: Callable | None = None,
    warmup: int | None = None,
    repeat: int | None = None,
    flush_l2: bool = True,
    table: DispatchTable | None = None,
    key: str | None = None,
    fingerprint: Mapping | None = None,
    failed: Sequence[tuple[Any, str]] = (),
    info: Mapping | None = None,
    cuda: bool | None = None,
) -> TuneResult:
    """Pick the fastest candidate whose outputs agree with the others.

    1. With ``table`` and ``key``: a stored entry for this machine whose winner is among the
       candidates is returned at once (``cached=True``); nothing runs.
    2. With ``check``: every candidate runs once on fresh arguments (``make_args()``); the
       arguments at positions ``outputs`` are compared to the consensus (the largest group of
       candidates agreeing with each other; ties go to the earlier group) or, if given, to the
       outputs of ``reference(*args)``. NaN anywhere, a shape change or a relative error above
       ``tolerance(dtype)`` is a disagreement: that candidate is dropped and a ``TuneWarning``
       names it. A candidate that raises is a failure.
    3. Every remaining candidate is screened with ``benchmark`` on fresh arguments (a fifth of
       the runs; on a GPU each burst is followed by an idle pause, so the GPU stays below its
       power cap). The candidates within ``FINAL_MARGIN`` of the best are timed again in
       interleaved rounds with all the runs (on a GPU, those still within ``FINAL_CLOSE`` of
       the best get more rounds, up to ``FINAL_MAX_ROUNDS``; with ``tune_rest`` > 0 each
       timing follows an idle pause, ten times its expected length, at most ``tune_rest``);
       the smallest median round wins (ties: smallest minimum, then the earlier candidate). A single remaining candidate wins without timing.
    4. With ``table`` and ``key`` the decision is recorded (merged into the file).

    Args:
        candidates: ``(config, runner)`` pairs; ``runner(*args)`` launches that config.
        make_args: Returns a fresh argument list (copies), so candidates never see each
            other's outputs.
        outputs: Positions in the argument list of the arrays/tensors the kernel writes.
        check: Cross-check outputs before timing.
        reference: Optional ground truth: a callable writing the correct outputs into args.
        warmup, repeat, flush_l2: Passed to ``benchmark``.
        table, key: Where the decision is looked up and stored.
        fingerprint: The machine; default ``device_fingerprint()``.
        failed: ``(config, reason)`` of configs that failed earlier (e.g. to compile), recorded
            with the entry.
        info: Free-form context stored with the entry (shown in the text report).
        cuda: Time with CUDA events (True) or the host clock (False); None = CUDA events when
            an argument is a CUDA tensor (NumPy or CPU arguments mean the interpreter).

    Returns:
        A ``TuneResult``; raises ``TuneError`` when no candidate survives.
    """
    candidates = list(candidates)
    failures = [(cfg, str(reason)) for cfg, reason in failed]
    if not candidates:
        raise TuneError("tune: no candidate configs" + _reasons(failures, []))
    use_table = table is not None and key is not None
    fp = dict(fingerprint) if fingerprint is not None else None
    if use_table:
        fp = fp if fp is not None else device_fingerprint()
        entry = table.lookup(key, fp)
        if entry is not None:
            cfg = _pick_cached(entry, candidates)
            if cfg is not None:
                return TuneResult(winner=cfg, cached=True, entry=entry)

    disagreements: list[tuple[Any, str]] = []
    alive = list(range(len(candidates)))
    if check and (len(candidates) > 1 or reference is not None):
        alive = _cross_check(candidates, make_args, outputs, reference, failures, disagreements)

    timings: dict[str, Timing] = {}
    timed: list[tuple[Any, Timing]] = []
    if len(alive) > 1:
        bench = dict(warmup=warmup, repeat=repeat, flush_l2=flush_l2)
        screen, spent = _screening(bench), {}
        for i in list(alive):
            t = _time_one(candidates, i, make_args, screen, cuda, alive, failures, spent=spent)
            if t is not None:
                cuda = t[1]
                timings[_cfg_text(candidates[i][0])] = t[0]
        pool = _final_rounds(candidates, alive, timings, make_args, bench, cuda, failures, spent)
        timed = [(candidates[i][0], timings[_cfg_text(candidates[i][0])]) for i in alive]
    if not alive:
        raise TuneError("tune: no candidate config survived" + _reasons(failures, disagreements))
    if len(alive) == 1:
        best = alive[0]
    else:

        def rank(i):
            t = timings[_cfg_text(candidates[i][0])]
            return (t.median, t.min, i)

        best = min(pool, key=rank)
    winner = candidates[best][0]
    result = TuneResult(winner, timings, failures, disagreements)
    if use_table:
        result.entry = _make_entry(winner, timed, failures, disagreements, fp, info)
        table.record(key, result.entry)
    return result


#: Candidates whose screening median is within this factor of the best are timed again.
FINAL_MARGIN = 1.10
#: At most this many finalists; ``FINAL_ROUNDS`` interleaved rounds time each once.
FINAL_MAX, FINAL_ROUNDS = 6, 3
#: On a GPU, while finalists are within ``FINAL_CLOSE`` of the best after those rounds, they
#: get more rounds (at most ``FINAL_MAX_ROUNDS`` in all, and none started after
#: ``FINAL_EXTRA_S`` seconds of final timing): memory-bound configs often lie within half a
#: percent of each other, where three rounds leave the order to chance.
FINAL_CLOSE, FINAL_MAX_ROUNDS, FINAL_EXTRA_S = 0.01, 9, 2.0
#: Screening times each candidate with this fraction of the runs of a final timing ...
SCREEN_FRACTION, SCREEN_MIN_REPEAT = 5, 5
#: ... and on a GPU idles this many times as long as the timing took (at most ``tune_rest``).
COOL_FACTOR = 3.0
#: Before each final timing the GPU idles this many times as long as that timing is expected
#: to take (at most ``tune_rest``): a full rest for kernels that can heat the GPU, next to
#: nothing for small ones.
FINAL_COOL_FACTOR = 10.0


def _screening(bench: dict) -> dict:
    """The benchmark settings of the screening: short bursts (see ``_time_one``'s ``spent``)."""
    repeat = bench["repeat"] if bench["repeat"] is not None else get_option("bench_repeat")
    warmup = bench["warmup"] if bench["warmup"] is not None else get_option("bench_warmup")
    screen_repeat = max(SCREEN_MIN_REPEAT, -(-int(repeat) // SCREEN_FRACTION))
    return dict(bench, repeat=min(int(repeat), screen_repeat), warmup=min(int(warmup), 2))


def _time_one(candidates, i, make_args, bench, cuda, alive, failures, spent=None):
    """``(Timing, cuda)`` of candidate ``i`` on fresh arguments, or None (it failed: it is
    dropped from ``alive`` and recorded).

    With ``spent`` (a dict: candidate -> seconds the timing took) on a GPU the timing is
    followed by an idle pause ``COOL_FACTOR`` times as long (at most ``tune_rest``): short
    bursts at a low duty cycle keep the GPU below its power cap, so that candidates are ranked
    at the clocks a benchmark run sees, not at the lower clocks of a GPU that has been busy for
    a second (where configs rank by energy per tile)."""
    cfg, runner = candidates[i]
    args = list(make_args())
    if cuda is None:
        cuda = any(_on_cuda(a) for a in args)
    t0 = time.perf_counter()
    try:
        return benchmark(lambda a=args: runner(*a), cuda=cuda, **bench), cuda
    except Exception as e:
        alive.remove(i)
        failures.append((cfg, describe_failure(e)))
        _warn(f"config {_cfg_text(cfg)} failed while being timed: {describe_failure(e)}")
        return None
    finally:
        del args
        if spent is not None:
            spent[i] = time.perf_counter() - t0
            rest = float(get_option("tune_rest")) if cuda else 0.0
            if rest > 0:
                time.sleep(min(rest, COOL_FACTOR * spent[i]))


def _final_rounds(candidates, alive, timings, make_args, bench, cuda, failures, spent) -> list:
    """Time the close finalists again in interleaved rounds and keep the median round; returns
    the candidates the winner is chosen from (the finalists still alive, else all alive).

    Timed one after the other, the candidates see a GPU whose clocks drift (on an H200 a
    sustained load reaches the power cap within a second and the clocks drop), so a screening
    order that puts a candidate late makes it look slower. In a round every finalist runs once,
    the order rotating from round to round, so the drift falls on all of them alike. On a GPU
    each finalist timing follows an idle pause (``FINAL_COOL_FACTOR`` times its expected
    length, at most ``tune_rest``): under the power cap configs rank by energy per tile rather
    than by speed, so every finalist is timed from the idle state.
    """
    if not alive:
        return alive
    best = min(timings[_cfg_text(candidates[i][0])].median for i in alive)
    close = sorted(
        (i for i in alive if timings[_cfg_text(candidates[i][0])].median <= best * FINAL_MARGIN),
        key=lambda i: timings[_cfg_text(candidates[i][0])].median,
    )[:FINAL_MAX]
    if len(close) < 2:
        return alive
    rounds: dict = {i: [] for i in close}
    rest = 0.0
    if cuda:  # a final timing has about SCREEN_FRACTION times the runs of a screening one
        busy = SCREEN_FRACTION * max(spent.get(i, 0.0) for i in close)
        rest = min(float(get_option("tune_rest")), FINAL_COOL_FACTOR * busy)
    t0 = time.perf_counter()
    for r in range(FINAL_MAX_ROUNDS if cuda else FINAL_ROUNDS):
        pool = close if r < FINAL_ROUNDS else _still_close(close, rounds, alive)
        if r >= FINAL_ROUNDS and (len(pool) < 2 or time.perf_counter() - t0 > FINAL_EXTRA_S):
            break
        order = pool[r % len(pool) :] + pool[: r % len(pool)]
        for i in order:
            if i not in alive:
                continue
            if rest > 0:
                time.sleep(rest)  # every finalist starts from the same (idle) power state
            t = _time_one(candidates, i, make_args, bench, cuda, alive, failures)
            if t is not None:
                rounds[i].append(t[0].median)
    for i, medians in rounds.items():
        if i in alive and medians:
            timings[_cfg_text(candidates[i][0])] = Timing.of(medians)
    # the others keep their screening times (slower than the best by the margin) but cannot
    # win: the finalists' times come from later rounds, under other clocks
    finalists = [i for i in close if i in alive and rounds[i]]
    return finalists or alive


def _still_close(close, rounds, alive) -> list:
    """The finalists whose median round so far is within ``FINAL_CLOSE`` of the best one's."""
    meds = {i: statistics.median(rounds[i]) for i in close if i in alive and rounds[i]}
    if not meds:
        return []
    best = min(meds.values())
    return [i for i in close if i in meds and meds[i] <= best * (1 + FINAL_CLOSE)]


def _on_cuda(x) -> bool:
    return getattr(getattr(x, "device", None), "type", None) == "cuda"


def _cross_check(candidates, make_args, outputs, reference, failures, disagreements):
    """Run each candidate once; return the indices of those that agree with the consensus."""
    # Candidates agreeing with each other form a cluster; only one representative's outputs
    # are kept per cluster, so memory stays at a few copies of the outputs.
    clusters: list[dict] = []  # {"rep": outputs, "members": [index]}
    dtypes: list[str] | None = None
    ref = None
    if reference is not None:
        args = list(make_args())
        reference(*args)
        _sync(args)
        ref = [snapshot(args[p]) for p in outputs]
        dtypes = [_dtype_name(args[p]) for p in outputs]
    for i, (cfg, runner) in enumerate(candidates):
        args = list(make_args())
        try:
            runner(*args)
            _sync(args)
        except Exception as e:
            failures.append((cfg, describe_failure(e)))
            _warn(f"config {_cfg_text(cfg)} failed to run: {describe_failure(e)}")
            continue
        if dtypes is None:
            dtypes = [_dtype_name(args[p]) for p in outputs]
        outs = [snapshot(args[p]) for p in outputs]
        del args
        nan = next((p for p, o in enumerate(outs) if _has_nan(o)), None)
        if nan is not None:
            _disagree(cfg, f"output #{nan}: NaN values", disagreements)
            continue
        if ref is not None:
            err = _compare_all(outs, ref, dtypes)
            if err is not None:
                _disagree(cfg, f"{err} against the reference", disagreements)
                continue
        for c in clusters:
            if _compare_all(outs, c["rep"], dtypes) is None:
                c["members"].append(i)
                break
        else:
            clusters.append({"rep": outs, "members": [i]})
    if not clusters:
        return []
    consensus = max(clusters, key=lambda c: len(c["members"]))  # first of the largest
    if (
        len(clusters) > 1
        and sum(len(c["members"]) == len(consensus["members"]) for c in clusters) > 1
        and ref is None
    ):
        _warn(
            "no majority among the candidate configs' outputs; trusting the first group "
            f"({', '.join(_cfg_text(candidates[i][0]) for i in consensus['members'])})"
        )
    for c in clusters:
        if c is consensus:
            continue
        err = _compare_all(c["rep"], consensus["rep"], dtypes)
        n = len(consensus["members"])
        for i in c["members"]:
            _disagree(
                candidates[i][0], f"{err} against the consensus of {n} config(s)", disagreements
            )
    return sorted(consensus["members"])


def _sync(args) -> None:
    if any(_on_cuda(a) for a in args):
        synchronize()


def _disagree(cfg, err, disagreements):
    disagreements.append((cfg, err))
    _warn(f"config {_cfg_text(cfg)} disagrees with the other configs ({err}); it is never picked")


def _warn(msg: str) -> None:
    warnings.warn(f"tilus autotune: {msg}", TuneWarning, stacklevel=4)


def _reasons(failures, disagreements) -> str:
    lines = [f"\n  {_cfg_text(c)}: {r}" for c, r in failures]
    lines += [f"\n  {_cfg_text(c)}: wrong outputs ({e})" for c, e in disagreements]
    return "".join(lines)


def _make_entry(winner, timed, failures, disagreements, fp, info) -> Entry:

    def cfg_json(c):
        return json.loads(config_id(c)) if isinstance(c, Mapping) else repr(c)

    return Entry(
        winner=cfg_json(winner),
        times=[{"config": cfg_json(c), "median_ms": t.median, "min_ms": t.min} for c, t in timed],
        failed=[{"config": cfg_json(c), "reason": r} for c, r in failures],
        disagreed=[{"config": cfg_json(c), "error": e} for c, e in disagreements],
        fingerprint=dict(fp),
        timestamp=time.time(),
        info=dict(info or {}),
    )
