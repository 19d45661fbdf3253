"""Tiled matrix multiplication with ``load_global`` and ``dot``: ``C = A @ B``.

``A [m, k]`` and ``B [k, n]`` are float16, ``C [m, n]`` is float32. Each block owns one
``block_m x block_n`` tile of C, kept in a float32 register accumulator. It walks K in steps of
``block_k``: ``load_global`` brings a ``block_m x block_k`` tile of A and a ``block_k x block_n``
tile of B into registers (out-of-bounds elements read as 0, which adds nothing to the dot
product) and ``dot`` accumulates their product. ``store_global`` writes the tile, skipping the
rows and columns past the end of C, so no size needs to be a multiple of the tile.

Run ``python examples/tiled_matmul.py``. Without a CUDA GPU (or with ``TILUS_INTERPRET=1``) the
kernel runs on the tilus CPU interpreter on NumPy arrays; with torch and a CUDA GPU it runs on
CUDA tensors and is timed beside cuBLAS (``torch.matmul``). The result is checked against NumPy
float64 (``max |C - ref| / max |ref| < 1e-3``) and a table is printed; the exit status is
non-zero on any failure.
"""

import functools
import sys
import time
import traceback

import numpy as np
from example_support import cuda_torch, gpu_time, print_table

import tilus
from tilus import float16, float32, int32
from tilus.utils import cdiv

CPU_SIZES = [(64, 64, 64), (200, 136, 72), (257, 129, 100)]  # (m, n, k)
GPU_SIZES = [(4096, 4096, 4096), (4000, 4096, 4000)]
TOLERANCE = 1e-3


@tilus.autotune("block_m, block_n", [(64, 64), (128, 64)])
@tilus.autotune("block_k", [16, 32])
class TiledMatmul(tilus.Script):
    """One C tile per block: register tiles from ``load_global``, ``dot`` into float32."""

    def __init__(self, block_m, block_n, block_k):
        super().__init__()
        self.block_m = block_m
        self.block_n = block_n
        self.block_k = block_k

    def __call__(
        self,
        m_size: int32,
        n_size: int,
        k_size: int,
        a_ptr: ~float16,
        b_ptr: ~float16,
        c_ptr: ~float32,
    ):
        block_m, block_n, block_k = self.block_m, self.block_n, self.block_k
        self.attrs.blocks = [cdiv(m_size, block_m), cdiv(n_size, block_n)]
        self.attrs.warps = 4

        offset_m: int32 = block_m * self.blockIdx.x
        offset_n: int32 = block_n * self.blockIdx.y
        ga = self.global_view(a_ptr, dtype=float16, shape=[m_size, k_size])
        gb = self.global_view(b_ptr, dtype=float16, shape=[k_size, n_size])
        gc = self.global_view(c_ptr, dtype=float32, shape=[m_size, n_size])

        acc = self.register_tensor(dtype=float32, shape=[block_m, block_n], init=0.0)
        for offset_k in range(0, k_size, block_k):
            a = self.load_global(ga, offsets=[offset_m, offset_k], shape=[block_m, block_k])
            b = self.load_global(gb, offsets=[offset_k, offset_n], shape=[block_k, block_n])
            self.dot(a, b, acc, out=acc)
        self.store_global(gc, acc, offsets=[offset_m, offset_n])


def rel_error(c: np.ndarray, a: np.ndarray, b: np.ndarray) -> float:
    """``max |C - A @ B| / max |A @ B|`` in float64 (NaN if C holds a NaN)."""
    ref = a.astype(np.float64) @ b.astype(np.float64)
    c64 = c.astype(np.float64)
    if np.isnan(c64).any():
        return float("nan")
    return float(np.max(np.abs(c64 - ref))) / max(float(np.max(np.abs(ref))), 1e-30)


def main() -> int:
    """Check TiledMatmul against NumPy and print a table; returns the exit status."""
    torch = cuda_torch()
    rng = np.random.default_rng()
    ok_all, rows, failures = True, [], []
    for m, n, k in CPU_SIZES if torch is None else GPU_SIZES:
        a = rng.uniform(-1.0, 1.0, size=(m, k)).astype(np.float16)
        b = rng.uniform(-1.0, 1.0, size=(k, n)).astype(np.float16)
        size = f"{m}x{n}x{k}"
        if torch is None:
            # the interpreter: run every config of the space, each pinned by its arguments
            for cfg in TiledMatmul().configs:
                c = np.full((m, n), np.nan, dtype=np.float32)
                start = time.perf_counter()
                TiledMatmul(**cfg)(m, n, k, a, b, c)
                seconds = time.perf_counter() - start
                err = rel_error(c, a, b)
                ok = err < TOLERANCE
                ok_all &= ok
                cfg_s = " ".join(f"{key}={v}" for key, v in cfg.items())
                rows.append([size, cfg_s, f"{err:.1e}", f"{seconds:.3f}", "ok" if ok else "FAIL"])
            continue
        at, bt = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
        ct = torch.full((m, n), float("nan"), dtype=torch.float32, device="cuda")
        kernel = TiledMatmul()
        flops = 2.0 * m * n * k
        try:
            cublas = gpu_time(torch, functools.partial(torch.matmul, at, bt))
            cublas_ms, cublas_tf = f"{cublas * 1e3:.3f}", f"{flops / cublas / 1e12:.0f}"
        except Exception as e:  # noqa: BLE001 - the baseline is informative only
            print(f"cuBLAS timing failed at {size}: {type(e).__name__}: {e}")
            cublas_ms = cublas_tf = "error"
        try:
            kernel(m, n, k, at, bt, ct)  # compiles and autotunes on first use
            torch.cuda.synchronize()
            err = rel_error(ct.cpu().numpy(), a, b)
            seconds = gpu_time(torch, functools.partial(kernel, m, n, k, at, bt, ct))
        except Exception as e:  # noqa: BLE001 - report a CUDA backend failure, do not hide it
            ok_all = False
            print(f"TiledMatmul FAILED on the CUDA backend at {size}:")
            traceback.print_exception(e)
            reason = str(e).split("\n")[0]
            failures.append(f"{size}: {type(e).__name__}: {reason}")
            rows.append([size, "-", "-", "-", "-", cublas_ms, cublas_tf, "FAIL (CUDA backend)"])
            continue
        ok = err < TOLERANCE
        ok_all &= ok
        tflops = f"{flops / seconds / 1e12:.0f}"
        status = "ok" if ok else "FAIL"
        row = [
            size,
            f"tilus' pick of {len(kernel.configs)}",
            f"{err:.1e}",
            f"{seconds * 1e3:.3f}",
            tflops,
            cublas_ms,
        ]
        rows.append([*row, cublas_tf, status])
    if torch is None:
        print("TiledMatmul on the tilus interpreter")
        print_table(["m x n x k", "config", "max err", "seconds", "status"], rows)
    else:
        print(f"TiledMatmul on {torch.cuda.get_device_name()} (cuBLAS: torch.matmul, fp16 out)")
        header = ["m x n x k", "config", "max err", "ms", "TFLOPS", "cuBLAS ms", "cuBLAS TFLOPS"]
        print_table([*header, "status"], rows)
    for f in failures:
        print(f"CUDA backend failure at {f}")
    return 0 if ok_all else 1


if __name__ == "__main__":
    sys.exit(main())
