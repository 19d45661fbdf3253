"""Compilation of generated CUDA C++ with an nvcc subprocess, used only when asked for."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Sequence

from tilus.errors import TilusBackendError
from tilus.runtime.nvrtc import CompiledBinary, compile_error

_BASE_OPTIONS = ("-std=c++17", "-lineinfo")


def find_nvcc() -> str | None:
    """Locate nvcc: `$CUDA_HOME/bin/nvcc` (or `$CUDA_PATH`), else PATH; None if absent."""
    for var in ("CUDA_HOME", "CUDA_PATH"):
        root = os.environ.get(var)
        if root:
            candidate = os.path.join(root, "bin", "nvcc")
            if os.access(candidate, os.X_OK):
                return candidate
    return shutil.which("nvcc")


def nvcc_version(nvcc: str) -> str:
    """Return nvcc's release as "MAJOR.MINOR" (e.g. "13.0"), or "unknown"."""
    try:
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    match = re.search(r"release (\d+\.\d+)", out)
    return match.group(1) if match else "unknown"


def compile_cuda_nvcc(
    source: str,
    *,
    arch: str = "sm_90a",
    options: Sequence[str] = (),
    name: str = "kernel.cu",
) -> CompiledBinary:
    """Compile self-contained CUDA C++ source to a cubin with an nvcc subprocess.

    Args:
        source: The CUDA C++ source.
        arch: A real target architecture such as "sm_90a".
        options: Extra nvcc options appended after the defaults.
        name: The file name the source is written to (it appears in the log).

    Returns:
        The compiled binary (no PTX), with the log, wall time and option list.

    Raises:
        TilusBackendError: nvcc is missing or rejected the source.
    """
    nvcc = find_nvcc()
    if nvcc is None:
        raise TilusBackendError("nvcc was requested but is not found (set CUDA_HOME or PATH)")
    if not arch.startswith("sm_"):
        raise TilusBackendError(f"compile_cuda_nvcc needs a real architecture, got {arch!r}")
    opts = (
        "-cubin",
        "-gencode",
        f"arch=compute_{arch[3:]},code={arch}",
        *_BASE_OPTIONS,
        *options,
    )
    with tempfile.TemporaryDirectory(prefix="tilus-nvcc-") as tmp:
        src_path = os.path.join(tmp, name)
        out_path = os.path.join(tmp, "kernel.cubin")
        with open(src_path, "w") as f:
            f.write(source)
        start = time.perf_counter()
        # Run inside the temp dir with a relative name so the log says `kernel.cu(LINE)`.
        proc = subprocess.run(
            [nvcc, *opts, "-o", out_path, name], cwd=tmp, capture_output=True, text=True
        )
        seconds = time.perf_counter() - start
        log = (proc.stdout + proc.stderr).strip()
        compiler = f"nvcc-{nvcc_version(nvcc)}"
        if proc.returncode != 0 or not os.path.exists(out_path):
            raise compile_error(compiler, log, source, name)
        with open(out_path, "rb") as f:
            cubin = f.read()
    return CompiledBinary(
        cubin=cubin, ptx=None, log=log, seconds=seconds, compiler=compiler, options=opts
    )
