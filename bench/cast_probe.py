"""Launch one pinned cast kernel a few times (for a profiler such as ncu), H200.

``python bench/cast_probe.py per_token M N K=V ...`` runs ``PerTokenCast`` pinned to the
config ``K=V ...`` (the keys left out take ``per_token_cast.DEFAULTS``) on a bf16 ``[M, N]``; ``python bench/cast_probe.py cast SRC DST K=V ...``
runs ``tilus.kernels.cast.Cast`` from dtype ``SRC`` to ``DST`` over 2^28 elements. Each
kernel runs 3 times (compile and first launch, then two more), nothing is timed or checked:
``bench/quantized_configs.py`` checks and times every config.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
for p in (REPO, REPO / "examples" / "quantized"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))


def _config(items) -> dict:
    return {k: int(v) for k, v in (i.split("=") for i in items)}


def main(argv=None) -> int:
    """Parse ``argv`` and launch the kernel three times."""
    import torch

    import tilus

    argv = sys.argv[1:] if argv is None else argv
    if argv[0] == "per_token":
        import per_token_cast as ptc

        m, n = int(argv[1]), int(argv[2])
        k = ptc.PerTokenCast(**ptc.pinned(**_config(argv[3:])))
        x = torch.randn(m, n, device="cuda").to(torch.bfloat16)
        q = torch.empty(m, n, dtype=torch.float8_e4m3fn, device="cuda")
        s = torch.empty(m, dtype=torch.float32, device="cuda")
        args = (m, n, x, q, s)
    else:
        from tilus.kernels.cast import Cast

        src, dst = getattr(tilus, argv[1]), getattr(tilus, argv[2])
        n = 1 << 28
        k = Cast(src, dst, **_config(argv[3:]))
        x = torch.randint(0, 256, ((n * src.nbits + 7) // 8,), dtype=torch.uint8, device="cuda")
        y = torch.empty((n * dst.nbits + 7) // 8, dtype=torch.uint8, device="cuda")
        args = (n, x, y)
    for _ in range(3):
        k(*args)
    torch.cuda.synchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
