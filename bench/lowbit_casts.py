"""Benchmark the packed sub-byte casts beside a copy of the same bytes (H200).

``python bench/lowbit_casts.py [--out results.json]`` runs each case of ``CASES`` on a Hopper GPU
in the same process: the casts of ``tilus.kernels.cast`` (the kernel behind
``tilus.Tensor.to``) between packed sub-byte types and float16, against ``dst.copy_(src)`` of
the same bytes (the HBM ceiling), and three byte-sized casts of the same kernel (f16 to and
from float8_e4m3, f16 to uint8). Each row gives the time (median of CUDA-event timings with
a cold L2), GB/s (bytes read + written / time) and the ratio to the copy. Every kernel is first
checked bit for bit against the interpreter at a small ragged size. ``--dry-run`` needs no
GPU: only those checks, on the interpreter.

Cases are ``(group, label, function)``. The fp8 matmul and cast kernels are in
``bench/quantized.py``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import tilus  # noqa: E402
from tilus.kernels.cast import cast_kernel, operand  # noqa: E402
from tilus.packing import unpack  # noqa: E402

#: (source dtype, destination dtype) of the cast cases
CASTS = [
    (tilus.int4b, tilus.float16),
    (tilus.uint4b, tilus.float16),
    (tilus.float4_e2m1, tilus.float16),
    (tilus.float6_e3m2, tilus.float16),
    (tilus.float16, tilus.int4b),
    (tilus.float16, tilus.float4_e2m1),
    (tilus.float16, tilus.float8_e4m3),  # byte-sized casts of the same kernel
    (tilus.float8_e4m3, tilus.float16),
    (tilus.float16, tilus.uint8),
]
NUMEL = 1 << 28  # elements per cast (128 MB of int4b, 512 MB of float16)


def _check(src, dst, device):
    """The cast on ``device`` equals the interpreter's at a ragged size (bit for bit)."""
    n = 3 * 1024 + 77
    if src.nbits % 8:
        x = tilus.Tensor(src, [n], tilus.randint(0, 256, [(n * src.nbits + 7) // 8], tilus.uint8,
                                                  device=device).storage)  # fmt: skip
    else:
        x = tilus.randn([n], src, device=device, seed=1)
    got = x.to(dst)
    host = tilus.Tensor(src, [n], x.storage.cpu())
    want = host.to(dst)
    # the codes (a packed result's last byte may have bits past the tensor: not compared)
    bits = (
        unpack(got.storage.cpu().numpy(), dst.nbits, n),
        unpack(want.storage.cpu().numpy(), dst.nbits, n),
    )
    assert np.array_equal(*bits), (src, dst)


def cast_case(src, dst):
    """Time one cast of ``NUMEL`` elements; returns a result row."""
    import torch

    from tilus.utils import benchmark_func

    _check(src, dst, "cuda")
    x = tilus.Tensor(src, [NUMEL], torch.randint(0, 256, ((NUMEL * src.nbits + 7) // 8,),
                                                 dtype=torch.uint8, device="cuda"))  # fmt: skip
    y = tilus.empty([NUMEL], dst, device="cuda")
    k = cast_kernel(src, dst)

    xs, ys = operand(x), operand(y)
    ms = benchmark_func(lambda: k(NUMEL, xs, ys))
    nbytes = x.nbytes + y.nbytes
    half = (x.nbytes + y.nbytes) // 2  # a copy of this many bytes moves as many as the cast
    a = torch.empty(half, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    copy_ms = benchmark_func(lambda: b.copy_(a))
    return {
        "case": f"cast {src} -> {dst}",
        "numel": NUMEL,
        "ms": ms,
        "GB/s": nbytes / ms / 1e6,
        "copy_ms": copy_ms,
        "vs_copy": copy_ms / ms,
    }


CASES = [("cast", f"{s}->{d}", lambda s=s, d=d: cast_case(s, d)) for s, d in CASTS]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="write the rows as JSON here")
    ap.add_argument("--dry-run", action="store_true", help="interpreter checks only (no GPU)")
    ap.add_argument("--only", default="", help="only these cases (SRC->DST,...; default all)")
    args = ap.parse_args(argv)
    only = [c for c in args.only.split(",") if c]
    if args.dry_run:
        for s, d in CASTS:
            _check(s, d, "cpu")
            print(f"ok  cast {s} -> {d} (interpreter)")
        return []
    rows = []
    print(f"{'case':36s} {'ms':>9s} {'GB/s':>8s} {'copy ms':>9s} {'vs copy':>8s}")
    for _group, label, fn in CASES:
        if only and label not in only:
            continue
        r = fn()
        rows.append(r)
        print(
            f"{r['case']:36s} {r['ms']:9.4f} {r['GB/s']:8.1f} {r['copy_ms']:9.4f} {r['vs_copy']:8.2f}"
        )
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1))
    return rows


if __name__ == "__main__":
    main()
