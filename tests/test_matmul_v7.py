"""Matmul V7 on the CPU: every config on the interpreter with several units per block (both
consumer groups, in order and shuffled), bf16, and NVRTC builds without spills."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

import tilus
from tests.cuda.conftest import needs_nvrtc

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "hopper_matmul"
SIZE = (200, 200, 264)  # ragged in M, N and K (the ring wraps: blocks run several units)


def load_v7():
    """The V7 module (imported by file, its sibling modules taken out of sys.modules again)."""
    names = (
        "matmul_v4",
        "matmul_v5",
        "matmul_v6",
        "matmul_v7_epilogue",
        "matmul_v7_schedule",
        "harness",
    )
    saved = {k: sys.modules.pop(k) for k in names if k in sys.modules}
    sys.path.insert(0, str(EXAMPLES))
    try:
        spec = importlib.util.spec_from_file_location("v7_under_test", EXAMPLES / "matmul_v7.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod
    finally:
        sys.path.remove(str(EXAMPLES))
        for k in names:
            sys.modules.pop(k, None)
        sys.modules.update(saved)


@pytest.fixture(scope="module")
def v7():
    return load_v7()


def _run(kernel, dtype, seed, size=SIZE):
    torch = pytest.importorskip("torch")
    m, n, k = size
    tdt = {"float16": torch.float16, "bfloat16": torch.bfloat16}[dtype]
    a = (torch.rand(m, k, dtype=torch.float64) * 2 - 1).to(tdt)
    b = (torch.rand(n, k, dtype=torch.float64) * 2 - 1).to(tdt)
    c = torch.full((m, n), float("nan"), dtype=tdt)
    with tilus.option.scoped(interpret=True, interpret_all_configs=True, schedule_seed=seed):
        kernel(m, n, k, a, b, c)
    ref = a.double() @ b.double().T
    assert not torch.isnan(c).any()
    assert float((c.double() - ref).abs().max() / ref.abs().max()) < 1e-2


@pytest.mark.parametrize("seed", [None, 1], ids=["in-order", "shuffled"])
def test_every_config_fp16_several_tiles_per_block(v7, seed):
    # 2 "SMs": each block runs several units, so both consumer groups take turns through
    # the order barriers and skip each other's ring slots; M = 200 is 4 tiles of 64 rows,
    # so the split-K configs split (in 2 parts: one per block)
    _run(v7.MatmulV7(num_sms=2), "float16", seed)


def test_clusters_and_coop_with_a_pair_past_the_last_column(v7):
    # N = 3 tiles - 56 columns: the second tile of the last cluster pair lies right of C (its
    # B tile is loaded as zeros for the pair's sake and never stored); 4 "SMs" = 2 clusters
    configs = [c for c in v7.MatmulV7().configs if c["cluster_n"] == 2 or c["coop"]]
    assert len(configs) == 5
    # the cluster configs (coop 128 x 256 and 256 x 128; every config runs in the test above)
    for cfg in [c for c in configs if c["cluster_n"] == 2]:
        n = 3 * cfg["block_n"] - 56
        _run(v7.MatmulV7(num_sms=4, **cfg), "float16", 3, size=(200, n, 392))


#: pairs of M tiles sharing the B tile (``cluster_m=2``: each block multicasts half of it)
CLUSTER_M = [
    dict(block_m=128, block_n=128, num_stages=4, swizzle=1, coop=1),
    dict(block_m=128, block_n=128, num_stages=4, swizzle=1, coop=1, epilogue="direct"),
    dict(block_m=64, block_n=128, num_stages=4, swizzle=2),
    dict(block_m=128, block_n=256, num_stages=3, swizzle=8, coop=1, epilogue="tma1"),
]


@pytest.mark.parametrize("i", range(len(CLUSTER_M)))
def test_cluster_m_pairs_with_a_tile_below_the_last_row(v7, i):
    # M = 3 tiles - 56 rows: the last pair's second M tile lies below C (its A rows load as
    # zeros, its tile is never stored); 4 "SMs" = 2 clusters, shuffled schedules
    cfg = dict(block_k=64, split_k=1, cluster_n=1, coop=0, epilogue="tma", stream_k=0)
    cfg.update(CLUSTER_M[i], cluster_m=2)
    m = 3 * cfg["block_m"] - 56
    _run(v7.MatmulV7(num_sms=4, **cfg), "float16", 7, size=(m, 200, 392))


def test_cluster_m_refusals(v7):
    base = dict(num_stages=4, block_m=128, block_n=128, block_k=64, swizzle=8, num_sms=4)
    base.update(split_k=1, cluster_n=1, coop=1, epilogue="tma", stream_k=0)
    x = np.zeros((8, 8), dtype=np.float16)
    for bad, msg in ((dict(cluster_m=3), "cluster_m must be 1 or 2"),
                     (dict(cluster_m=2, split_k=2), "cluster_m must be 1 or 2"),
                     (dict(cluster_m=2, cluster_n=2), "cluster_m must be 1 or 2"),
                     (dict(cluster_m=2, stream_k=1), "stream_k must be 0 or 1"),
                     (dict(cluster_m=2, block_n=40, coop=0, block_m=64), "multiple of 16")):  # fmt: skip
        with pytest.raises(tilus.TilusArgumentError, match=msg):
            with tilus.option.scoped(interpret=True):
                v7.MatmulV7(**{**base, **bad})(8, 8, 8, x, x, x.copy())


def test_cluster_and_coop_need_128_row_tiles_without_split_k(v7):
    base = dict(num_stages=4, block_n=128, block_k=64, swizzle=8, num_sms=4)
    base.update(split_k=1, cluster_n=1, coop=0, epilogue="tma", stream_k=0)
    x = np.zeros((8, 8), dtype=np.float16)
    for bad in (dict(block_m=64, cluster_n=2), dict(block_m=128, cluster_n=2, split_k=2),
                dict(block_m=64, coop=1), dict(block_m=128, cluster_n=4),
                dict(block_m=64, partials="both"), dict(block_m=64, epilogue="smem"),
                dict(block_m=256), dict(block_m=192, coop=1)):  # fmt: skip
        kernel = v7.MatmulV7(**{**base, **bad})  # built (and checked) at its first call
        with pytest.raises(
            tilus.TilusArgumentError,
            match="128-row tiles|256-row tiles|needs coop|'store' or 'add'|'tma1' or 'direct'",
        ):
            with tilus.option.scoped(interpret=True):
                kernel(8, 8, 8, x, x, x.copy())


# forms outside the default space (the GPU tier runs them too): split-K partials stored per part,
# coop groups with split-K (each group combines its half tile), 128-wide K tiles, 32-column tiles,
# C stored from registers (no shared C tile), B prefetched into L2 ahead of the ring; one C tile
# that the two groups take turns on (tma1: ping-pong, coop, clusters, split-K), coop 256-row tiles,
# 224-column tiles (a TMA store box of 3.5 swizzle spans)
EXTRA = [
    dict(block_m=64, block_n=64, num_stages=4, split_k=3, swizzle=8, partials="add"),
    dict(block_m=128, block_n=128, num_stages=4, split_k=2, swizzle=2, coop=1, partials="store"),
    dict(block_m=128, block_n=128, num_stages=4, split_k=3, swizzle=2, coop=1, partials="add"),
    dict(block_m=64, block_n=64, num_stages=3, split_k=2, swizzle=8, block_k=128),
    dict(block_m=64, block_n=32, num_stages=6, split_k=2, swizzle=8, partials="store"),
    dict(block_m=64, block_n=64, num_stages=6, split_k=2, swizzle=8, epilogue="direct"),
    dict(block_m=128, block_n=128, num_stages=4, swizzle=2, coop=1, epilogue="direct"),
    dict(block_m=128, block_n=128, num_stages=4, swizzle=2, epilogue="tma1"),
    dict(block_m=128, block_n=128, num_stages=4, swizzle=8, cluster_n=2, epilogue="tma1"),
    dict(block_m=128, block_n=256, num_stages=4, swizzle=8, coop=1, epilogue="tma1"),
    dict(block_m=128, block_n=224, num_stages=4, swizzle=4, cluster_n=2, coop=1, epilogue="tma1"),
    dict(block_m=64, block_n=64, num_stages=4, split_k=2, swizzle=8, epilogue="tma1"),
    dict(block_m=128, block_n=128, num_stages=4, split_k=2, swizzle=2, coop=1, epilogue="tma1"),
    dict(block_m=256, block_n=128, num_stages=3, swizzle=8, coop=1),
    dict(block_m=256, block_n=128, num_stages=4, swizzle=2, cluster_n=2, coop=1, epilogue="tma1"),
    dict(block_m=256, block_n=64, num_stages=4, split_k=2, swizzle=2, coop=1, epilogue="direct"),
]


@pytest.mark.parametrize("i", range(len(EXTRA)))
def test_extra_forms(v7, i):
    cfg = dict(block_k=64, split_k=1, cluster_n=1, coop=0, epilogue="tma", stream_k=0)
    cfg.update(EXTRA[i])
    # 3 "SMs": blocks run several units; M = 200 is 2-4 M tiles, so every split form splits
    _run(v7.MatmulV7(num_sms=3, **cfg), "float16", 5)


@pytest.mark.parametrize("split_k", [1, 4])
def test_bf16(v7, split_k):
    cfg = [c for c in v7.MatmulV7BF16().configs if c["split_k"] == split_k][0]
    _run(v7.MatmulV7BF16(num_sms=3, **cfg), "bfloat16", 2)


def test_the_space_and_the_types(v7):
    configs = v7.MatmulV7().configs
    assert len(configs) == 16 and v7.MatmulV7BF16().configs == configs
    assert not any(c["stream_k"] for c in configs)  # an option, not in the space
    assert {c["block_m"] for c in configs} == {64, 128, 256}
    assert {c["split_k"] for c in configs} == {1, 2, 4}
    assert {c["epilogue"] for c in configs} == {"tma", "tma1", "direct"}
    assert {(c["cluster_n"], c["coop"]) for c in configs} == {(1, 0), (1, 1), (2, 1)}
    for c in configs:  # clusters and coop: 128- or 256-row tiles, unsplit; 256 rows only coop
        if c["stream_k"]:
            assert c["split_k"] == 1 and c["cluster_n"] == 1, c
        if c["cluster_n"] == 2 or c["coop"]:
            assert c["block_m"] in (128, 256) and c["split_k"] == 1, c
        assert c["block_m"] <= 128 or c["coop"], c
    assert v7.MatmulV7.dtype == tilus.float16 and v7.MatmulV7BF16.dtype == tilus.bfloat16


def mainloops_keep_registers(sass: str) -> bool:
    """No local-memory access (a spill) between two wgmmas of one mainloop (HGMMAs at most
    150 instructions apart)."""
    ops = [ln for ln in sass.splitlines() if "/*" in ln and ";" in ln]
    mma = [i for i, ln in enumerate(ops) if "HGMMA" in ln]
    for i, j in zip(mma, mma[1:]):
        if j - i < 150 and any(x in ln for ln in ops[i:j] for x in ("LDL", "STL")):
            return False
    return bool(mma)


@needs_nvrtc
@pytest.mark.parametrize("bf16", [False, True], ids=["fp16", "bf16"])
def test_builds_without_spills(v7, bf16):
    # bf16 changes only the wgmma type and the cast: one split-K config is built for it
    cls = v7.MatmulV7BF16 if bf16 else v7.MatmulV7
    dt = tilus.bfloat16 if bf16 else tilus.float16
    # the largest accumulator (128 x 128) and the largest split-K one (every config builds on the
    # GPU tier, tests/cuda/test_gpu_matmul_v7.py)
    configs = [c for c in cls().configs if c["block_n"] == 128 and c["block_m"] == 128][:1]
    split4 = [c for c in cls().configs if c["split_k"] == 4][:1]  # 64 x 64 in 4 (stored partials)
    # the largest coop accumulators (64 x 256 and 128 x 128 a group) with the cluster's remote
    # arrivals and the shared C tile
    configs += [c for c in cls().configs if c["coop"] and c["cluster_n"] == 2]
    # stream-K: the split tiles' fp32 stores and band sums after a 64 x 256 accumulator
    configs += [dict(c, stream_k=1) for c in cls().configs if c["coop"] and c["cluster_n"] == 1]
    # K = 776: 13 K tiles, more than any ring has stages (with fewer, ptxas has serialized the
    # wgmmas of a 5-stage ring, which unrolls the K loop by 5)
    for cfg in split4 if bf16 else configs + split4:
        ck = tilus.compile(cls(num_sms=132, **cfg), 200, 200, 776, dt, dt, dt)
        ck = ck[0] if isinstance(ck, list) else ck
        assert ck.resources["spill_store_bytes"] == 0, (cfg, ck.log)
        if cfg["stream_k"] or cfg["split_k"] > 1:  # the fp32 partial sums go out in pairs
            assert "tl_st_global_or_v2_b32(" in ck.source, cfg
        assert mainloops_keep_registers(ck.sass()), cfg
        assert ck.resources["registers"] == 168, cfg  # setmaxnreg moves it from there
        assert not ck.wgmma_serialized, cfg
        assert "tl_setmaxnreg_dec<40>();" in ck.source
        assert ck.source.count("tl_setmaxnreg_inc<232>") == 2


def sk_parts(tiles, k_tiles, sms):
    """Stream-K's plan, as ``matmul_v7_schedule`` lays it out: per split tile its parts as
    ``(block, first K tile, end)`` (a check that a test size splits tiles, and of the plan's
    invariants: the parts of a tile are consecutive blocks that cover its K tiles in order)."""
    whole = (tiles // sms - 1) * sms if tiles >= 2 * sms else 0
    if tiles * k_tiles < sms:
        whole = tiles
    iters = (tiles - whole) * k_tiles
    runs = [(b * iters // sms, (b + 1) * iters // sms) for b in range(sms)]
    split = {}
    for b, (lo, hi) in enumerate(runs):
        assert iters == 0 or hi > lo  # every block has K tiles to run
        for t in range(lo // k_tiles, (hi - 1) // k_tiles + 1) if hi > lo else []:
            k_lo, k_hi = max(lo - t * k_tiles, 0), min(hi - t * k_tiles, k_tiles)
            if (k_lo, k_hi) != (0, k_tiles):
                split.setdefault(t, []).append((b, k_lo, k_hi))
    owner = [((x + 1) * sms - 1) // iters for x in range(iters)] if iters else []
    for t, parts in split.items():
        assert parts[0][1] == 0 and parts[-1][2] == k_tiles
        for (b0, _, e0), (b1, s1, _) in zip(parts, parts[1:]):
            assert b1 == b0 + 1 and s1 == e0
        # the kernel's closed form for the blocks that hold a tile's first and last K tiles
        assert (
            owner[t * k_tiles] == parts[0][0] and owner[t * k_tiles + k_tiles - 1] == parts[-1][0]
        )
    return split


# stream-K forms (every config of the space runs in the first test too): ping-pong and coop,
# each epilogue, with fewer K tiles than blocks (no stream-K), fewer tiles than blocks (runs
# shorter than a tile: three or more parts a tile), between S and 2S tiles (all of them
# streamed) and more (whole waves first); sizes ragged in M, N and K
STREAM_K = [
    (dict(block_m=64, block_n=64, num_stages=4, swizzle=8), 3, (200, 200, 264)),
    (dict(block_m=64, block_n=32, num_stages=6, swizzle=8, epilogue="direct"), 5, (72, 200, 392)),
    (dict(block_m=128, block_n=128, num_stages=4, swizzle=2, epilogue="tma1"), 4, (200, 328, 392)),
    (dict(block_m=128, block_n=64, num_stages=5, swizzle=2), 3, (136, 72, 200)),
    (dict(block_m=128, block_n=64, num_stages=5, swizzle=2), 7, (136, 72, 200)),
    (dict(block_m=128, block_n=64, num_stages=5, swizzle=2), 20, (136, 72, 200)),
    (dict(block_m=64, block_n=64, num_stages=4, swizzle=8, epilogue="direct"), 7, (72, 100, 328)),
    (
        dict(block_m=128, block_n=256, num_stages=4, swizzle=8, coop=1, epilogue="tma1"),
        3,
        (520, 328, 392),
    ),
    (
        dict(block_m=128, block_n=256, num_stages=4, swizzle=8, coop=1, epilogue="tma1"),
        5,
        (200, 200, 520),
    ),
    (
        dict(block_m=256, block_n=128, num_stages=4, swizzle=8, coop=1, epilogue="tma1"),
        5,
        (520, 400, 200),
    ),
    (dict(block_m=128, block_n=128, num_stages=4, swizzle=1, coop=1), 4, (264, 200, 456)),
    (dict(block_m=128, block_n=128, num_stages=4, swizzle=1, coop=1), 6, (100, 200, 328)),
]


@pytest.mark.parametrize("i", range(len(STREAM_K)))
@pytest.mark.parametrize("seed", [None, 4], ids=["in-order", "shuffled"])
def test_stream_k(v7, i, seed):
    cfg, sms, (m, n, k) = STREAM_K[i]
    tiles = -(-m // cfg["block_m"]) * -(-n // cfg["block_n"])
    k_tiles = -(-k // 64)
    split = sk_parts(tiles, k_tiles, sms)
    assert bool(split) == (tiles * k_tiles >= sms and tiles % sms != 0)
    full = dict(block_k=64, split_k=1, cluster_n=1, coop=0, epilogue="tma", stream_k=1)
    _run(v7.MatmulV7(num_sms=sms, **{**full, **cfg}), "float16", seed, size=(m, n, k))


def test_stream_k_bf16(v7):
    cfg = dict([c for c in v7.MatmulV7BF16().configs if c["coop"]][0], cluster_n=1, stream_k=1)
    _run(v7.MatmulV7BF16(num_sms=3, **cfg), "bfloat16", 2, size=(264, 520, 200))


def test_stream_k_needs_no_split_k_nor_clusters(v7):
    base = dict(num_stages=4, block_m=128, block_n=128, block_k=64, swizzle=8, num_sms=4)
    base.update(split_k=1, cluster_n=1, coop=0, epilogue="tma")
    for bad, msg in ((dict(stream_k=1, split_k=2), "stream_k must be 0 or 1"),
                     (dict(stream_k=1, cluster_n=2, coop=1), "stream_k must be 0 or 1"),
                     (dict(stream_k=2), "stream_k must be 0 or 1")):  # fmt: skip
        kernel = v7.MatmulV7(**{**base, **bad})  # built (and checked) at its first call
        x = np.zeros((8, 8), dtype=np.float16)
        with pytest.raises(tilus.TilusArgumentError, match=msg):
            with tilus.option.scoped(interpret=True):
                kernel(8, 8, 8, x, x, x.copy())
