"""Per-kernel tuning state: compile the space, pick a config per call, remember it."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tilus.runtime.workers import run_here
from tilus.tune.dispatch import DispatchTable, Entry
from tilus.tune.failures import describe_failure, is_refusal, no_config_error, summary
from tilus.tune.keys import (
    canonical_json,
    config_id,
    device_fingerprint,
    dispatch_key,
    script_identity,
    tuning_bucket,
    tuning_ints,
)
from tilus.tune.parallel import Progress, _describe, compile_all
from tilus.tune.tuner import TuneResult, TuneWarning, tune


@dataclass
class Selection:
    """The config picked for a tuning key and its loaded launcher.

    Attributes:
        config: The winning config.
        launch: ``launch(*runtime_values)`` runs the winner.
        result: The ``TuneResult`` (None when there was a single config); on a dispatch-table
            hit a ``cached`` one holding the stored failures and disagreements.
        failures: ``(config, reason)`` of configs that failed to compile, load or run (on a
            table hit: as stored by the tuning that made the entry).
    """

    config: dict
    launch: Callable
    result: TuneResult | None = None
    failures: list = field(default_factory=list)


def _is_array(v) -> bool:
    return hasattr(v, "shape") and hasattr(v, "dtype") and not isinstance(v, (int, float))


def clone_arg(v):
    """A copy of an array/tensor argument (same device); other values are returned as is."""
    if not _is_array(v):
        return v
    if hasattr(v, "clone"):
        return v.clone()
    return v.copy()


def _cuda_index(values) -> int | None:
    for v in values:
        dev = getattr(v, "device", None)
        if getattr(dev, "type", None) == "cuda":
            return dev.index or 0
    return None


class Autotuner:
    """Tuning of one ``InstantiatedScript`` for the compiled (CUDA) path.

    ``select(const_args, runtime)`` returns the launcher of the best config for the call:

    1. an in-memory hit on (compile-time args, tuning buckets, device) returns at once;
    2. a dispatch-table hit for this machine builds and loads only the stored winner (the
       stored failures come back in ``Selection.failures``);
    3. otherwise every config is built in parallel (``compile_all``), loaded, cross-checked and
       timed on clones of the call's arguments (``tune``), and the decision is stored.

    ``build(config, const_args)`` and ``load(config, const_args, artifact)`` run in this
    process, one config after another (constructors and transpiling may touch the GPU);
    ``build`` returns the artifact, or is a generator that yields ``tilus.runtime.workers.Job``s
    (e.g. NVRTC on the generated source) which build workers run meanwhile (see
    ``compile_all``). ``load`` returns ``launch(*runtime_values)``.

    A config that fails for a reason other than tilus's refusal (an exception in user code, a
    load or launch error) is named with its reason in a ``TuneWarning``, in the progress line
    and in ``Selection.failures``; when more than half the space fails, a ``TuneWarning`` says
    so before the winner is returned.
    """

    def __init__(
        self,
        instantiated,
        build: Callable[[dict, dict], Any],
        load: Callable[[dict, dict, Any], Callable],
        *,
        table: DispatchTable | None = None,
        workers: int | None = None,
        progress: bool = True,
        interpreter: bool = False,
    ):
        """Tune ``instantiated`` (an ``InstantiatedScript``) with the given build/load steps.

        Args:
            instantiated: The kernel; its ``configs`` are the candidates.
            build: Compiles one config (a function or a generator of jobs, see above).
            load: Turns a build artifact into a launcher.
            table: Where decisions persist; default ``DispatchTable.for_script(cls)``.
            workers, progress: Passed to ``compile_all``.
            interpreter: Timings come from the CPU interpreter (fingerprint ``cpu-interpreter``).
        """
        self.instantiated = instantiated
        self.build, self.load = build, load
        self.table = (
            table if table is not None else DispatchTable.for_script(instantiated.script_cls)
        )
        self.workers, self.progress, self.interpreter = workers, progress, interpreter
        self._fast: dict[tuple, Selection] = {}
        self._identity = script_identity(instantiated)

    def clear(self) -> None:
        """Forget the in-memory decisions (the dispatch table is kept)."""
        self._fast.clear()

    def select(self, const_args: Mapping, runtime) -> Selection:
        """The launcher of the best config for a call.

        Args:
            const_args: Compile-time arguments of the call (from ``InstantiatedScript.bind``).
            runtime: ``(name, annotation, value)`` runtime arguments (from ``bind``); arrays and
                tensors among them are cloned for tuning, never written.
        """
        ints = tuning_ints(runtime)
        values = [v for _, _, v in runtime]
        device = None if self.interpreter else _cuda_index(values)
        fast_key = (
            canonical_json(dict(const_args)),
            tuple(sorted((k, tuning_bucket(v)) for k, v in ints.items())),
            device,
        )
        hit = self._fast.get(fast_key)
        if hit is not None:
            return hit
        sel = self._select(dict(const_args), values, ints, device)
        self._fast[fast_key] = sel
        return sel

    # --- the slow path -------------------------------------------------------------------------
    def _build_one(self, cfg, const_args):
        return self.load(cfg, const_args, run_here(self.build(cfg, const_args)))

    def _select(self, const_args, values, ints, device) -> Selection:
        configs = self.instantiated.configs
        name = self.instantiated.script_cls.__name__
        if len(configs) == 1:
            return Selection(configs[0], self._build_one(configs[0], const_args))
        fp = device_fingerprint(device or 0, interpreter=device is None)
        key = dispatch_key(self._identity, const_args, configs, ints, fp)
        entry = self.table.lookup(key, fp)
        if entry is not None:
            want = config_id(entry.winner)
            cfg = next((c for c in configs if config_id(c) == want), None)
            if cfg is not None:
                try:
                    launch = self._build_one(cfg, const_args)
                except Exception as e:
                    warnings.warn(
                        f"tilus autotune: {name}: the stored winner {want} no longer builds "
                        f"({_describe(e)}); tuning again",
                        TuneWarning,
                        stacklevel=3,
                    )
                else:
                    return _stored_selection(cfg, launch, entry, configs)

        build, load = self.build, self.load
        bar = Progress(len(configs), f"compiling {name}", enabled=self.progress)
        try:
            built = compile_all(
                configs, lambda cfg: build(cfg, const_args), workers=self.workers, progress=bar
            )
            errors, candidates = [], []  # errors: (config, reason, exception)
            for r in built:
                if not r.ok:
                    errors.append((r.config, r.error, r.exception))
                    continue
                try:
                    candidates.append((r.config, load(r.config, const_args, r.value)))
                except Exception as e:  # a load error: reported like a build error
                    errors.append((r.config, describe_failure(e), e))
                    bar.fail_one(errors[-1][1], is_refusal(e))
        finally:
            bar.close()
        failures = [(c, why) for c, why, _ in errors]
        broken = [(c, why) for c, why, e in errors if not is_refusal(e)]
        if broken:
            _warn_broken(name, broken, len(configs))
        if not candidates:
            raise no_config_error(name, errors, fmt=config_id)

        outputs = [i for i, v in enumerate(values) if _is_array(v)]
        result = tune(
            candidates,
            lambda: [clone_arg(v) for v in values],
            outputs=outputs,
            table=self.table,
            key=key,
            fingerprint=fp,
            failed=failures,
            cuda=device is not None,
            info={
                "script": self._identity,
                "const_args": canonical_json(const_args),
                "buckets": canonical_json({k: tuning_bucket(v) for k, v in ints.items()}),
            },
        )
        launch = next(run for cfg, run in candidates if cfg is result.winner)
        lost = len(result.failures) + len(result.disagreements)
        if 2 * lost > len(configs):
            refused = {config_id(c) for c, _, e in errors if is_refusal(e)}
            _warn_most_lost(name, result, len(configs), refused)
        return Selection(result.winner, launch, result, result.failures)


def _warn_broken(name: str, broken, total: int) -> None:
    """One warning naming every config that failed for a reason other than a refusal."""
    lines = "".join(f"\n  {config_id(c)}: {why}" for c, why in broken)
    warnings.warn(
        f"tilus autotune: {name}: {len(broken)} of {total} configs failed for a reason other "
        f"than the compiler's refusal ({summary([(False, w) for _, w in broken])}); they are "
        f"not tuned:{lines}",
        TuneWarning,
        stacklevel=5,
    )


def _warn_most_lost(name: str, result: TuneResult, total: int, refused: set) -> None:
    """The warning before a winner picked from less than half of the space is used
    (``refused``: the ids of the configs that tilus refused)."""
    reasons = [(config_id(c) in refused, why) for c, why in result.failures]
    reasons += [(False, f"wrong outputs ({e})") for _, e in result.disagreements]
    left = total - len(reasons)
    warnings.warn(
        f"tilus autotune: {name}: more than half of the space failed ({len(reasons)} of {total} "
        f"configs: {summary(reasons)}); the winner {config_id(result.winner)} was picked among "
        f"the {left} left and may be far from the best",
        TuneWarning,
        stacklevel=5,
    )


def _stored_selection(cfg, launch, entry: Entry, configs) -> Selection:
    """The Selection of a dispatch-table hit: the stored failures and disagreements come back
    (as the configs of the space where they still are), so a later process can tell why configs
    were dropped without tuning again."""
    by_id = {config_id(c): c for c in configs}

    def restored(items, why):
        out = []
        for item in items:
            if isinstance(item, Mapping) and isinstance(item.get("config"), Mapping):
                c = item["config"]
                out.append((by_id.get(config_id(c), dict(c)), str(item.get(why, ""))))
        return out

    failures = restored(entry.failed, "reason")
    disagreed = restored(entry.disagreed, "error")
    result = TuneResult(cfg, failures=failures, disagreements=disagreed, cached=True, entry=entry)
    return Selection(cfg, launch, result, failures)
