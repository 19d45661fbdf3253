"""Print the cuBLAS kernel ``torch.matmul`` runs (fp16, ``C = A @ B^T``) at some LLM-suite shapes.

The kernel's name tells its tile (``MxN_KxStages``), cluster shape and cooperative split, which
is what a tilus kernel's tuning space should be compared against. One call after three warm-up
calls, under ``torch.profiler``; GPU only. Run: ``python3 bench/cublas_kernels.py``.
"""

from __future__ import annotations

SHAPES = {
    "m256-8192": (256, 8192, 8192), "m256-4096": (256, 4096, 4096), "m64-8192": (64, 8192, 8192),
    "square-8192": (8192, 8192, 8192), "70b-gate-up": (8192, 57344, 8192),
    "8b-qkv": (4096, 6144, 4096),
}  # fmt: skip


def main() -> int:
    """Profile one ``torch.matmul`` a shape and print its kernels' names and device times (us)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    for name, (m, n, k) in SHAPES.items():
        a = torch.randn(m, k, device="cuda", dtype=torch.float16)
        b = torch.randn(n, k, device="cuda", dtype=torch.float16)
        for _ in range(3):
            torch.matmul(a, b.t())
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as p:
            torch.matmul(a, b.t())
            torch.cuda.synchronize()
        ks = [e for e in p.events() if e.device_type == torch.autograd.DeviceType.CUDA]
        print(name, m, n, k, [(e.name[:160], round(e.device_time_total, 1)) for e in ks])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
