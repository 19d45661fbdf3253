"""GPU harness helpers for the matmul prototypes: build, launch, check and time variants."""

from __future__ import annotations

from bench.prototypes.matmul_ws import make_source, make_source_v2

# ---------------------------------------------------------------------------------------------
# GPU harness helpers for bench.prototypes.matmul_ws.main (need torch with CUDA, Hopper)
# ---------------------------------------------------------------------------------------------

VARIANTS = {
    "ws_128x256x64_s4_c2": lambda: make_source(128, 256, 64, 4, 2),
    "ws_256x128x64_s4_c2": lambda: make_source(256, 128, 64, 4, 2),
    "ws_128x256x64_s3_c2": lambda: make_source(128, 256, 64, 3, 2),
    "ws_128x128x64_s6_c1": lambda: make_source(128, 128, 64, 6, 1),
    "v2_128x128x64_s4": lambda: make_source_v2(128, 128, 64, 4),
}
CHECK_SIZES = [(1000, 1048, 1032), (4096, 4096, 4096), (8192, 8192, 8192), (8000, 8192, 8192)]
TIME_SIZES = [(4096, 4096, 4096), (8192, 8192, 8192), (8000, 8192, 8192)]


class Built:
    """A compiled and loaded variant."""

    def __init__(self, name: str):
        from tilus.errors import TilusBackendError
        from tilus.runtime import driver, nvcc, nvrtc, sass

        self.name = name
        self.spec = VARIANTS[name]()
        try:
            self.binary = nvrtc.compile_cuda(self.spec.source)
        except TilusBackendError as e:  # no NVRTC there: fall back to nvcc, and say so
            print(f"NVRTC failed ({str(e)[:200]}); compiling {name} with nvcc", flush=True)
            self.binary = nvcc.compile_cuda_nvcc(self.spec.source)
        try:
            self.resources = sass.resource_usage(self.binary.cubin, self.spec.name)
            ops = sass.sass_opcodes(sass.disassemble(self.binary.cubin))
            self.resources["sass"] = {k: ops.get(k, 0) for k in ("HGMMA", "UTMALDG", "LDL", "STL")}
        except Exception as e:  # noqa: BLE001 - the tools may be missing; timing still counts
            self.resources = {"error": str(e)}
        self.kernel = driver.Module.load(self.binary.cubin).function(self.spec.name)
        self.kernel.set_max_dynamic_shared_memory(self.spec.smem_bytes)

    def launcher(self, a, b, c):
        """A zero-argument callable launching C = A @ B^T on torch's current stream."""
        import torch

        from tilus.runtime import driver, tensormap

        (m, k), n, s = a.shape, b.shape[0], self.spec
        maps = [
            tensormap.encode_tiled(
                dtype_name="float16",
                address=t.data_ptr(),
                shape=(rows, k),
                strides_bytes=(k * 2, 2),
                box=(box, s.block_k),
                swizzle=s.tma_swizzle,
            )
            for t, rows, box in ((a, m, s.block_m), (b, n, s.block_n))
        ]
        args = [
            driver.arg_tensormap(maps[0]),
            driver.arg_tensormap(maps[1]),
            driver.arg_ptr(c.data_ptr()),
            driver.arg_i32(m),
            driver.arg_i32(n),
            driver.arg_i32(k),
        ]
        grid, block = s.grid(m, n), (s.threads, 1, 1)
        stream = torch.cuda.current_stream().cuda_stream
        return lambda: self.kernel.launch(grid, block, s.smem_bytes, stream, args)


def check(run, m, n, k, torch) -> float:
    """Fresh inputs, NaN-poisoned output; return ||C - ref|| / ||ref|| (inf if NaN remains)."""
    a = torch.randn(m, k, device="cuda", dtype=torch.float16)
    b = torch.randn(n, k, device="cuda", dtype=torch.float16)
    c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float16)
    run(a, b, c)()
    torch.cuda.synchronize()
    ref = torch.matmul(a.float(), b.float().T)
    if torch.isnan(c).any():
        return float("inf")
    return float((c.float() - ref).norm() / ref.norm())


def time_ms(fn, torch, flush, reps=20, warmup=5) -> float:
    """Median milliseconds of `fn` over `reps` runs, the L2 flushed by a 256 MB write before each."""
    for _ in range(warmup):
        fn()
    events = []
    for _ in range(reps):
        flush.zero_()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        events.append((start, end))
    torch.cuda.synchronize()
    times = sorted(s.elapsed_time(e) for s, e in events)
    return times[len(times) // 2]


def smoke(name: str) -> None:
    """Build one variant and check the two small sizes (run in a child: guards against hangs)."""
    import torch

    from tilus.runtime import driver

    torch.cuda.init()
    driver.ensure_context(torch.cuda.current_device())
    built = Built(name)
    for m, n, k in CHECK_SIZES[:2]:
        print(f"smoke {name} {m}x{n}x{k} rel_err={check(built.launcher, m, n, k, torch):.3e}")
