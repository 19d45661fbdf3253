"""Shared driver of the Hopper matmul examples (V0..V7): inputs, checking, timing, the table.

Every version computes ``C = A @ B^T`` with ``A [m, k]``, ``B [n, k]`` and ``C [m, n]`` in
float16, accumulating in float32. ``run(kernel_cls)`` is what each example's ``main()`` calls:

- without a CUDA GPU (no torch, no CUDA, or ``TILUS_INTERPRET=1``) the kernel runs on the tilus
  CPU interpreter on NumPy arrays at a small size whose M is not a multiple of the tile;
- with torch and a CUDA GPU it runs on CUDA tensors at 4096^3 and a ragged 4000x4096x4096, and
  times cuBLAS (``torch.matmul``) beside it.

Results are checked against NumPy float64: the error is ``max |C - ref| / max |ref|`` and must be
below 1e-2, and C must hold no NaN (C is poisoned with NaN before the kernel runs). The return
value is the process exit status (0: every row passed).
"""

from __future__ import annotations

import functools
import sys
import time
import traceback
from pathlib import Path

import numpy as np

import tilus

# the helpers every example shares live one folder up (examples/example_support.py)
if str(Path(__file__).resolve().parents[1]) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from example_support import cuda_torch, gpu_time, print_table  # noqa: E402

TOLERANCE = 1e-2
CPU_SIZES = [(200, 256, 256), (130, 320, 392)]  # (m, n, k), ragged in M (and N, K)
GPU_SIZES = [(4096, 4096, 4096), (4000, 4096, 4096)]


def random_inputs(m: int, n: int, k: int, rng: np.random.Generator):
    """Fresh fp16 operands A [m, k], B [n, k] (values in [-1, 1))."""
    a = rng.uniform(-1.0, 1.0, size=(m, k)).astype(np.float16)
    b = rng.uniform(-1.0, 1.0, size=(n, k)).astype(np.float16)
    return a, b


def check(c: np.ndarray, a: np.ndarray, b: np.ndarray) -> tuple[bool, float, str]:
    """(passed, error, note) of C against A @ B^T computed in float64."""
    ref = a.astype(np.float64) @ b.astype(np.float64).T
    c64 = c.astype(np.float64)
    nans = int(np.isnan(c64).sum())
    if nans:
        return False, float("nan"), f"{nans} NaN in C"
    err = float(np.max(np.abs(c64 - ref))) / max(float(np.max(np.abs(ref))), 1e-30)
    return err < TOLERANCE, err, ""


def config_str(config: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in config.items())


def run_cpu(kernel_cls, sizes, configs=None) -> int:
    """Interpreter run: each size with the given configs (default: the space's first one)."""
    space = kernel_cls().configs
    configs = configs or space[:1]
    rng = np.random.default_rng()
    ok_all, rows = True, []
    for m, n, k in sizes:
        a, b = random_inputs(m, n, k, rng)
        for cfg in configs:
            c = np.full((m, n), np.nan, dtype=np.float16)
            kernel = kernel_cls(**cfg)
            start = time.perf_counter()
            try:
                kernel(m, n, k, a, b, c)
            except tilus.TilusError as e:
                ok_all = False
                rows.append([f"{m}x{n}x{k}", config_str(cfg), "ERROR", "-", "FAIL"])
                print(f"{kernel_cls.__name__} {cfg} at {m}x{n}x{k} failed:\n{e}")
                continue
            seconds = time.perf_counter() - start
            ok, err, note = check(c, a, b)
            ok_all &= ok
            status = "ok" if ok else f"FAIL {note}".strip()
            rows.append([f"{m}x{n}x{k}", config_str(cfg), f"{err:.2e}", f"{seconds:.3f}", status])
    print(f"{kernel_cls.__name__} on the tilus interpreter ({len(space)} configs in the space)")
    print_table(["m x n x k", "config", "max err", "seconds", "status"], rows)
    return 0 if ok_all else 1


def run_gpu(torch, kernel_cls, sizes) -> int:
    """CUDA run: the autotuned kernel on CUDA tensors, timed beside cuBLAS."""
    name = kernel_cls.__name__
    kernel = kernel_cls()
    rng = np.random.default_rng()
    ok_all, rows, failures = True, [], []
    for m, n, k in sizes:
        a_np, b_np = random_inputs(m, n, k, rng)
        a = torch.from_numpy(a_np).cuda()
        b = torch.from_numpy(b_np).cuda()
        c = torch.full((m, n), float("nan"), dtype=torch.float16, device="cuda")
        flops = 2.0 * m * n * k
        size = f"{m}x{n}x{k}"
        try:
            cublas = gpu_time(torch, functools.partial(torch.matmul, a, b.T))
            cublas_ms, cublas_tf = f"{cublas * 1e3:.3f}", f"{flops / cublas / 1e12:.0f}"
        except Exception as e:  # noqa: BLE001 - the baseline is informative only
            print(f"cuBLAS timing failed at {size}: {type(e).__name__}: {e}")
            cublas_ms = cublas_tf = "error"
        try:
            kernel(m, n, k, a, b, c)  # compiles and autotunes on first use
            torch.cuda.synchronize()
            c_np = c.cpu().numpy()
            seconds = gpu_time(torch, functools.partial(kernel, m, n, k, a, b, c))
        except Exception as e:  # noqa: BLE001 - report any backend failure, do not hide it
            ok_all = False
            print(f"{name} FAILED on the CUDA backend at {size}:")
            traceback.print_exception(e)
            reason = str(e).split("\n")[0]
            failures.append(f"{size}: {type(e).__name__}: {reason}")
            rows.append([size, "-", "-", "-", "-", cublas_ms, cublas_tf, "FAIL (CUDA backend)"])
            continue
        ok, err, note = check(c_np, a_np, b_np)
        ok_all &= ok
        status = "ok" if ok else f"FAIL {note}".strip()
        ms, tflops = f"{seconds * 1e3:.3f}", f"{flops / seconds / 1e12:.0f}"
        config = f"tilus' pick of {len(kernel.configs)}"  # the CUDA backend chooses
        rows.append([size, config, f"{err:.2e}", ms, tflops, cublas_ms, cublas_tf, status])
    print(f"{name} on {torch.cuda.get_device_name()}")
    print_table(
        ["m x n x k", "config", "max err", "ms", "TFLOPS", "cuBLAS ms", "cuBLAS TFLOPS", "status"],
        rows,
    )
    for f in failures:
        print(f"CUDA backend failure at {f}")
    return 0 if ok_all else 1


def run(kernel_cls, cpu_sizes=None, gpu_sizes=None) -> int:
    """Run, check and time ``kernel_cls``; returns the exit status."""
    torch = cuda_torch()
    if torch is None:
        return run_cpu(kernel_cls, cpu_sizes or CPU_SIZES)
    return run_gpu(torch, kernel_cls, gpu_sizes or GPU_SIZES)
