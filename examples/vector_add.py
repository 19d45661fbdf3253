"""Vector addition, the smallest tilus kernel: ``z = x + y`` on float32 vectors.

Each block loads one ``block_size`` chunk of ``x`` and ``y`` into registers with
``load_global`` (elements past the end read as 0), adds them, and writes the chunk back with
``store_global`` (elements past the end are skipped), so ``n`` need not be a multiple of the
block size.

Run ``python examples/vector_add.py``. Without a CUDA GPU (or with ``TILUS_INTERPRET=1``) the
kernel runs on the tilus CPU interpreter on NumPy arrays; with torch and a CUDA GPU it runs on
CUDA tensors and is timed beside ``torch.add``. Either way the result is checked against NumPy
float64 and a table is printed; the exit status is non-zero on any failure.
"""

import functools
import sys
import time
import traceback

import numpy as np
from example_support import cuda_torch, gpu_time, print_table

import tilus
from tilus import float32, int32
from tilus.utils import cdiv

CPU_SIZES = [1, 1000, 4097, 100_003]
GPU_SIZES = [1 << 24, 10_000_019]
TOLERANCE = 1e-3


@tilus.autotune("block_size, warps", [(256, 2), (512, 4), (1024, 8)])
class VectorAdd(tilus.Script):
    """``z[i] = x[i] + y[i]``; one ``block_size`` chunk per block."""

    def __init__(self, block_size, warps):
        super().__init__()
        self.block_size = block_size
        self.warps = warps

    def __call__(self, n: int32, x_ptr: ~float32, y_ptr: ~float32, z_ptr: ~float32):
        self.attrs.blocks = cdiv(n, self.block_size)
        self.attrs.warps = self.warps

        gx = self.global_view(x_ptr, dtype=float32, shape=[n])
        gy = self.global_view(y_ptr, dtype=float32, shape=[n])
        gz = self.global_view(z_ptr, dtype=float32, shape=[n])
        offset: int32 = self.blockIdx.x * self.block_size
        x = self.load_global(gx, offsets=[offset], shape=[self.block_size])
        y = self.load_global(gy, offsets=[offset], shape=[self.block_size])
        self.store_global(gz, x + y, offsets=[offset])


def rel_error(z: np.ndarray, x: np.ndarray, y: np.ndarray) -> float:
    """``max |z - ref| / max |ref|`` against float64 (NaN if z holds a NaN)."""
    ref = x.astype(np.float64) + y.astype(np.float64)
    z64 = z.astype(np.float64)
    if np.isnan(z64).any():
        return float("nan")
    return float(np.max(np.abs(z64 - ref), initial=0.0)) / max(float(np.max(np.abs(ref))), 1e-30)


def main() -> int:
    """Check VectorAdd against NumPy and print a table; returns the exit status."""
    torch = cuda_torch()
    rng = np.random.default_rng()
    ok_all, rows, failures = True, [], []
    for n in CPU_SIZES if torch is None else GPU_SIZES:
        x = rng.standard_normal(n).astype(np.float32)
        y = rng.standard_normal(n).astype(np.float32)
        if torch is None:
            # the interpreter: run every config of the space, each pinned by its arguments
            for cfg in VectorAdd().configs:
                z = np.full(n, np.nan, dtype=np.float32)
                start = time.perf_counter()
                VectorAdd(**cfg)(n, x, y, z)
                seconds = time.perf_counter() - start
                err = rel_error(z, x, y)
                ok = err < TOLERANCE
                ok_all &= ok
                cfg_s = " ".join(f"{k}={v}" for k, v in cfg.items())
                rows.append([n, cfg_s, f"{err:.1e}", f"{seconds:.4f}", "ok" if ok else "FAIL"])
            continue
        xt, yt = torch.from_numpy(x).cuda(), torch.from_numpy(y).cuda()
        zt = torch.full((n,), float("nan"), dtype=torch.float32, device="cuda")
        kernel = VectorAdd()
        try:
            ref_s = f"{gpu_time(torch, functools.partial(torch.add, xt, yt)) * 1e3:.4f}"
        except Exception as e:  # noqa: BLE001 - the baseline is informative only
            print(f"torch.add timing failed: {type(e).__name__}: {e}")
            ref_s = "error"
        try:
            kernel(n, xt, yt, zt)  # compiles and autotunes on first use
            torch.cuda.synchronize()
            err = rel_error(zt.cpu().numpy(), x, y)
            seconds = gpu_time(torch, functools.partial(kernel, n, xt, yt, zt))
        except Exception as e:  # noqa: BLE001 - report a CUDA backend failure, do not hide it
            ok_all = False
            print(f"VectorAdd FAILED on the CUDA backend at n={n}:")
            traceback.print_exception(e)
            reason = str(e).split("\n")[0]
            failures.append(f"n={n}: {type(e).__name__}: {reason}")
            rows.append([n, "-", "-", "-", "-", ref_s, "FAIL (CUDA backend)"])
            continue
        ok = err < TOLERANCE
        ok_all &= ok
        gbps = 3 * 4 * n / seconds / 1e9
        status = "ok" if ok else "FAIL"
        rows.append(
            [
                n,
                f"tilus' pick of {len(kernel.configs)}",
                f"{err:.1e}",
                f"{seconds * 1e3:.4f}",
                f"{gbps:.0f}",
                ref_s,
                status,
            ]
        )
    if torch is None:
        print("VectorAdd on the tilus interpreter")
        print_table(["n", "config", "max err", "seconds", "status"], rows)
    else:
        print(f"VectorAdd on {torch.cuda.get_device_name()}")
        print_table(["n", "config", "max err", "ms", "GB/s", "torch.add ms", "status"], rows)
    for f in failures:
        print(f"CUDA backend failure at {f}")
    return 0 if ok_all else 1


if __name__ == "__main__":
    sys.exit(main())
