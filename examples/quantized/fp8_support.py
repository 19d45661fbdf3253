"""The fp8 matmul examples' support: inputs, the float32 reference, the check, promoted sums."""

from __future__ import annotations

import time

from tilus import float32

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


class PromotedSums:
    """The fp8 matmul mainloop that promotes the tensor cores' sums (a mixin of the matmul
    Scripts of ``matmul_fp8.py``, which set ``promote``)."""

    #: each K tile's products summed apart and added into the float32 accumulator; False:
    #: the tensor cores' own sums run over all of K
    promote = False

    def mainloop_promoted(self, half: int, pipe, sa, sb, acc, k_size: int):
        """``acc += A_half @ B^T`` with each K tile's products summed by the tensor cores into
        a fresh tile ``part`` and added into ``acc`` in float32 once that WGMMA group retired:
        the fp8 WGMMA's sums keep fewer bits than float32, so over a long K their error grows
        (cuBLAS's default promotes too; ``use_fast_accum=True`` does not). The other consumer
        group's WGMMAs run while this one adds. (Two part tiles taking turns, so that a group
        stays in flight meanwhile, made ptxas serialize every WGMMA and spill.)"""
        for _k in self.range(0, k_size, self.block_k, unroll=self.num_stages):
            part = self.register_tensor(dtype=float32, shape=acc.shape, init=0.0)
            pipe.consumer_acquire()
            self.wgmma.fence()  # part's zeros are written before the WGMMA reads them
            self.wgmma.mma(sa[pipe.consumer_stage, half], sb[pipe.consumer_stage].transpose(), part)
            self.wgmma.commit_group()
            self.wgmma.wait_group(0)
            pipe.consumer_release(pipe.consumer_stage)  # the group that read it retired
            pipe.consumer_advance()
            self.add(acc, part, out=acc)
