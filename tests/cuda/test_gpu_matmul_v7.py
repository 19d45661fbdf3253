"""Matmul V7 on the GPU: every config of the space, fp16 and bf16, at ragged sizes against torch
(NaN-poisoned outputs): with a block per SM (M = 136: 3 M tiles, so the split-K configs split;
M = 1000: they run unsplit), and with 3 blocks (several units per block, both consumer groups)."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import pytest

import tilus
from tests.cuda.conftest import needs_gpu
from tests.test_matmul_v7 import load_v7

pytestmark = [pytest.mark.gpu, needs_gpu]

#: num_sms -> sizes (N and K are compile-time: one build per config and num_sms)
SIZES = {None: [(1000, 1320, 776), (136, 1320, 776)], 3: [(200, 328, 392)]}

#: forms outside the default space, checked beside it: split-K partials added in place
#: (``partials="add"``) and stored beside 64 x 128 accumulators, coop groups with split-K, 128-wide
#: K tiles, split 32-column tiles, C stored from registers with split-K and coop, one C tile shared
#: by both groups (``epilogue="tma1"``), coop 256-row tiles
EXTRA = [
    dict(block_m=64, block_n=64, num_stages=8, split_k=2, swizzle=8, partials="add"),
    dict(block_m=64, block_n=128, num_stages=6, split_k=4, swizzle=8, partials="add"),
    dict(block_m=64, block_n=128, num_stages=8, split_k=4, swizzle=8),
    dict(block_m=128, block_n=128, num_stages=6, split_k=2, swizzle=2, coop=1),
    dict(block_m=128, block_n=128, num_stages=6, split_k=2, swizzle=2, coop=1, partials="add"),
    dict(block_m=64, block_n=64, num_stages=6, split_k=2, swizzle=8, block_k=128),
    dict(block_m=64, block_n=32, num_stages=12, split_k=2, swizzle=8),
    dict(block_m=64, block_n=64, num_stages=14, split_k=2, swizzle=8, epilogue="direct"),
    dict(block_m=128, block_n=128, num_stages=7, swizzle=2, coop=1, epilogue="direct"),
    # one C tile shared by the two groups (tma1): ping-pong, coop, clusters, split-K
    dict(block_m=128, block_n=256, num_stages=4, swizzle=8, coop=1, epilogue="tma1"),
    dict(block_m=128, block_n=256, num_stages=4, swizzle=4, cluster_n=2, coop=1, epilogue="tma1"),
    dict(block_m=128, block_n=192, num_stages=5, swizzle=8, coop=1, epilogue="tma1"),
    dict(block_m=128, block_n=224, num_stages=4, swizzle=8, coop=1, epilogue="tma1"),
    dict(block_m=128, block_n=224, num_stages=4, swizzle=4, cluster_n=2, coop=1, epilogue="tma1"),
    dict(block_m=128, block_n=128, num_stages=6, swizzle=8, epilogue="tma1"),
    dict(block_m=128, block_n=128, num_stages=6, swizzle=2, cluster_n=2, epilogue="tma1"),
    dict(block_m=64, block_n=64, num_stages=8, split_k=2, swizzle=8, epilogue="tma1"),
    dict(block_m=128, block_n=128, num_stages=6, split_k=2, swizzle=2, coop=1, epilogue="tma1"),
    # coop 256-row tiles (128 rows a group), alone and in clusters, every epilogue, split-K
    dict(block_m=256, block_n=128, num_stages=3, swizzle=8, coop=1),
    dict(block_m=256, block_n=128, num_stages=4, swizzle=8, coop=1, epilogue="tma1"),
    dict(block_m=256, block_n=128, num_stages=4, swizzle=4, cluster_n=2, coop=1, epilogue="tma1"),
    dict(block_m=256, block_n=128, num_stages=4, swizzle=2, cluster_n=2, coop=1, epilogue="direct"),
    dict(block_m=256, block_n=64, num_stages=4, split_k=2, swizzle=2, coop=1, epilogue="tma1"),
    # pairs of M tiles sharing a multicast B tile (cluster_m=2): coop, ping-pong, every epilogue
    dict(block_m=128, block_n=128, num_stages=6, swizzle=1, coop=1, cluster_m=2),
    dict(block_m=128, block_n=128, num_stages=7, swizzle=1, coop=1, epilogue="direct", cluster_m=2),
    dict(block_m=64, block_n=128, num_stages=6, swizzle=2, cluster_m=2),
    dict(block_m=128, block_n=64, num_stages=8, swizzle=2, cluster_m=2),
    dict(block_m=128, block_n=256, num_stages=4, swizzle=8, coop=1, epilogue="tma1", cluster_m=2),
    dict(block_m=256, block_n=128, num_stages=4, swizzle=8, coop=1, epilogue="tma1", cluster_m=2),
]


def extra_configs():
    """EXTRA with every constructor argument of an autotune group spelled out."""
    base = dict(block_k=64, split_k=1, cluster_n=1, coop=0, epilogue="tma", stream_k=0)
    return [{**base, **c} for c in EXTRA]


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("num_sms", [None, 3], ids=["all-sms", "3-sms"])
def test_every_config_against_torch(dtype, num_sms):
    import torch

    v7 = load_v7()
    cls = v7.MatmulV7 if dtype == "float16" else v7.MatmulV7BF16
    tdt = getattr(torch, dtype)
    dt = getattr(tilus, dtype)

    def build(args):  # every config's kernel in the cache first (NVRTC runs outside the GIL)
        cfg, (m, n, k) = args
        tilus.compile(cls(num_sms=num_sms, **cfg), m, n, k, dt, dt, dt)

    configs = cls().configs
    configs = configs + [c for c in extra_configs() if c not in configs]  # the space's run once
    jobs = [(cfg, size) for cfg in configs for size in SIZES[num_sms]]
    with ThreadPoolExecutor(max(1, min(len(jobs), os.cpu_count() or 1))) as ex:
        list(ex.map(build, jobs))
    bad = []  # every failing config is reported, not only the first
    for m, n, k in SIZES[num_sms]:
        a = torch.randn(m, k, device="cuda", dtype=tdt)
        b = torch.randn(n, k, device="cuda", dtype=tdt)
        ref = a.float() @ b.float().T
        for cfg in configs:  # the second launch finds the split-K counters clean
            check(cls(num_sms=num_sms, **cfg), cfg, (m, n, k), a, b, ref, 2, bad)
    assert not bad, bad


def check(kernel, cfg, size, a, b, ref, launches: int, bad: list) -> None:
    """``launches`` runs of ``kernel`` into NaN-poisoned outputs, each against ``ref``; the
    first failure is appended to ``bad``."""
    import torch

    m, n, _ = size
    for _ in range(launches):
        c = torch.full((m, n), float("nan"), device="cuda", dtype=a.dtype)
        kernel(*size, a, b, c)
        torch.cuda.synchronize()
        err = float((c.float() - ref).abs().max() / ref.abs().max())
        if torch.isnan(c).any() or not err < 1e-2:
            bad.append((cfg, size, "nan" if torch.isnan(c).any() else err))
            return


#: stream-K (an option, not in the space): the space's tiles, ping-pong and coop, each epilogue
STREAM_K_CONFIGS = [
    dict(block_k=64, split_k=1, cluster_n=1, stream_k=1, block_m=bm, block_n=bn, num_stages=st,
         swizzle=sw, coop=coop, epilogue=ep)
    for bm, bn, st, sw, coop, ep in [(128, 256, 4, 8, 1, "tma1"), (256, 128, 4, 8, 1, "tma1"),
                                     (128, 128, 5, 8, 0, "tma"), (128, 64, 8, 2, 0, "tma"),
                                     (64, 32, 18, 8, 0, "direct")]
]  # fmt: skip
#: sizes at which every stream-K config splits tiles on all SMs of an H100/H200: more tiles
#: than SMs (two parts a split tile), and fewer (up to a dozen parts a tile)
STREAM_K_SIZES = [(2000, 2600, 776), (3000, 4360, 1032), (200, 1000, 1032), (72, 2600, 2056)]


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_stream_k_configs_split_on_all_sms(dtype):
    import torch

    from tests.test_matmul_v7 import sk_parts

    v7 = load_v7()
    cls = v7.MatmulV7 if dtype == "float16" else v7.MatmulV7BF16
    tdt = getattr(torch, dtype)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    configs = STREAM_K_CONFIGS
    bad = []
    for m, n, k in STREAM_K_SIZES:
        a = torch.randn(m, k, device="cuda", dtype=tdt)
        b = torch.randn(n, k, device="cuda", dtype=tdt)
        ref = a.float() @ b.float().T
        for cfg in configs:
            tiles = -(-m // cfg["block_m"]) * -(-n // cfg["block_n"])
            assert sk_parts(tiles, -(-k // 64), sms), (cfg, (m, n, k))  # tiles are split
            # later launches find the workspace and the flags clean
            check(cls(**cfg), cfg, (m, n, k), a, b, ref, 3, bad)
    assert not bad, bad
