"""In-process compilation of generated CUDA C++ to a cubin with NVRTC."""

from __future__ import annotations

import functools
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass

from tilus.errors import TilusBackendError

# Flags every tilus kernel is compiled with. -lineinfo costs nothing at run time and lets
# profilers and compute-sanitizer map SASS back to the generated source.
_BASE_OPTIONS = ("-std=c++17", "-lineinfo")

# At most this many offending source lines are quoted in an error message.
_MAX_QUOTED_LINES = 20


@dataclass(frozen=True)
class CompiledBinary:
    """The result of compiling one CUDA source.

    Attributes:
        cubin: The device binary (ELF), loadable with cuModuleLoadData.
        ptx: The PTX text, when it was asked for; otherwise None.
        log: The compiler's log (warnings), possibly empty.
        seconds: Wall time spent in the compiler.
        compiler: Which compiler produced it, e.g. "nvrtc-13.5" or "nvcc-13.0".
        options: The full option list the compiler was given.
    """

    cubin: bytes
    ptx: str | None
    log: str
    seconds: float
    compiler: str
    options: tuple[str, ...]


def _nvrtc_module():
    # Imported lazily so that `import tilus` works on machines without cuda-bindings.
    try:
        from cuda.bindings import nvrtc
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise TilusBackendError(
            "NVRTC is unavailable: install the 'cuda' extra (cuda-bindings, nvidia-cuda-nvrtc)"
        ) from e
    return nvrtc


def _check(result: tuple, what: str):
    """Unwrap an NVRTC `(nvrtcResult, *values)` tuple, raising on failure."""
    nvrtc = _nvrtc_module()
    err, *values = result
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        _, msg = nvrtc.nvrtcGetErrorString(err)
        raise TilusBackendError(f"{what} failed: {msg.decode(errors='replace')}")
    if not values:
        return None
    return values[0] if len(values) == 1 else tuple(values)


@functools.cache
def nvrtc_version() -> tuple[int, int]:
    """Return the (major, minor) version of the loaded NVRTC library."""
    nvrtc = _nvrtc_module()
    major, minor = _check(nvrtc.nvrtcVersion(), "nvrtcVersion")
    return int(major), int(minor)


def quote_source_lines(log: str, source: str, name: str) -> str:
    """Quote the source lines that a compiler log refers to as `name(LINE)`.

    Args:
        log: The compiler log.
        source: The compiled source text.
        name: The file name the source was compiled under.

    Returns:
        One `name:LINE: <text>` line per distinct referenced line, in log order.
    """
    lines = source.splitlines()
    seen: list[int] = []
    # nvrtc writes `kernel.cu(12): error: ...`; nvcc writes the same with a path prefix.
    for match in re.finditer(re.escape(name) + r"\((\d+)\)", log):
        lineno = int(match.group(1))
        if lineno not in seen and 1 <= lineno <= len(lines):
            seen.append(lineno)
    quoted = [f"  {name}:{n}: {lines[n - 1].strip()}" for n in seen[:_MAX_QUOTED_LINES]]
    return "\n".join(quoted)


def compile_error(compiler: str, log: str, source: str, name: str) -> TilusBackendError:
    """Build the error raised when a compiler rejects generated source.

    Args:
        compiler: The compiler's name, for the message.
        log: The compiler log.
        source: The compiled source text.
        name: The file name the source was compiled under.

    Returns:
        A TilusBackendError carrying the log and the quoted offending lines.
    """
    msg = f"{compiler} failed to compile the generated CUDA source:\n{log.strip()}"
    quoted = quote_source_lines(log, source, name)
    if quoted:
        msg += "\noffending source lines:\n" + quoted
    return TilusBackendError(msg)


def _run_nvrtc(source: str, name: str, options: tuple[str, ...], want: str) -> tuple[bytes, str]:
    """Compile once; return (cubin bytes or PTX bytes, log). `want` is "cubin" or "ptx"."""
    nvrtc = _nvrtc_module()
    prog = _check(
        nvrtc.nvrtcCreateProgram(source.encode(), name.encode(), 0, [], []),
        "nvrtcCreateProgram",
    )
    try:
        opts = [o.encode() for o in options]
        (status,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        size = _check(nvrtc.nvrtcGetProgramLogSize(prog), "nvrtcGetProgramLogSize")
        # NVRTC writes into the buffer: it must be a fresh mutable one. (`b" " * 1` is CPython's
        # shared one-byte object; writing into it once turned every later single space of
        # newly compiled Python code into NUL.)
        buf = bytearray(size)
        _check(nvrtc.nvrtcGetProgramLog(prog, buf), "nvrtcGetProgramLog")
        log = bytes(buf).rstrip(b"\x00").decode(errors="replace")
        if status != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise compile_error(f"nvrtc-{'.'.join(map(str, nvrtc_version()))}", log, source, name)
        if want == "cubin":
            size = _check(nvrtc.nvrtcGetCUBINSize(prog), "nvrtcGetCUBINSize")
            buf = bytearray(size)
            _check(nvrtc.nvrtcGetCUBIN(prog, buf), "nvrtcGetCUBIN")
            out = bytes(buf)
        else:
            size = _check(nvrtc.nvrtcGetPTXSize(prog), "nvrtcGetPTXSize")
            buf = bytearray(size)
            _check(nvrtc.nvrtcGetPTX(prog, buf), "nvrtcGetPTX")
            out = bytes(buf).rstrip(b"\x00")
        return out, log
    finally:
        # Always release the program, also when compilation failed.
        nvrtc.nvrtcDestroyProgram(prog)


def compile_cuda(
    source: str,
    *,
    arch: str = "sm_90a",
    options: Sequence[str] = (),
    name: str = "kernel.cu",
    want_ptx: bool = False,
) -> CompiledBinary:
    """Compile self-contained CUDA C++ source to a cubin with NVRTC, in process.

    Args:
        source: The CUDA C++ source; it must not include headers that need a CUDA include path.
        arch: A real target architecture such as "sm_90a"; NVRTC then emits SASS directly.
        options: Extra NVRTC options appended after the defaults.
        name: The file name the source is compiled under (it appears in the log).
        want_ptx: Also produce PTX, with a second compile for the matching virtual arch.

    Returns:
        The compiled binary, with the log, wall time and option list.

    Raises:
        TilusBackendError: NVRTC is missing or rejected the source; the message holds the
            log and the offending source lines.
    """
    if not arch.startswith("sm_"):
        raise TilusBackendError(
            f"compile_cuda needs a real architecture like 'sm_90a', got {arch!r}"
        )
    opts = (f"--gpu-architecture={arch}", *_BASE_OPTIONS, *options)
    start = time.perf_counter()
    cubin, log = _run_nvrtc(source, name, opts, "cubin")
    ptx = None
    if want_ptx:
        # A real-arch compile need not keep PTX around, so ask for the virtual arch explicitly.
        ptx_opts = (f"--gpu-architecture=compute_{arch[3:]}", *_BASE_OPTIONS, *options)
        ptx_bytes, _ = _run_nvrtc(source, name, ptx_opts, "ptx")
        ptx = ptx_bytes.decode(errors="replace")
    seconds = time.perf_counter() - start
    major, minor = nvrtc_version()
    return CompiledBinary(
        cubin=bytes(cubin),
        ptx=ptx,
        log=log,
        seconds=seconds,
        compiler=f"nvrtc-{major}.{minor}",
        options=opts,
    )
