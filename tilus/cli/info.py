"""``python -m tilus info``: versions, the GPU, the cache and which backends are usable here."""

from __future__ import annotations

import json
import os
import platform
import sys

HELP = "versions, GPUs, the cache directory and which backends are usable"


def add_arguments(p) -> None:
    """Options of ``info``."""
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")


def _try(fn):
    """``(value, None)`` or ``(None, reason)``: nothing here may fail (no GPU, no torch...)."""
    try:
        return fn(), None
    except Exception as e:  # noqa: BLE001 - reported as the reason it is unavailable
        text = str(e).strip().splitlines()
        return None, f"{type(e).__name__}: {text[0] if text else ''}".rstrip(": ")


def _torch():
    import torch

    return {
        "version": torch.__version__,
        "cuda_build": getattr(torch.version, "cuda", None),
        "cuda_available": bool(torch.cuda.is_available()),
    }


def _cuda_bindings():
    import cuda.bindings

    return getattr(cuda.bindings, "__version__", "unknown")


def _nvrtc():
    from tilus.runtime.nvrtc import nvrtc_version

    return ".".join(map(str, nvrtc_version()))


def _driver():
    from tilus.runtime.driver import check, cuda_driver

    drv = cuda_driver()
    ver = int(check(drv.cuDriverGetVersion(), "cuDriverGetVersion"))
    return f"{ver // 1000}.{ver % 1000 // 10}"


def _gpus():
    from tilus.runtime.driver import check, cuda_driver, device_properties

    drv = cuda_driver()
    check(drv.cuInit(0), "cuInit")
    out = []
    for i in range(int(check(drv.cuDeviceGetCount(), "cuDeviceGetCount"))):
        p = device_properties(i)
        out.append(
            {
                "index": i,
                "name": p["name"],
                "compute_capability": f"{p['cc_major']}.{p['cc_minor']}",
                "sm_count": p["sm_count"],
            }
        )
    return out


def _sass_tool():
    from tilus.runtime.sass import find_tool

    return find_tool("cuobjdump")


def collect() -> dict:
    """Everything ``info`` reports, as a JSON-serialisable dict; never raises."""
    import numpy

    from tilus import version
    from tilus.runtime.cache import cache_dir
    from tilus.tune.dispatch import dispatch_dir

    facts: dict = {
        "tilus": {"version": version.__version__, "path": os.path.dirname(version.__file__)},
        "python": {"version": platform.python_version(), "executable": sys.executable},
        "numpy": numpy.__version__,
    }
    for name, fn in (
        ("torch", _torch),
        ("cuda_bindings", _cuda_bindings),
        ("nvrtc", _nvrtc),
        ("driver", _driver),
        ("gpus", _gpus),
        ("cuobjdump", _sass_tool),
    ):
        value, why = _try(fn)
        facts[name] = value if why is None else {"unavailable": why}
    facts["cache_dir"] = str(cache_dir())
    facts["dispatch_dir"] = str(dispatch_dir())
    facts["backends"] = _backends(facts)
    return facts


def _ok(v) -> bool:
    return v is not None and not (isinstance(v, dict) and "unavailable" in v)


def _backends(f: dict) -> dict:
    """Which backend is usable, and if not, why."""
    torch_ok = _ok(f["torch"])
    hopper = [g for g in f["gpus"] if g["compute_capability"] == "9.0"] if _ok(f["gpus"]) else []
    if not _ok(f["nvrtc"]):
        gpu = "no: NVRTC is unavailable (pip install -e '.[cuda]')"
    elif not torch_ok:
        gpu = "no: torch is not installed (kernels launch on torch CUDA tensors)"
    elif not f["torch"]["cuda_available"]:
        gpu = "no: this torch build sees no CUDA device"
    elif not hopper:
        gpu = "no: no sm_90 (Hopper) GPU"
    else:
        gpu = f"yes ({len(hopper)} Hopper GPU{'s' if len(hopper) > 1 else ''})"
    return {
        "interpreter": "yes (NumPy arrays" + (", CPU torch tensors)" if torch_ok else ")"),
        "CUDA compile": "yes" if _ok(f["nvrtc"]) else "no: no NVRTC",
        "CUDA launch": gpu,
        "SASS tools": "yes" if _ok(f["cuobjdump"]) else "no: cuobjdump not found",
    }


def _text(v) -> str:
    if isinstance(v, dict) and "unavailable" in v:
        return f"unavailable ({v['unavailable']})"
    if isinstance(v, dict):
        return ", ".join(f"{k} {x}" for k, x in v.items())
    return str(v)


def run(args) -> int:
    """Print the facts (text or JSON)."""
    facts = collect()
    if args.json:
        print(json.dumps(facts, indent=1))
        return 0
    rows = [
        ("tilus", f"{facts['tilus']['version']} ({facts['tilus']['path']})"),
        ("python", f"{facts['python']['version']} ({facts['python']['executable']})"),
        ("numpy", facts["numpy"]),
        ("torch", _text(facts["torch"])),
        ("cuda-bindings", _text(facts["cuda_bindings"])),
        ("NVRTC", _text(facts["nvrtc"])),
        ("CUDA driver", _text(facts["driver"])),
    ]
    gpus = facts["gpus"]
    if isinstance(gpus, list):
        rows.append(("GPUs", str(len(gpus)) if gpus else "none"))
        for g in gpus:
            rows.append(
                (
                    f"  cuda:{g['index']}",
                    f"{g['name']} (sm_{g['compute_capability'].replace('.', '')}, {g['sm_count']} SMs)",
                )
            )
    elif not _ok(facts["driver"]):
        rows.append(("GPUs", "none (no CUDA driver)"))
    else:
        rows.append(("GPUs", _text(gpus)))
    rows += [
        ("cuobjdump", _text(facts["cuobjdump"])),
        ("cache dir", facts["cache_dir"]),
        ("dispatch dir", facts["dispatch_dir"]),
        ("backends", ""),
    ]
    rows += [(f"  {k}", v) for k, v in facts["backends"].items()]
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"{k:<{width}}  {v}".rstrip())
    return 0
