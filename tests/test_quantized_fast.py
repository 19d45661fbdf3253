"""The fast forms of the quantized kernels on the interpreter at ragged sizes: every config of
the per-token cast (persistent and ring blocks included), the ping-pong fp8 matmul, every config
of the cast kernel, and the per-config bench's dry run."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

import tilus
from tilus.kernels.cast import Cast
from tilus.packing import unpack

torch = pytest.importorskip("torch")

ROOT = pathlib.Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "quantized"
if str(EXAMPLES) not in sys.path:
    sys.path.insert(0, str(EXAMPLES))

import matmul_fp8  # noqa: E402
import per_token_cast  # noqa: E402


@pytest.mark.parametrize("cfg", per_token_cast.PerTokenCast().configs, ids=str)
def test_every_per_token_cast_config(cfg):
    # 2 "SMs": the persistent configs loop over several row groups, the last one ragged
    kernel = per_token_cast.PerTokenCast(**cfg, num_sms=2)
    with tilus.option.scoped(interpret=True):
        for m, n in [(11, 300), (3, 1000)]:
            ok, note, *_ = per_token_cast.run_once(kernel, torch, m, n, "cpu")
            assert ok, (m, n, note)


@pytest.mark.parametrize(
    "cfg",
    [dict(rows=2, warps=4), dict(rows=1, warps=0), dict(rows=1, warps=4, stages=2),
     dict(rows=1, warps=4, blocks_per_sm=2)],
    ids=str,
)  # fmt: skip
def test_per_token_cast_reread_refuses_other_forms(cfg):
    # the config is built (and refused) when the kernel is first called
    bad = [(r"re-read form \(passes=2\) takes rows=1, warps >= 1", dict(cfg, passes=2)),
           ("passes must be 1 or 2, got 3", dict(rows=1, warps=4, passes=3))]  # fmt: skip
    for match, c in bad:
        kernel = per_token_cast.PerTokenCast(**per_token_cast.pinned(**c))
        with tilus.option.scoped(interpret=True), pytest.raises(ValueError, match=match):
            per_token_cast.run_once(kernel, torch, 3, 300, "cpu")


def test_per_token_cast_min_blocks_beyond_an_sm():
    # 32 warps a block: two blocks fill an SM, so a cap of 4 blocks cannot be honoured
    cfg = per_token_cast.pinned(rows=1, warps=32, passes=2, min_blocks=4)
    kernel = per_token_cast.PerTokenCast(**cfg, num_sms=2)
    with tilus.option.scoped(interpret=True):
        with pytest.raises(tilus.TilusProgramError, match="min_blocks = 4 blocks of 1024 threads"):
            per_token_cast.run_once(kernel, torch, 3, 300, "cpu")


@pytest.mark.parametrize("row_scales", [True, False])
def test_fp8_matmul_192_wide_tiles_ragged(row_scales):
    # 3 N tiles of 192, the last one a third full; 2 M tiles, 3 K tiles; several tiles a block
    cfg = dict(block_m=128, block_n=192, num_stages=4, swizzle=8, block_k=128)
    kernel = matmul_fp8.MatmulFP8(**cfg, num_sms=2, row_scales=row_scales)
    with tilus.option.scoped(interpret=True):
        ok, err, note, *_ = matmul_fp8.run_once(kernel, torch, 200, 450, 384, "cpu", row_scales)
    assert ok, (err, note)


@pytest.mark.parametrize("row_scales", [True, False])
def test_precise_fp8_matmul_ragged(row_scales):
    # each K tile's sums added apart (3 K tiles), several tiles a block
    cfg = dict(block_m=128, block_n=128, num_stages=3, swizzle=4, block_k=128)
    kernel = matmul_fp8.MatmulFP8Precise(**cfg, num_sms=2, row_scales=row_scales)
    assert len(matmul_fp8.MatmulFP8Precise().configs) == 6  # 64 x 128 a group: no spill
    with tilus.option.scoped(interpret=True):
        ok, err, note, *_ = matmul_fp8.run_once(kernel, torch, 200, 300, 384, "cpu", row_scales)
    assert ok, (err, note)


@pytest.mark.parametrize("row_scales", [True, False])
def test_pingpong_fp8_matmul_ragged(row_scales):
    cfg = dict(block_m=64, block_n=256, num_stages=4, swizzle=4, block_k=128)
    kernel = matmul_fp8.MatmulFP8PingPong(**cfg, num_sms=2, row_scales=row_scales)
    with tilus.option.scoped(interpret=True):
        ok, err, note, *_ = matmul_fp8.run_once(kernel, torch, 130, 300, 160, "cpu", row_scales)
    assert ok, (err, note)


@pytest.mark.parametrize("row_scales", [True, False])
def test_cluster_m_fp8_matmul_ragged(row_scales):
    # 3 M tiles: the last pair's second tile is past M; B split in two halves per stage
    cfg = dict(block_m=128, block_n=256, num_stages=3, swizzle=8, block_k=128)
    kernel = matmul_fp8.MatmulFP8ClusterM(**cfg, num_sms=4, row_scales=row_scales)
    with tilus.option.scoped(interpret=True):
        ok, err, note, *_ = matmul_fp8.run_once(kernel, torch, 300, 520, 384, "cpu", row_scales)
    assert ok, (err, note)


@pytest.mark.parametrize("row_scales", [True, False])
def test_cluster_fp8_matmul_ragged(row_scales):
    # 5 N tiles: the last pair's second tile is past N (its loads read zeros, its store clips)
    cfg = dict(block_m=128, block_n=128, num_stages=3, swizzle=4, block_k=128)
    kernel = matmul_fp8.MatmulFP8Cluster(**cfg, num_sms=4, row_scales=row_scales)
    with tilus.option.scoped(interpret=True):
        ok, err, note, *_ = matmul_fp8.run_once(kernel, torch, 200, 600, 384, "cpu", row_scales)
    assert ok, (err, note)


CAST_PAIRS = [
    (tilus.int4b, tilus.float16),
    (tilus.float16, tilus.float4_e2m1),
    (tilus.float6_e3m2, tilus.float16),
]


@pytest.mark.parametrize("cfg", Cast(tilus.int4b, tilus.float16).configs, ids=str)
@pytest.mark.parametrize("src, dst", CAST_PAIRS, ids=str)
def test_every_cast_kernel_config(src, dst, cfg):
    # one "SM": a persistent grid (4-8 blocks) loops over the 6-11 tiles, the last ragged
    n = 10 * 4096 + 77
    if src.nbits % 8:
        x = tilus.Tensor(
            src, [n], tilus.randint(0, 256, [(n * src.nbits + 7) // 8], tilus.uint8).storage
        )
    else:
        x = tilus.randn([n], src, seed=2)
    want = x.to(dst)  # the default kernel
    out = tilus.empty([n], dst)
    xs = x.storage if src.nbits % 8 else x.torch().reshape(-1)
    ys = out.storage if dst.nbits % 8 else out.torch().reshape(-1)
    Cast(src, dst, **cfg, num_sms=1)(n, xs, ys)
    got = unpack(out.storage.numpy(), dst.nbits, n)
    assert np.array_equal(got, unpack(want.storage.numpy(), dst.nbits, n))


def test_per_config_bench_dry_run():
    env = dict(os.environ, TILUS_INTERPRET="1")
    p = subprocess.run(
        [sys.executable, "bench/quantized_configs.py", "--dry-run", "--cases", "cast"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.count("PerTokenCast") > len(per_token_cast.SPACE)  # every row and the best
    assert "FAIL" not in p.stdout
