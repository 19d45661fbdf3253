"""GPU harness helpers for the matmul prototypes: build, launch, check and time variants."""

from __future__ import annotations

from bench.prototypes.matmul_ws import make_source, make_source_v2

# ---------------------------------------------------------------------------------------------
# GPU harness helpers for bench.prototypes.matmul_ws.main (need torch with CUDA, Hopper)
# ---------------------------------------------------------------------------------------------

VARIANTS = {
    "ws_128x256x64_s4_c2": lambda: make_source(128, 256, 64, 4, 2),
    "ws_128x256x64_s4_c2_p": lambda: make_source(128, 256, 64, 4, 2, persistent=True),
    "ws_128x256x64_s4_c2_x2": lambda: make_source(128, 256, 64, 4, 2, cluster_m=2),
    "ws_128x256x64_s4_c2_x2p": lambda: make_source(
        128, 256, 64, 4, 2, cluster_m=2, persistent=True
    ),
    "ws_128x256x64_s4_c2_x2p_g16": lambda: make_source(
        128, 256, 64, 4, 2, cluster_m=2, persistent=True, group_m=16
    ),
    "ws_256x128x64_s4_c2_x2p": lambda: make_source(
        256, 128, 64, 4, 2, cluster_m=2, persistent=True
    ),
    "v2_128x128x64_s4": lambda: make_source_v2(128, 128, 64, 4),
}
# The first size has an odd number of 128-row tiles (a cluster half fully out of bounds).
CHECK_SIZES = [(1128, 1048, 1032), (4096, 4096, 4096), (8192, 8192, 8192), (8000, 8192, 8192)]
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

    def resident_ctas(self) -> int:
        """How many CTAs can run at once (SMs, or whole clusters the GPU can hold), cached."""
        if getattr(self, "_resident", None) is None:
            from tilus.runtime import driver

            sms = driver.device_properties()["sm_count"]
            self._resident = sms
            if self.spec.cluster_m > 1:
                try:
                    self._resident = self.spec.cluster_m * _max_active_clusters(self)
                except Exception as e:  # noqa: BLE001 - fall back to the SM count
                    print(f"cuOccupancyMaxActiveClusters failed ({e}); assuming {sms} CTAs")
            print(f"{self.name}: {self._resident} resident CTAs", flush=True)
        return self._resident

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
                box=(box, s.block_k),  # B: this CTA's share when clusters multicast
                swizzle=s.tma_swizzle,
            )
            for t, rows, box in ((a, m, s.block_m), (b, n, s.box_b_rows or s.block_n))
        ]
        args = [
            driver.arg_tensormap(maps[0]),
            driver.arg_tensormap(maps[1]),
            driver.arg_ptr(c.data_ptr()),
            driver.arg_i32(m),
            driver.arg_i32(n),
            driver.arg_i32(k),
        ]
        grid, block = s.grid(m, n, self.resident_ctas()), (s.threads, 1, 1)
        stream = torch.cuda.current_stream().cuda_stream
        return lambda: self.kernel.launch(grid, block, s.smem_bytes, stream, args)


def _max_active_clusters(built: Built) -> int:
    """cuOccupancyMaxActiveClusters for the variant's launch shape."""
    from tilus.runtime import driver

    drv = driver.cuda_driver()
    cfg = drv.CUlaunchConfig()
    cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = 1024 * built.spec.cluster_m, 1, 1
    cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = built.spec.threads, 1, 1
    cfg.sharedMemBytes = built.spec.smem_bytes
    attr = drv.CUlaunchAttribute()
    attr.id = drv.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
    attr.value.clusterDim.x, attr.value.clusterDim.y, attr.value.clusterDim.z = (
        built.spec.cluster_m,
        1,
        1,
    )
    cfg.attrs, cfg.numAttrs = [attr], 1
    return int(driver.check(drv.cuOccupancyMaxActiveClusters(built.kernel.handle, cfg)))


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
    """Median ms of `fn` over `reps` runs, the L2 flushed by a 256 MB write before each."""
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


def _finite(x: float) -> float | None:
    """JSON has no infinity: a NaN-poisoned (unwritten) result is reported as null."""
    return x if x == x and abs(x) != float("inf") else None


