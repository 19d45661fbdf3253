"""The fp8 matmul examples' host side: quantized inputs, the float32 reference and the check."""

from __future__ import annotations

import time

TOLERANCE = 1e-2


def quantized_inputs(torch, m: int, n: int, k: int, device="cpu", seed=None):
    """Fresh e4m3 operands with per-row scales, as a quantizer would make them: A and B
    rows scaled into [-448, 448], the scales (and a per-tensor scale) kept beside them."""
    g = torch.Generator().manual_seed(seed if seed is not None else int(time.time_ns() % 2**31))
    a = torch.randn(m, k, generator=g) * 2.0
    b = torch.randn(n, k, generator=g) * 0.5
    sa = a.abs().amax(dim=1).clamp(min=1e-12) / 448.0
    sb = b.abs().amax(dim=1).clamp(min=1e-12) / 448.0
    a8 = (a / sa[:, None]).to(torch.float8_e4m3fn)
    b8 = (b / sb[:, None]).to(torch.float8_e4m3fn)
    scale = 0.75  # a per-tensor factor on top (e.g. the activations' global scale)
    return [x.to(device) for x in (a8, b8, sa, sb)] + [scale]


def reference(torch, a8, b8, sa, sb, scale, row_scales=True):
    """float32 dequantize-then-matmul-then-scale."""
    c = (a8.float() @ b8.float().T) * scale
    if row_scales:
        c = c * sa.float()[:, None] * sb.float()[None, :]
    return c


def check(torch, c, ref) -> tuple[bool, float, str]:
    """(passed, error, note): ``max |c - ref| / max |ref|`` below the tolerance, no NaN."""
    c64, r64 = c.double().cpu(), ref.double().cpu()
    nans = int(torch.isnan(c64).sum())
    if nans:
        return False, float("nan"), f"{nans} NaN in C"
    err = float((c64 - r64).abs().max()) / max(float(r64.abs().max()), 1e-30)
    return err < TOLERANCE, err, ""


def run_once(kernel, torch, m, n, k, device, row_scales=True):
    """Run ``kernel`` once on fresh inputs; returns (passed, error, note, c, inputs)."""
    a8, b8, sa, sb, scale = quantized_inputs(torch, m, n, k, device)
    c = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device=device)
    kernel(m, n, k, a8, b8, sa, sb, scale, c)
    ok, err, note = check(torch, c, reference(torch, a8, b8, sa, sb, scale, row_scales))
    return ok, err, note, c, (a8, b8, sa, sb, scale)
