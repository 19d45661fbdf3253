"""Compile generated kernels with NVRTC through the on-disk artifact cache."""

from __future__ import annotations

import functools
import hashlib
import pathlib
from dataclasses import dataclass, field

from tilus.backends.cuda.codegen.kernel import CODEGEN_VERSION, KernelSource, generate

#: Extra NVRTC options: -v makes ptxas report registers and spills in the log; 177 is
#: "variable declared but never referenced" (views the program builds and does not use).
NVRTC_OPTIONS = ("--ptxas-options=-v", "--diag-suppress=177")


@functools.cache
def codegen_version() -> str:
    """CODEGEN_VERSION plus a hash of the sources that decide the generated code: the CUDA
    backend (layouts, code generation, prelude, PTX), the IR and the passes."""
    pkg = pathlib.Path(__file__).resolve().parents[3]
    h = hashlib.sha256()
    files = []
    for sub in ("backends/cuda", "ir", "passes"):
        files += sorted((pkg / sub).rglob("*.py"))
    for f in files:
        if f.is_file():
            h.update(f.read_bytes())
    return f"{CODEGEN_VERSION}+{h.hexdigest()[:12]}"


@dataclass
class CompiledKernel:
    """One compiled config: the source, cubin, resource usage and NVRTC time.

    Attributes:
        config: the autotune configuration.
        kernel: the generated source and launch facts.
        cubin: the binary for the target (SASS of its architecture).
        log: the NVRTC/ptxas log.
        compile_seconds: NVRTC wall time when it was compiled (also for cache hits).
        cached: True when the artifacts came from the cache.
        resources: registers, shared/local/stack bytes, spills (``tilus.runtime.sass``).
        ptx: the PTX, when asked for with ``tilus.option.keep_ptx(True)`` and always for a
            target other than sm_90a (a newer GPU loads it through the driver's PTX JIT).
        compiled_in: the pid of the process that ran NVRTC (a build worker, or this one);
            None for a cache hit.
        arch: the target architecture it was built for ("sm_90a").
        loaded_from: per device index, "cubin" or "ptx" (what :meth:`function` loaded).
    """

    config: dict
    kernel: KernelSource
    cubin: bytes
    log: str
    compile_seconds: float
    cached: bool
    resources: dict = field(default_factory=dict)
    ptx: str | None = None
    compiled_in: int | None = None
    arch: str = "sm_90a"
    loaded_from: dict = field(default_factory=dict)
    _modules: dict = field(default_factory=dict, repr=False)

    @property
    def source(self) -> str:
        """The CUDA C++ source."""
        return self.kernel.source

    @property
    def wgmma_serialized(self) -> bool:
        """ptxas reported that it serialized the kernel's wgmma (each waits for the previous)."""
        return _SERIALIZED in self.log

    @property
    def name(self) -> str:
        """The kernel's ``extern "C"`` name."""
        return self.kernel.name

    def sass(self) -> str:
        """The SASS listing of the cubin (needs cuobjdump)."""
        from tilus.runtime.sass import disassemble

        return disassemble(self.cubin)

    def function(self, device_index: int):
        """The loaded kernel on a device (loaded once, dynamic shared memory limit raised)."""
        fn = self._modules.get(device_index)
        if fn is None:
            from tilus.runtime.driver import Module, ensure_context

            ensure_context(device_index)
            image, self.loaded_from[device_index] = self._image(device_index)
            fn = Module.load(image).function(self.name)
            if self.kernel.smem_bytes > 48 * 1024:
                fn.set_max_dynamic_shared_memory(self.kernel.smem_bytes)
            self._modules[device_index] = fn
        return fn

    def _image(self, device_index: int) -> tuple[bytes, str]:
        """The cubin where the device runs its SASS (same compute capability, as SASS of an
        ``a`` target runs only there, and a minor at least its own otherwise); else the PTX,
        which the driver compiles for the device when loading it."""
        from tilus.errors import TilusBackendError
        from tilus.runtime.driver import device_properties
        from tilus.target import lookup

        props = device_properties(device_index)
        have = (props["cc_major"], props["cc_minor"])
        t = lookup(self.arch)
        need = t.compute_capability
        if have == need or (t.feature_suffix == "" and have[0] == need[0] and have > need):
            return self.cubin, "cubin"
        if self.ptx is None or have < need:
            raise TilusBackendError(
                f"{self.name} was built for {self.arch}; the GPU (compute capability "
                f"{have[0]}.{have[1]}) cannot run it"
            )
        return self.ptx.encode() + b"\0", "ptx"


def _resources(cubin: bytes, name: str, log: str) -> dict:
    try:
        from tilus.runtime.sass import resource_usage

        return resource_usage(cubin, name, log)
    except Exception as e:  # noqa: BLE001 - cuobjdump missing: report what we know
        from tilus.runtime.sass import parse_spills

        return {"function": name, "error": str(e), **parse_spills(log)}


#: ptxas info C7514-C7520: "Potential Performance Loss: wgmma.mma_async instructions are
#: serialized due to ..." (the reason follows).
_SERIALIZED = "wgmma.mma_async instructions are serialized"


def _warn_serialized(ks, log: str) -> None:
    import warnings

    from tilus.errors import TilusPerformanceWarning

    for line in log.splitlines():
        if _SERIALIZED in line:
            reason = line.split("Potential Performance Loss:", 1)[-1].strip()
            warnings.warn(
                f"{ks.name}: ptxas serialized every wgmma of the kernel, so no wgmma group "
                f"overlaps another: {reason}",
                TilusPerformanceWarning,
                stacklevel=3,
            )
            return