def run_all(out_dir: str) -> int:
    """Smoke-test, build, check and time every variant beside cuBLAS; write JSON and a log."""
    import datetime
    import json
    import os
    import subprocess
    import sys

    import torch

    from tilus.runtime import driver, nvrtc

    torch.cuda.init()
    dev = torch.cuda.current_device()
    driver.ensure_context(dev)
    gpu = torch.cuda.get_device_name(dev)
    log = open(os.path.join(out_dir, "prototype.log"), "a")  # noqa: SIM115

    def say(msg: str) -> None:
        print(msg, flush=True)
        log.write(msg + "\n")
        log.flush()

    built, results, compile_info = {}, [], {}
    hung: set[tuple[int, bool]] = set()  # (cluster_m, persistent) shapes that timed out
    for name in VARIANTS:
        shape = (VARIANTS[name]().cluster_m, VARIANTS[name]().persistent)
        if shape in hung:
            say(f"smoke {name}: skipped, a variant of the same shape hung")
            compile_info[name] = {"error": "skipped after a hang of the same shape"}
            continue
        # A deadlocked kernel would hang this process: smoke-test each variant in a child first.
        try:
            p = subprocess.run(
                [sys.executable, "-m", "bench.prototypes.matmul_ws", "--smoke", name],
                capture_output=True,
                text=True,
                timeout=45,
            )
            say(p.stdout.strip() + (f"\n{p.stderr[-2000:]}" if p.returncode else ""))
            ok = p.returncode == 0
        except subprocess.TimeoutExpired:
            say(f"smoke {name}: TIMEOUT (hang?)")
            hung.add(shape)
            ok = False
        if ok:
            built[name] = Built(name)
            b = built[name]
            compile_info[name] = {
                "nvrtc_seconds": round(b.binary.seconds, 3),
                **b.resources,
                "threads": b.spec.threads,
                "smem_bytes": b.spec.smem_bytes,
            }
            say(f"built {name}: {compile_info[name]}")
        else:
            compile_info[name] = {"error": "smoke test failed"}
    for m, n, k in CHECK_SIZES:
        for name, b in built.items():
            err = check(b.launcher, m, n, k, torch)
            results.append({"variant": name, "M": m, "N": n, "K": k, "rel_err": _finite(err)})
            say(f"check {name:28s} {m}x{n}x{k}: rel_err={err:.3e} {'OK' if err < 1e-2 else 'FAIL'}")
        err = check(lambda a, b_, c: lambda: torch.matmul(a, b_.T, out=c), m, n, k, torch)
        results.append({"variant": "cublas", "M": m, "N": n, "K": k, "rel_err": _finite(err)})
    flush = torch.empty(256 * 2**20, dtype=torch.uint8, device="cuda")
    timings = []
    for m, n, k in TIME_SIZES:
        a = torch.randn(m, k, device="cuda", dtype=torch.float16)
        b = torch.randn(n, k, device="cuda", dtype=torch.float16)
        c = torch.empty(m, n, device="cuda", dtype=torch.float16)
        row = {"M": m, "N": n, "K": k}
        row["cublas"] = time_ms(lambda a=a, b=b, c=c: torch.matmul(a, b.T, out=c), torch, flush)
        for name, bv in built.items():
            row[name] = time_ms(bv.launcher(a, b, c), torch, flush)
        timings.append(row)
    # Report.
    flops = {(r["M"], r["N"], r["K"]): 2.0 * r["M"] * r["N"] * r["K"] for r in timings}
    say(f"\nGPU: {gpu}   NVRTC {nvrtc.nvrtc_version()}   torch {torch.__version__}")
    say(
        f"{'variant':28s} {'size':>16s} {'ms':>8s} {'TFLOPS':>8s} {'x cuBLAS':>8s} "
        f"{'nvrtc s':>7s} {'regs':>5s} {'spill':>5s}"
    )
    for row in timings:
        size = (row["M"], row["N"], row["K"])
        for name in ["cublas", *built]:
            ms = row[name]
            tf = flops[size] / ms / 1e9
            ci = compile_info.get(name, {})
            spill = ci.get("local_bytes", ci.get("stack_bytes", "-"))
            say(
                f"{name:28s} {'x'.join(map(str, size)):>16s} {ms:8.3f} {tf:8.1f} "
                f"{row['cublas'] / ms:8.3f} {ci.get('nvrtc_seconds', '-'):>7} "
                f"{ci.get('registers', '-'):>5} {spill:>5}"
            )
    report = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "gpu": gpu,
        "git_commit": os.environ.get("TILUS_GIT_COMMIT", "unknown"),
        "command": os.environ.get("TILUS_BENCH_COMMAND", " ".join([sys.executable, *sys.argv])),
        "nvrtc": ".".join(map(str, nvrtc.nvrtc_version())),
        "torch": torch.__version__,
        "timing": "CUDA events, median of 20 after 5 warm-ups, 256 MB L2 flush before each",
        "compile": compile_info,
        "checks": results,
        "timings_ms": timings,
        "tflops": [
            {
                k2: (v if k2 in ("M", "N", "K") else flops[(r["M"], r["N"], r["K"])] / v / 1e9)
                for k2, v in r.items()
            }
            for r in timings
        ],
    }
    day = report["date"][:10]
    for path in (
        os.path.join(out_dir, f"{day}-h200-prototype.json"),
        os.path.join(out_dir, "prototype.json"),
    ):
        with open(path, "w") as f:
            json.dump(report, f, indent=1)
    bad = [r for r in results if r["rel_err"] is None or r["rel_err"] >= 1e-2]
    say(f"checks: {len(results) - len(bad)} ok, {len(bad)} failed")
    return 1 if bad else 0
