"""Tuning keys: runtime-integer buckets, the device fingerprint and the dispatch-table key."""

from __future__ import annotations

import functools
import hashlib
import json
import math
import re
from collections.abc import Mapping, Sequence

CPU_DEVICE = "cpu-interpreter"


def tuning_bucket(v: int) -> int:
    """Round a runtime integer up to its tuning bucket (two buckets per power of two).

    ``v`` is rounded up to a multiple of ``2 ** (v.bit_length() - 2)``: 4096 -> 4096,
    5000 -> 6144, 10240 -> 12288, 14336 -> 16384. Values 0..3 are their own bucket; a negative
    value is bucketed by its magnitude and keeps its sign.
    """
    v = int(v)
    if v < 0:
        return -tuning_bucket(-v)
    step = 1 << max(v.bit_length() - 2, 0)
    return -(-v // step) * step


def tuning_ints(runtime) -> dict[str, int]:
    """The integer-typed runtime parameters of a bound call, by name.

    Args:
        runtime: ``(name, annotation, value)`` triples, as returned by
            ``InstantiatedScript.bind``; an entry counts when its annotation is an integer
            ``DataType`` (pointers, floats and tensors are ignored).
    """
    out = {}
    for name, ann, value in runtime:
        is_int = getattr(ann, "is_integer", None)
        if callable(is_int) and is_int() and not isinstance(value, bool):
            try:
                out[name] = int(value)
            except (TypeError, ValueError):
                continue
    return out


def _torch_info() -> dict:
    try:
        import torch
    except Exception:
        return {"torch": None}
    return {"torch": torch.__version__, "torch_cuda": getattr(torch.version, "cuda", None)}


def _tilus_version() -> str:
    from tilus import version  # read per call: a test pretends to be another version

    return str(version.__version__)


def _driver_info(index: int) -> dict | None:
    """Device facts from the CUDA driver (cuda-bindings), or None when there is no GPU."""
    try:
        from tilus.runtime import driver as drvmod

        drv = drvmod.cuda_driver()
        drvmod.check(drv.cuInit(0), "cuInit")
        if int(drvmod.check(drv.cuDeviceGetCount(), "cuDeviceGetCount")) <= index:
            return None
        props = drvmod.device_properties(index)
        info = {
            "device": props["name"],
            "compute_capability": f"{props['cc_major']}.{props['cc_minor']}",
            "sm_count": props["sm_count"],
        }
        ver = int(drvmod.check(drv.cuDriverGetVersion(), "cuDriverGetVersion"))
        info["driver"] = f"{ver // 1000}.{ver % 1000 // 10}"
    except Exception:
        return None
    try:
        from tilus.runtime.nvrtc import nvrtc_version

        info["nvrtc"] = ".".join(map(str, nvrtc_version()))
    except Exception:
        info["nvrtc"] = None
    return info


def _torch_device_info(index: int) -> dict | None:
    try:
        import torch

        if not torch.cuda.is_available() or torch.cuda.device_count() <= index:
            return None
        major, minor = torch.cuda.get_device_capability(index)
        return {
            "device": torch.cuda.get_device_name(index),
            "compute_capability": f"{major}.{minor}",
            "sm_count": torch.cuda.get_device_properties(index).multi_processor_count,
            "driver": None,
            "nvrtc": None,
        }
    except Exception:
        return None


@functools.cache
def _gpu_fingerprint(index: int) -> dict | None:
    info = _driver_info(index) or _torch_device_info(index)
    if info is None:
        return None
    return {**info, **_torch_info(), "tilus": _tilus_version()}


def device_fingerprint(device: int = 0, *, interpreter: bool | None = None) -> dict:
    """Describe the machine that timings are measured on; tuning results only carry over to
    an identical fingerprint.

    Args:
        device: The CUDA device ordinal.
        interpreter: True for the CPU interpreter; None = the interpreter when the
            ``interpret`` option is set or no GPU is visible.

    Returns:
        A JSON-serialisable dict: ``device`` (GPU name, or ``"cpu-interpreter"``),
        ``compute_capability``, ``sm_count``, ``driver``, ``nvrtc``, ``torch``, ``torch_cuda``
        and ``tilus`` (versions; None where unknown).
    """
    if interpreter is None:
        from tilus.option import get_option

        interpreter = bool(get_option("interpret"))
    gpu = None if interpreter else _gpu_fingerprint(device)
    if gpu is not None:
        return dict(gpu)
    return {"device": CPU_DEVICE, **_torch_info(), "tilus": _tilus_version()}


def fingerprint_matches(saved: Mapping | None, current: Mapping) -> bool:
    """Whether a saved fingerprint describes the current machine (a saved ``"*"`` matches
    anything, as does a saved ``"*"`` in place of the whole fingerprint)."""
    if saved == "*":
        return True
    if not isinstance(saved, Mapping):
        return False
    keys = set(saved) | set(current)
    return all(saved.get(k) == "*" or saved.get(k) == current.get(k) for k in keys)


def _plain(v):
    """A JSON-friendly, order-independent form of a value."""
    if isinstance(v, Mapping):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, bool) or v is None or isinstance(v, (int, str)):
        return v
    if isinstance(v, float):
        return v if math.isfinite(v) else repr(v)
    if hasattr(v, "item") and callable(v.item):  # NumPy / torch scalars
        try:
            return _plain(v.item())
        except Exception:
            pass
    name = getattr(v, "name", None)  # tilus DataTypes and similar named objects
    if isinstance(name, str):
        return f"{type(v).__name__}:{name}"
    return repr(v)


