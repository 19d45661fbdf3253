"""Gating and helpers for the tilus.backends.cuda tests (compile-only on CPU; GPU tests marked)."""

from __future__ import annotations

import importlib.util
import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
# Let `pytest tests/cuda` work from a plain checkout.
if str(ROOT) not in sys.path:  # pragma: no cover - depends on the setup
    sys.path.insert(0, str(ROOT))


def _nvrtc_available() -> bool:
    try:
        from tilus.runtime.nvrtc import nvrtc_version

        nvrtc_version()
        return True
    except Exception:  # noqa: BLE001 - any failure means "no NVRTC here"
        return False


def _gpu_available() -> bool:
    if importlib.util.find_spec("torch") is None:
        return False
    import torch

    return bool(torch.cuda.is_available()) and torch.cuda.get_device_capability()[0] == 9


needs_nvrtc = pytest.mark.skipif(not _nvrtc_available(), reason="NVRTC is not installed")
needs_gpu = pytest.mark.skipif(not _gpu_available(), reason="needs torch with a Hopper GPU")


def compile_sm90a(source: str):
    """Compile with NVRTC for sm_90a; return (CompiledBinary, SASS opcode Counter)."""
    from tilus.runtime import nvrtc, sass

    binary = nvrtc.compile_cuda(source, arch="sm_90a")
    return binary, sass.sass_opcodes(sass.disassemble(binary.cubin))
