"""SASS inspection of cubins with cuobjdump / nvdisasm: disassembly, resources, opcode counts."""

from __future__ import annotations

import collections
import functools
import os
import re
import shutil
import subprocess
import sys
import tempfile

from tilus.errors import TilusBackendError

# `        /*0060*/              @!P0 S2R R3, SR_CgaCtaId ;` -> "S2R" (modifiers after '.').
_INSTR_RE = re.compile(r"^\s*/\*[0-9a-fA-F]+\*/\s+(?:@!?U?P(?:[0-9]+|T)\s+)?([A-Z][A-Z0-9_]*)")
_FUNC_RE = re.compile(r"^\s*Function\s*(\S+):\s*$")
_RESOURCE_RE = re.compile(r"(REG|STACK|SHARED|LOCAL|CONSTANT\[\d+\]|TEXTURE|SURFACE|SAMPLER):(\d+)")
_SPILL_RE = re.compile(
    r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads"
)


def _wheel_bin_dirs() -> list[str]:
    """Directories where NVIDIA's PyPI wheels put their executables (nvidia/*/bin)."""
    dirs = []
    try:
        import nvidia  # namespace package of the nvidia-* wheels
    except ImportError:
        return dirs
    for root in list(getattr(nvidia, "__path__", [])):
        # CUDA 13 wheels share nvidia/cu13/bin; older ones use nvidia/cuda_<tool>/bin.
        for sub in sorted(os.listdir(root)):
            candidate = os.path.join(root, sub, "bin")
            if os.path.isdir(candidate):
                dirs.append(candidate)
    return dirs


@functools.cache
def find_tool(name: str) -> str:
    """Locate a CUDA binary tool such as "cuobjdump" or "nvdisasm".

    The nvidia-cuda-* PyPI wheels are searched first (their version matches NVRTC's), then
    `$CUDA_HOME/bin`, then PATH.

    Args:
        name: The executable's name.

    Returns:
        The absolute path of the executable.

    Raises:
        TilusBackendError: The tool is not found anywhere.
    """
    exe = name + (".exe" if sys.platform == "win32" else "")
    candidates = list(_wheel_bin_dirs())
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            candidates.append(os.path.join(os.environ[var], "bin"))
    for d in candidates:
        path = os.path.join(d, exe)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    found = shutil.which(name)
    if found:
        return found
    raise TilusBackendError(
        f"{name} not found: install nvidia-cuda-{name} (the 'cuda' extra) or put it on PATH"
    )


def _run_on_cubin(tool: str, flags: list[str], cubin: bytes) -> str:
    """Run a tool on the cubin written to a temporary file; return stdout."""
    with tempfile.TemporaryDirectory(prefix="tilus-sass-") as tmp:
        path = os.path.join(tmp, "kernel.cubin")
        with open(path, "wb") as f:
            f.write(cubin)
        proc = subprocess.run(
            [find_tool(tool), *flags, path], capture_output=True, text=True, timeout=120
        )
    if proc.returncode != 0:
        raise TilusBackendError(f"{tool} {' '.join(flags)} failed: {proc.stderr.strip()}")
    return proc.stdout


def disassemble(cubin: bytes) -> str:
    """Disassemble a cubin to SASS text.

    Uses `cuobjdump --dump-sass`, falling back to `nvdisasm -c` if cuobjdump fails.

    Args:
        cubin: The device binary.

    Returns:
        The SASS listing.
    """
    try:
        return _run_on_cubin("cuobjdump", ["--dump-sass"], cubin)
    except TilusBackendError as first:
        try:
            return _run_on_cubin("nvdisasm", ["-c"], cubin)
        except TilusBackendError as second:
            raise TilusBackendError(f"{first}\n{second}") from second


def parse_resource_usage(text: str) -> dict[str, dict[str, int]]:
    """Parse `cuobjdump --dump-resource-usage` output into {function: {resource: value}}."""
    result: dict[str, dict[str, int]] = {}
    current = None
    for line in text.splitlines():
        m = _FUNC_RE.match(line)
        if m:
            current = m.group(1)
            result[current] = {}
            continue
        if current is not None:
            for key, value in _RESOURCE_RE.findall(line):
                result[current][key] = int(value)
    return result


def parse_spills(log: str) -> dict[str, int]:
    """Sum the stack frame and spill bytes a `ptxas -v` log reports (empty if none)."""
    matches = _SPILL_RE.findall(log)
    if not matches:
        return {}
    return {
        "stack_frame_bytes": sum(int(m[0]) for m in matches),
        "spill_store_bytes": sum(int(m[1]) for m in matches),
        "spill_load_bytes": sum(int(m[2]) for m in matches),
    }


def resource_usage(cubin: bytes, function: str | None = None, log: str = "") -> dict:
    """Report the resources a kernel uses.

    Args:
        cubin: The device binary.
        function: The kernel to report; by default the first one in the cubin.
        log: Optionally a compile log from `--ptxas-options=-v`, to add the spill bytes.

    Returns:
        A dict with function, registers, shared_bytes (static), local_bytes, stack_bytes and
        constant_bytes (bank 0, i.e. parameters), plus stack_frame_bytes, spill_store_bytes
        and spill_load_bytes when the log reports them.
    """
    per_function = parse_resource_usage(
        _run_on_cubin("cuobjdump", ["--dump-resource-usage"], cubin)
    )
    if not per_function:
        raise TilusBackendError("cuobjdump reported no functions in the cubin")
    if function is None:
        function = next(iter(per_function))
    if function not in per_function:
        raise TilusBackendError(f"no function {function!r} in the cubin: {list(per_function)}")
    res = per_function[function]
    out = {
        "function": function,
        "registers": res.get("REG", 0),
        "shared_bytes": res.get("SHARED", 0),
        "local_bytes": res.get("LOCAL", 0),
        "stack_bytes": res.get("STACK", 0),
        "constant_bytes": res.get("CONSTANT[0]", 0),
    }
    out.update(parse_spills(log))
    return out


def sass_opcodes(sass: str) -> collections.Counter:
    """Count the opcodes of a SASS listing, without modifiers ("HGMMA.64x64x16..." -> "HGMMA").

    Args:
        sass: Text from `disassemble` (cuobjdump or nvdisasm format).

    Returns:
        A Counter from opcode to its static number of occurrences.
    """
    counts: collections.Counter = collections.Counter()
    for line in sass.splitlines():
        m = _INSTR_RE.match(line)
        if m:
            counts[m.group(1)] += 1
    return counts