def canonical_json(v) -> str:
    """Compact JSON with sorted keys: the same value always gives the same text."""
    return json.dumps(_plain(v), sort_keys=True, separators=(",", ":"))


def config_id(config: Mapping) -> str:
    """The canonical text of one config (how configs are compared and stored)."""
    return canonical_json(dict(config))


def dispatch_key(
    script_id: str,
    const_args: Mapping,
    config_space: Sequence[Mapping],
    runtime_ints: Mapping[str, int] | Sequence[int],
    fingerprint: Mapping | None = None,
) -> str:
    """The key of one tuning decision in a dispatch table.

    Two calls share a key exactly when they have the same script, compile-time arguments,
    set of configs, tuning buckets of their runtime integers and device fingerprint.

    Args:
        script_id: Identifies the kernel (class and constructor arguments), e.g.
            ``script_identity(instantiated)``.
        const_args: The compile-time arguments of the call.
        config_space: The candidate configs (their order does not matter).
        runtime_ints: The integer runtime arguments, by name or in order; they are bucketed
            with ``tuning_bucket``.
        fingerprint: The machine; defaults to ``device_fingerprint()``.

    Returns:
        32 hex digits of the SHA-256 of the canonical JSON of all of the above.
    """
    if isinstance(runtime_ints, Mapping):
        buckets = {str(k): tuning_bucket(v) for k, v in runtime_ints.items()}
    else:
        buckets = [tuning_bucket(v) for v in runtime_ints]
    doc = {
        "script": str(script_id),
        "const": dict(const_args),
        "space": sorted(config_id(c) for c in config_space),
        "buckets": buckets,
        "fingerprint": dict(fingerprint if fingerprint is not None else device_fingerprint()),
    }
    protocol = _tuning_protocol()
    if protocol:  # only a non-default protocol joins the key (existing tables stay valid)
        doc["protocol"] = protocol
    return hashlib.sha256(canonical_json(doc).encode()).hexdigest()[:32]


def _tuning_protocol() -> dict:
    """The tuning options that change which config wins, where they differ from the default:
    a winner timed under another L2 flush is not the same decision."""
    from tilus.option import get_option

    flush = get_option("tune_flush")
    return {} if flush == "dirty" else {"flush": str(flush)}


def script_identity(instantiated) -> str:
    """A stable identity of an instantiated Script: module, class and constructor arguments."""
    cls = instantiated.script_cls
    ctor = {"args": list(instantiated.args), "kwargs": dict(instantiated.kwargs)}
    return f"{cls.__module__}.{cls.__qualname__}{canonical_json(ctor)}"


def script_file_name(cls_or_name) -> str:
    """A file-system-safe snake-case stem for a Script class (``MatmulV4`` -> ``matmul_v4``)."""
    name = cls_or_name if isinstance(cls_or_name, str) else cls_or_name.__qualname__
    name = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()
    return re.sub(r"[^a-z0-9_.-]+", "_", name).strip("._") or "script"
