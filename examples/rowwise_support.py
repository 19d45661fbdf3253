"""What the row-wise examples share: run a kernel on the interpreter or the GPU, check it."""

from __future__ import annotations

import sys
import time
import traceback

import numpy as np
from example_support import cuda_torch, gpu_time, print_table


def max_error(got: np.ndarray, want: np.ndarray) -> float:
    """``max |got - want| / max(1, max |want|)`` (NaN if ``got`` holds a NaN)."""
    got = got.astype(np.float64)
    if np.isnan(got).any():
        return float("nan")
    scale = max(1.0, float(np.max(np.abs(want), initial=0.0)))
    return float(np.max(np.abs(got - want), initial=0.0)) / scale


def check(title, kernels, inputs, reference, cpu_shapes, gpu_shapes, tol=2e-3, moved=None):
    """Run each ``(name, make_kernel)`` of ``kernels`` on ``inputs(rng, m, n)`` (a list of
    fp16 arrays, the output last, NaN-filled) and compare with ``reference(*inputs)`` in
    float64; on a GPU also time it (``moved(m, n)`` bytes give GB/s). Returns the exit status."""
    torch = cuda_torch()
    rng = np.random.default_rng()
    rows, ok_all = [], True
    for m, n in cpu_shapes if torch is None else gpu_shapes:
        arrays = inputs(rng, m, n)
        want = reference(*[a.astype(np.float64) for a in arrays[:-1]])
        for name, make in kernels:
            out = arrays[-1].copy()
            try:
                kernel = make(n)
                if torch is None:
                    start = time.perf_counter()
                    kernel(m, n, *arrays[:-1], out)
                    secs = time.perf_counter() - start
                    got = out
                else:
                    ts = [torch.from_numpy(a).cuda() for a in (*arrays[:-1], out)]
                    kernel(m, n, *ts)
                    torch.cuda.synchronize()
                    got = ts[-1].cpu().numpy()
                    secs = gpu_time(torch, lambda k=kernel, t=ts, mn=(m, n): k(*mn, *t))
            except Exception as e:  # noqa: BLE001 - report the failure, do not hide it
                traceback.print_exception(e)
                rows.append([f"{m}x{n}", name, "-", "-", "FAIL"])
                ok_all = False
                continue
            err = max_error(got, want)
            ok = err < tol
            ok_all &= ok
            speed = f"{secs:.4f} s"
            if torch is not None and moved is not None:
                speed = f"{secs * 1e3:.4f} ms, {moved(m, n) / secs / 1e9:.0f} GB/s"
            rows.append([f"{m}x{n}", name, f"{err:.1e}", speed, "ok" if ok else "FAIL"])
    where = "the tilus interpreter" if torch is None else torch.cuda.get_device_name()
    print(f"{title} on {where}")
    print_table(["shape", "kernel", "max err", "time", "status"], rows)
    return 0 if ok_all else 1


def fp16_rows(rng, m, n, extra=()):
    """``x`` [m, n] and per-column vectors of ``extra`` lengths... as fp16, then the output."""
    x = rng.standard_normal((m, n)).astype(np.float16)
    vecs = [rng.standard_normal(k).astype(np.float16) for k in extra]
    return [x, *vecs, np.full((m, n), np.nan, np.float16)]


def rowwise_kernels(classes, per_class: int = 2, **kwargs):
    """``(name, make)`` pairs: on a GPU each class's tuned default; on the interpreter its
    first ``per_class`` configs, each pinned; ``kwargs`` go to every constructor."""
    extra = " ".join(f"{k}={v}" for k, v in kwargs.items())
    if cuda_torch() is not None:
        return [(f"{c.__name__} (tuned) {extra}", lambda n, c=c: c(**kwargs)) for c in classes]
    out = []
    for c in classes:
        for cfg in c(**kwargs).configs[:per_class]:
            label = " ".join(f"{k}={v}" for k, v in cfg.items())
            out.append((f"{c.__name__} {label} {extra}", lambda n, c=c, k=cfg: c(**k, **kwargs)))
    return out


def exit_with(status: int) -> None:
    """Exit the example with ``status``."""
    sys.exit(status)