def _check_setmaxnreg(program, resources: dict) -> None:
    """``setmaxnreg.dec`` below a count must start from at least that count: refuse a lowering
    to more registers than ptxas gave the kernel (undefined behaviour on the GPU)."""
    from tilus.errors import TilusCompileError
    from tilus.ir import inst as I
    from tilus.passes.register_budget import entry_registers
    from tilus.passes.walk import instructions

    have = resources.get("registers")
    if not have:
        return
    start = entry_registers(program.fn.num_threads)
    for stmt, inst in instructions(program.fn.body):
        if isinstance(inst, I.SetMaxNReg) and have < inst.count < start:
            raise TilusCompileError(
                f"setmaxnreg {inst.count} would lower the register count, but ptxas gave the "
                f"kernel {have} registers per thread: ask for at most {have} here",
                stmt.loc,
            )


def build(program, config: dict, *, arch="sm_90a", cache=None) -> CompiledKernel:
    """Generate and compile one program for target ``arch`` (a ``tilus.target.Target`` or its
    name; cache hit: no NVRTC call).

    Raises:
        TilusCompileError: no CUDA lowering for a construct (names the user's line).
        TilusBackendError: NVRTC failed (log attached).
    """
    from tilus.runtime.workers import run_here

    return run_here(build_steps(program, config, arch=arch, cache=cache))


def compile_source(source: str, name: str, arch: str, options: tuple, want_ptx: bool):
    """NVRTC and the resource scan of one generated source: the part of ``build`` that a
    build worker runs (no user code, no GPU). Returns ``(CompiledBinary, resources, pid)``."""
    import os

    from tilus.runtime.nvrtc import compile_cuda

    binary = compile_cuda(source, arch=arch, options=options, name=f"{name}.cu", want_ptx=want_ptx)
    return binary, _resources(binary.cubin, name, binary.log), os.getpid()


def build_steps(program, config: dict, *, arch: str = "sm_90a", cache=None):
    """``build`` as a generator for ``tilus.tune.compile_all``: code generation, the artifact
    cache and the checks run here; the NVRTC step is yielded as a ``Job``
    (``compile_source``) that a build worker runs. Returns the ``CompiledKernel``."""
    from tilus import version
    from tilus.backends.cuda.targets import check_target
    from tilus.passes.shared_memory import plan_shared_memory
    from tilus.runtime.cache import ArtifactCache, cache_key
    from tilus.runtime.nvrtc import nvrtc_version
    from tilus.target import buildable

    target = buildable(arch)
    arch = target.arch
    check_target(program.fn, target)
    limit = target.properties.shared_memory_per_block
    if program.smem.total_bytes > limit:  # planned for the largest target: place again here
        plan_shared_memory(program.fn, limit, arch)
    ks = generate(program, smem_limit=limit)
    cache = cache if cache is not None else ArtifactCache()
    nv = ".".join(map(str, nvrtc_version()))
    # the source too: whatever reaches NVRTC is in the key, also what the IR text omits
    key = cache_key(
        program.text,
        ks.source,
        version.__version__,
        nv,
        " ".join(NVRTC_OPTIONS),
        arch,
        codegen_version(),
    )
    from tilus import option

    want_ptx = bool(option.get_option("keep_ptx")) or arch != "sm_90a"
    hit = cache.lookup(key)
    if want_ptx and hit is not None and "kernel.ptx" not in hit:
        hit = None  # built before PTX was asked for: build again to keep it
    if hit is not None and "kernel.cubin" in hit:
        meta = cache.meta(key) or {}
        res = meta.get("resources", {})
        if "registers" not in res:  # the scan failed when it was stored (no cuobjdump then)
            res = _resources(hit["kernel.cubin"], ks.name, meta.get("log", ""))
        _check_setmaxnreg(program, res)
        return CompiledKernel(
            config=dict(config),
            kernel=ks,
            cubin=hit["kernel.cubin"],
            log=meta.get("log", ""),
            compile_seconds=float(meta.get("nvrtc_seconds", 0.0)),
            cached=True,
            resources=res,
            ptx=hit["kernel.ptx"].decode() if "kernel.ptx" in hit else None,
            arch=arch,
        )
    from tilus.runtime.workers import Job

    job = Job(
        "tilus.backends.cuda.codegen.build:compile_source",
        (ks.source, ks.name, arch, NVRTC_OPTIONS, want_ptx),
    )
    binary, res, pid = yield job
    _warn_serialized(ks, binary.log)
    _check_setmaxnreg(program, res)
    meta = {
        "kernel": ks.name,
        "config": dict(config),
        "nvrtc_seconds": round(binary.seconds, 4),
        "compiler": binary.compiler,
        "options": list(binary.options),
        "codegen": codegen_version(),
        "resources": res,
        "threads": ks.num_threads,
        "smem_bytes": ks.smem_bytes,
        "log": binary.log,
    }
    try:
        files = {"kernel.cu": ks.source, "kernel.cubin": binary.cubin}
        if binary.ptx is not None:
            files["kernel.ptx"] = binary.ptx
        cache.store(key, files, meta)
    except OSError:
        pass  # a read-only cache is no reason to fail the compile
    return CompiledKernel(
        config=dict(config),
        kernel=ks,
        cubin=binary.cubin,
        log=binary.log,
        compile_seconds=binary.seconds,
        cached=False,
        resources=res,
        ptx=binary.ptx,
        compiled_in=pid,
        arch=arch,
    )
