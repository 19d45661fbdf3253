"""The attention examples: FlashAttention forward and decode attention on the interpreter (every
config, in order and shuffled), their argument checks, NVRTC builds, and GPU runs."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import tilus

torch = pytest.importorskip("torch")

ATTN = Path(__file__).resolve().parents[1] / "examples" / "attention"
if str(ATTN) not in sys.path:
    sys.path.insert(0, str(ATTN))

import attention_support as S  # noqa: E402
from decode_attention import (  # noqa: E402
    DecodeCombine,
    decode_attention,
    decode_kernel,
)
from flash_attention import FlashAttention, flash_attention  # noqa: E402

from tests.cuda.conftest import needs_gpu, needs_nvrtc  # noqa: E402
from tests.helpers_attention import check_forward, gpu_reference  # noqa: E402


def _check_forward(q, k, v, causal, o, lse, scale=None):
    ro, rl = S.reference(q, k, v, causal, S.default_scale(q.shape[-1], scale))
    assert S.max_error(o, ro) < 2e-2, S.max_error(o, ro)
    assert S.max_error(lse, rl) < 1e-3


FORWARD = [  # (b, h, hkv, sq, skv, d, dtype, causal)
    (1, 2, 1, 300, 300, 64, "float16", True),  # whole tiles left of the diagonal, then masked
    (1, 2, 2, 70, 330, 128, "bfloat16", False),  # whole KV tiles, then a ragged one
    (1, 1, 1, 40, 100, 256, "float16", True),
]


@pytest.mark.parametrize("seed", [None, 1], ids=["in-order", "shuffled"])
@pytest.mark.parametrize("case", FORWARD, ids=lambda c: f"d{c[5]}-{c[6]}-causal{c[7]}")
def test_forward_every_config_on_the_interpreter(case, seed):
    b, h, hkv, sq, skv, d, dt, causal = case
    q, k, v = S.random_qkv(torch, b, h, hkv, sq, skv, d, dt)
    o = torch.full_like(q, float("nan"))
    with tilus.option.scoped(interpret=True, interpret_all_configs=True, schedule_seed=seed):
        o, lse = flash_attention(q, k, v, causal=causal, out=o, scale=0.3)
    _check_forward(q, k, v, causal, o, lse, scale=0.3)


PERSISTENT = [  # (b, h, hkv, sq, skv, d, dtype, causal, kernel arguments)
    (1, 2, 1, 300, 300, 64, "float16", True, dict(block_m=192, consumers=3, pingpong=True)),
    (2, 2, 2, 70, 330, 128, "bfloat16", False, dict(consumers=2, pingpong=True)),
    # three stages leave no shared tile for O: it is stored from registers
    (2, 2, 1, 200, 200, 128, "float16", True, dict(num_stages=3, block_n=128)),
]


@pytest.mark.parametrize("seed", [None, 3], ids=["in-order", "shuffled"])
@pytest.mark.parametrize("case", PERSISTENT, ids=lambda c: f"d{c[5]}-causal{c[7]}")
def test_persistent_forward_on_the_interpreter(case, seed):
    # three "SMs": each block loops over several blocks of query rows, its ring, Q barriers
    # and the groups' ping-pong carrying over from one to the next
    b, h, hkv, sq, skv, d, dt, causal, kw = case
    q, k, v = S.random_qkv(torch, b, h, hkv, sq, skv, d, dt)
    kernel = FlashAttention(
        tile=0, dim=d, dtype=dt, causal=causal, group=h // hkv, persistent=True, num_sms=3, **kw
    )
    o = torch.full_like(q, float("nan"))
    with tilus.option.scoped(interpret=True, schedule_seed=seed):
        o, lse = flash_attention(q, k, v, causal=causal, out=o, scale=0.3, kernel=kernel)
    _check_forward(q, k, v, causal, o, lse, scale=0.3)


@pytest.mark.parametrize("seed", [None, 6], ids=["in-order", "shuffled"])
def test_split_producer_forward_on_the_interpreter(seed):
    # warp 0 of the producer loads Q and K, warp 1 V (each with its own ring position), here in
    # a persistent kernel over three "SMs"; every consumer thread arrives on the empty barriers
    q, k, v = S.random_qkv(torch, 1, 2, 1, 300, 300, 64, "float16")
    kernel = FlashAttention(
        tile=0, dim=64, group=2, causal=True, persistent=True, num_sms=3, split_producer=True,
        all_arrive=True,
    )  # fmt: skip
    o = torch.full_like(q, float("nan"))
    with tilus.option.scoped(interpret=True, schedule_seed=seed):
        o, lse = flash_attention(q, k, v, causal=True, out=o, scale=0.3, kernel=kernel)
    _check_forward(q, k, v, True, o, lse, scale=0.3)


@pytest.mark.parametrize("seed", [None, 8], ids=["in-order", "shuffled"])
def test_p_through_shared_memory_on_the_interpreter(seed):
    # three consumer groups of 64 rows, P stored to shared memory for a shared-operand P V
    q, k, v = S.random_qkv(torch, 1, 2, 2, 300, 300, 64, "float16")
    kernel = FlashAttention(tile=0, dim=64, causal=True, block_m=192, consumers=3, p_shared=True)
    o = torch.full_like(q, float("nan"))
    with tilus.option.scoped(interpret=True, schedule_seed=seed):
        o, lse = flash_attention(q, k, v, causal=True, out=o, scale=0.3, kernel=kernel)
    _check_forward(q, k, v, True, o, lse, scale=0.3)


@pytest.mark.parametrize("seed", [None, 9], ids=["in-order", "shuffled"])
def test_late_p_forward_on_the_interpreter(seed):
    # P kept in float32 and converted while the next S runs (with O's rescale), persistent
    q, k, v = S.random_qkv(torch, 1, 2, 1, 300, 300, 64, "float16")
    kernel = FlashAttention(tile=0, dim=64, group=2, causal=True, persistent=True, num_sms=3,
                            pingpong=False, late_p=True)  # fmt: skip
    o = torch.full_like(q, float("nan"))
    with tilus.option.scoped(interpret=True, schedule_seed=seed):
        o, lse = flash_attention(q, k, v, causal=True, out=o, scale=0.3, kernel=kernel)
    _check_forward(q, k, v, True, o, lse, scale=0.3)


OVERLAP = [  # (b, h, hkv, sq, skv, d, dtype, causal, kernel arguments)
    (2, 2, 2, 270, 330, 128, "bfloat16", False, dict()),
    (2, 2, 1, 200, 200, 64, "float16", True, dict(block_m=128, consumers=2, num_stages=2)),
]


OVERLAP_ES1 = [  # early_s1: blocks of one KV tile read a second one, wholly masked
    (1, 2, 2, 300, 100, 128, "float16", False, dict(early_s1=True)),  # ragged, one KV tile
    (1, 2, 1, 130, 130, 128, "float16", True, dict(early_s1=True)),
]


@pytest.mark.parametrize("seed", [None, 5], ids=["in-order", "shuffled"])
@pytest.mark.parametrize("mode", [1, 2, "1es"])
@pytest.mark.parametrize(
    "case", OVERLAP + OVERLAP_ES1, ids=lambda c: f"d{c[5]}-causal{c[7]}-skv{c[4]}"
)
def test_overlap_forward_on_the_interpreter(case, mode, seed):
    # persistent over three "SMs", each with 3 or 4 blocks of query rows: two Q buffers, every
    # block's first S issued by the one before (after the last, on stale tiles; mode 2: its
    # softmax too; 1es: its second S issued before its first softmax), O stored and the Q after
    # next loaded by the storer thread
    b, h, hkv, sq, skv, d, dt, causal, kw = case
    if kw.get("early_s1") and mode != 1:
        pytest.skip("early_s1 runs with overlap=1")
    if mode == "1es":
        mode, kw = 1, dict(kw, early_s1=True)
    q, k, v = S.random_qkv(torch, b, h, hkv, sq, skv, d, dt)
    kernel = FlashAttention(tile=0, dim=d, dtype=dt, causal=causal, group=h // hkv, num_sms=3,
                            persistent=True, pingpong=False, overlap=mode, **kw)  # fmt: skip
    o = torch.full_like(q, float("nan"))
    with tilus.option.scoped(interpret=True, schedule_seed=seed):
        o, lse = flash_attention(q, k, v, causal=causal, out=o, scale=0.3, kernel=kernel)
    _check_forward(q, k, v, causal, o, lse, scale=0.3)


SKIP_EMPTY = [  # (causal, kernel arguments): 200 query rows, the second block's last groups empty
    (False, dict(block_m=192, consumers=3, num_stages=4, pingpong=False)),
    (True, dict(block_m=192, consumers=3, num_stages=4, pingpong=True, early_rescale=True)),
    (True, dict(block_m=192, consumers=3, num_stages=3, pingpong=True, persistent=True, num_sms=3)),
    (
        False,
        dict(block_m=128, consumers=2, num_stages=3, pingpong=False, persistent=True, num_sms=3),
    ),
    (False, dict(block_m=192, consumers=3, cluster=2, all_arrive=False)),  # and the peer's slots
]


@pytest.mark.parametrize("seed", [None, 7], ids=["in-order", "shuffled"])
@pytest.mark.parametrize("causal, kw", SKIP_EMPTY)
def test_skip_empty_forward_on_the_interpreter(causal, kw, seed):
    # a group whose rows all lie past the end only waits for and frees the ring's slots (and
    # passes its ping-pong turns on); the other groups and the next blocks go on unchanged
    q, k, v = S.random_qkv(torch, 2, 2, 1, 200, 200 if causal else 333, 64, "float16")
    kw = dict(dict(split_producer=True, all_arrive=True), **kw)
    kernel = FlashAttention(tile=0, dim=64, group=2, causal=causal, skip_empty=True, **kw)
    o = torch.full_like(q, float("nan"))
    with tilus.option.scoped(interpret=True, schedule_seed=seed):
        o, lse = flash_attention(q, k, v, causal=causal, out=o, scale=0.3, kernel=kernel)
    _check_forward(q, k, v, causal, o, lse, scale=0.3)


@pytest.mark.parametrize(
    "kw, fragment",
    [
        (dict(overlap=True, persistent=True, pingpong=False, skip_empty=True),
         "skip_empty needs overlap=0"),
        (dict(overlap=True, persistent=False), "overlap needs persistent=True, cluster=1"),
        (dict(overlap=1, persistent=True, pingpong=True, early_s1=True),
         "early_s1 needs overlap=1 \\(got 1\\) without late_p, p_shared or pingpong"),
        (dict(overlap=True, persistent=True, pingpong=False, block_m=128, consumers=2,
              num_stages=3, dim=128), "beside the ring: 3 stages of 128 keys leave no room"),
        (dict(overlap=3, persistent=True), "overlap must be 0, 1 or 2 .*got 3"),
        (dict(overlap=2, persistent=True, late_p=True), "overlap must be 0, 1 or 2 .*got 2"),
        (dict(overlap=2, persistent=True, pingpong=False, early_s1=True),
         "early_s1 needs overlap=1 \\(got 2\\)"),
        (dict(persistent=False, early_s1=True), "early_s1 needs overlap=1 \\(got 0\\)"),
    ],
)  # fmt: skip
def test_bad_overlap_arguments_are_refused(kw, fragment):
    kw = dict(dict(dim=64), **kw)
    q, k, v = S.random_qkv(torch, 1, 2, 1, 40, 40, kw["dim"], "float16")
    kernel = FlashAttention(tile=0, group=2, **kw)
    with pytest.raises(tilus.TilusArgumentError, match=fragment):
        with tilus.option.scoped(interpret=True):
            flash_attention(q, k, v, kernel=kernel)


@pytest.mark.parametrize("seed", [None, 4], ids=["in-order", "shuffled"])
def test_cluster_forward_on_the_interpreter(seed):
    # clusters of two blocks, each loading one column panel of every KV tile into both; three
    # blocks of query rows: the grid is rounded up to two clusters, the last block past the end
    q, k, v = S.random_qkv(torch, 1, 2, 1, 300, 200, 64, "float16")
    kernel = FlashAttention(tile=0, dim=64, group=2, cluster=2)
    o = torch.full_like(q, float("nan"))
    with tilus.option.scoped(interpret=True, schedule_seed=seed):
        o, lse = flash_attention(q, k, v, out=o, scale=0.3, kernel=kernel)
    _check_forward(q, k, v, False, o, lse, scale=0.3)
    # causal: the pairs (tiles 2, 1 and 0, past the end) read the upper block's KV tiles
    kernel = FlashAttention(tile=0, dim=64, group=2, cluster=2, causal=True, block_n=64)
    k, v = k.repeat(1, 1, 2, 1)[:, :, :300], v.repeat(1, 1, 2, 1)[:, :, :300]
    k, v = k.contiguous(), v.contiguous()
    with tilus.option.scoped(interpret=True, schedule_seed=seed):
        o, lse = flash_attention(q, k, v, causal=True, out=o, scale=0.3, kernel=kernel)
    _check_forward(q, k, v, True, o, lse, scale=0.3)


@pytest.mark.parametrize(
    "kw, fragment",
    [
        (dict(cluster=3), "cluster must be 1 or 2, got 3"),
        (dict(cluster=2, persistent=True), r"cluster=2 \(two blocks sharing each KV tile\) needs"),
    ],
)
def test_bad_cluster_arguments_are_refused(kw, fragment):
    q, k, v = _qkv()
    kernel = FlashAttention(tile=0, dim=64, group=2, **kw)  # built (and checked) at its first call
    with pytest.raises(tilus.TilusArgumentError, match=fragment):
        with tilus.option.scoped(interpret=True):
            flash_attention(q, k, v, causal=kw.get("causal", False), kernel=kernel)


@pytest.mark.parametrize("seed", [None, 2], ids=["in-order", "shuffled"])
def test_decode_every_config_on_the_interpreter(seed):
    q, k, v = S.random_qkv(torch, 2, 4, 2, 1, 300, 64, "float16")
    lens = [300, 70]  # one chunk ragged, one sequence shorter than its first split
    o = torch.full_like(q, float("nan"))
    with tilus.option.scoped(interpret=True, interpret_all_configs=True, schedule_seed=seed):
        o, lse = decode_attention(q, k, v, torch.tensor(lens, dtype=torch.int32), out=o, splits=3)
    ro, rl = S.reference_decode(q, k, v, lens, S.default_scale(64, None))
    assert S.max_error(o, ro) < 2e-2 and S.max_error(lse, rl) < 1e-3


def test_decode_head_dim_256_on_the_interpreter():
    # the wide kernel's space: 64- and 32-position tiles beside the 32 KiB Q tile
    q, k, v = S.random_qkv(torch, 1, 2, 1, 1, 100, 256, "bfloat16")
    assert type(decode_kernel(256).instance(decode_kernel(256).configs[0])).__name__ == (
        "DecodeAttentionWide"
    )
    with tilus.option.scoped(interpret=True, interpret_all_configs=True):
        o, lse = decode_attention(q, k, v, torch.tensor([77], dtype=torch.int32))
    ro, rl = S.reference_decode(q, k, v, [77], S.default_scale(256, None))
    assert S.max_error(o, ro) < 2e-2 and S.max_error(lse, rl) < 1e-3


def _qkv(shape_q=(1, 4, 64, 64), shape_kv=(1, 2, 64, 64), dtype=torch.float16):
    return torch.randn(shape_q).to(dtype), *(torch.randn(shape_kv).to(dtype) for _ in "kv")


@pytest.mark.parametrize(
    "make, fragment",
    [
        (lambda: _qkv(shape_kv=(1, 2, 64, 128)), "head dim 128, q has head dim 64"),
        (lambda: _qkv(shape_kv=(1, 3, 64, 64)), "heads_kv = 3 must divide the 4 query heads"),
        (lambda: _qkv(shape_q=(1, 4, 64, 96), shape_kv=(1, 2, 64, 96)), "head dim 96"),
        (
            lambda: (_qkv()[0].transpose(1, 2).contiguous().transpose(1, 2),) + _qkv()[1:],
            "q must be contiguous",
        ),
        (
            lambda: _qkv()[:2] + (torch.randn(1, 2, 64, 128).half()[..., ::2],),
            "v must be contiguous",
        ),
        (lambda: _qkv()[:2] + (_qkv()[2].float(),), "v must be float16"),
        (lambda: (_qkv()[0][0],) + _qkv()[1:], "q must be 4-D"),
    ],
)
def test_bad_forward_arguments_name_the_argument(make, fragment):
    q, k, v = make()
    with pytest.raises(tilus.TilusArgumentError, match=fragment.replace("(", r"\(")):
        flash_attention(q, k, v)


def test_bad_decode_arguments_name_the_argument():
    q, k, v = _qkv(shape_q=(2, 4, 1, 64), shape_kv=(2, 2, 100, 64))
    with pytest.raises(tilus.TilusArgumentError, match="the KV cache k holds 100 positions"):
        decode_attention(q, k, v, torch.tensor([50, 101], dtype=torch.int32))
    with pytest.raises(tilus.TilusArgumentError, match="lens must be int32 of shape"):
        decode_attention(q, k, v, torch.tensor([50], dtype=torch.int32))
    with pytest.raises(tilus.TilusArgumentError, match="lens must be in"):
        decode_attention(q, k, v, torch.tensor([0, 5], dtype=torch.int32))
    with pytest.raises(tilus.TilusArgumentError, match=r"splits must be in \[1, 64\]"):
        decode_attention(q, k, v, torch.tensor([50, 60], dtype=torch.int32), splits=65)


def test_the_scale_must_be_positive():
    with pytest.raises(tilus.TilusArgumentError, match="scale must be positive"):
        flash_attention(*_qkv(), scale=-0.5)


def test_causal_needs_no_more_queries_than_keys():
    q, k, v = _qkv(shape_kv=(1, 2, 32, 64))
    with pytest.raises(tilus.TilusArgumentError, match="seq_q <= seq_kv"):
        flash_attention(q, k, v, causal=True)


def test_every_head_dim_has_its_tiles():
    for d in (64, 128, 256):
        kernel = FlashAttention(dim=d)
        assert len(kernel.configs) == 4
        assert all(len(FlashAttention(tile=t, dim=d).configs) == 1 for t in range(4))


@needs_nvrtc
def test_forward_builds_without_spills():
    args = (4, 32, 4096, 4096, 0.1) + (tilus.void_p,) * 4 + (tilus.float32,)
    ck = tilus.compile(FlashAttention(tile=0, dim=128, causal=True), *args)
    ck = ck[0] if isinstance(ck, list) else ck
    assert ck.resources["spill_store_bytes"] == 0 and not ck.wgmma_serialized, ck.log
    src = ck.source
    assert "tl_setmaxnreg_dec<24>();" in src and src.count("tl_setmaxnreg_inc<240>") == 2
    # P @ V: P from registers (the S accumulator cast in place), V [block_n, dim] MN-major
    assert "_rs_t01(" in src and "through shared memory" not in src
    assert "HGMMA.64x128x16.F32" in ck.sass()
    # ping-pong: each consumer group waits for its turn and passes it on (named barriers 1, 2);
    # the groups' own sync() take other ids
    assert "tl_bar_sync(1, 256);" in src and "tl_bar_sync(2, 256);" in src
    assert "tl_bar_arrive(1, 256);" in src and "tl_bar_arrive(2, 256);" in src
    assert "tl_bar_sync(1, 128);" not in src and "tl_bar_sync(2, 128);" not in src


@needs_nvrtc
@pytest.mark.parametrize("d, cfg", [(128, dict(block_n=128, num_stages=2)),
                                    (128, dict(block_n=64, num_stages=3)),
                                    (256, dict(block_n=64, num_stages=3))])  # fmt: skip
def test_decode_builds_without_spills(d, cfg):
    v, f = tilus.void_p, tilus.float32
    args = (16, 8, 4, 8192, 2, 4096, 0.1, v, v, v, tilus.int32, f, f, 1, v, f)
    ck = tilus.compile(decode_kernel(d, **cfg), *args)
    ck = ck[0] if isinstance(ck, list) else ck
    assert ck.resources["spill_store_bytes"] == 0 and not ck.wgmma_serialized, ck.log
    ring = (64 + 2 * cfg["num_stages"] * cfg["block_n"]) * d * 2  # Q and the ring, 16-bit
    blocks = 2 if ring <= 112 * 1024 else 1  # two blocks an SM: registers for both
    assert f"__launch_bounds__(160, {blocks})" in ck.source
    assert ck.resources["registers"] * 160 * blocks <= 65536
    assert "tl_tma_prefetch_3d(" not in ck.source  # off by default
    # prefetch=True: the ring's first tiles go to L2 (K and V, one box a 64 columns) before
    # the lengths are read
    ck = tilus.compile(decode_kernel(d, prefetch=True, **cfg), *args)
    src = (ck[0] if isinstance(ck, list) else ck).source
    assert src.count("tl_tma_prefetch_3d(&tl_map") == 4 * (d // 64) // 2
    assert src.index("tl_tma_prefetch_3d(&tl_map") < src.index("self.load_global(glens")


def test_decode_two_blocks_an_sm_are_refused_where_they_do_not_fit():
    assert decode_kernel(128).instance(dict(block_n=64, num_stages=3)).blocks == 2
    assert decode_kernel(128).instance(dict(block_n=128, num_stages=2)).blocks == 1
    with pytest.raises(tilus.TilusArgumentError, match="needs Q and the ring in 114688 bytes"):
        decode_kernel(128).instance(dict(block_n=128, num_stages=2, blocks=2))
    with pytest.raises(tilus.TilusArgumentError, match="blocks must be 1 or 2"):
        decode_kernel(128).instance(dict(block_n=64, num_stages=3, blocks=3))


# --- GPU: every config at one ragged size against the float32 reference, outputs poisoned ----


GPU_FORWARD = [(d, "float16", c) for d in (64, 128, 256) for c in (False, True)] + [
    (128, "bfloat16", False),
    (128, "bfloat16", True),
]


@needs_gpu
@pytest.mark.gpu
@pytest.mark.parametrize("d, dtype, causal", GPU_FORWARD)
def test_gpu_forward_every_config(d, dtype, causal):
    q, k, v = S.random_qkv(torch, 2, 4, 2, 333, 333 if causal else 517, d, dtype, "cuda")
    scale = S.default_scale(d, None)
    ro, rl = gpu_reference(torch, q, k, v, causal, scale)
    for tile in range(len(FlashAttention(dim=d).configs)):
        # persistent tiles on 7 SMs: several blocks of query rows each
        kernel = FlashAttention(tile=tile, dim=d, dtype=dtype, causal=causal, group=2, num_sms=7)
        check_forward(torch, flash_attention, q, k, v, causal, kernel, (ro, rl), f"tile {tile}: ")


GPU_VARIANTS = [  # kernels outside the autotune spaces (bench/attention_variants.py times them)
    # head dim 128's tile 0: persistent, ping-pong and overlap; these pin pingpong=False as
    # they ran before it had ping-pong
    dict(dim=128, cluster=2, persistent=False, pingpong=False),
    dict(dim=128, cluster=2, num_stages=2, block_n=160, persistent=False, pingpong=False),
    dict(dim=64, cluster=2, num_stages=4),
    dict(dim=128, persistent=True, num_stages=3, pingpong=False),  # O stored from registers
    dict(dim=128, cluster=2, split_producer=True, persistent=False, pingpong=False),
    dict(dim=64, block_m=192, consumers=3, num_stages=3, p_shared=True),
    dict(dim=128, cluster=2, causal=True),
    dict(dim=128, num_stages=3, pingpong=False, split_producer=True, all_arrive=True),
    dict(dim=64, num_stages=4, pingpong=False, split_producer=True, all_arrive=True, late_p=True),
    # overlap on 5 SMs (several blocks of query rows each), without ping-pong
    dict(dim=128, overlap=True, pingpong=False, num_sms=5),
    dict(
        dim=128,
        overlap=True,
        pingpong=False,
        split_producer=False,
        all_arrive=False,
        early_rescale=True,
    ),
    dict(dim=128, causal=True, persistent=True, pingpong=False, overlap=True, num_sms=5),
    dict(dim=64, block_m=128, consumers=2, persistent=True, overlap=True, num_sms=5),
    dict(dim=128, overlap=2, pingpong=False, num_sms=5),
    dict(dim=128, causal=True, persistent=True, pingpong=False, overlap=2, num_sms=5),
    dict(dim=64, block_m=128, consumers=2, persistent=True, overlap=2, num_sms=5),
    dict(dim=128, overlap=1, early_s1=True, pingpong=False, num_sms=5),
    dict(dim=128, overlap=1, early_s1=True, all_arrive=False, pingpong=False, num_sms=5),
    dict(
        dim=128, causal=True, persistent=True, pingpong=False, overlap=1, early_s1=True, num_sms=5
    ),
]
GPU_SKIP_EMPTY = [  # run at 1000 query rows: the last block of 192 rows has 40, group 0's
    dict(dim=64, skip_empty=True),
    dict(dim=64, skip_empty=True, pingpong=True, early_rescale=True),
    dict(dim=64, skip_empty=True, causal=True),
]


@pytest.mark.parametrize(
    "kw", GPU_VARIANTS + GPU_SKIP_EMPTY, ids=lambda kw: "-".join(f"{k}{v}" for k, v in kw.items())
)
def test_gpu_variants_are_valid_kernels(kw):
    """Each GPU variant's arguments fit together with tile 0 of its space (a conflict is a
    TilusArgumentError at construction) and its shared memory fits a block (a compile error
    when lowered): caught here, on every machine, not first on a GPU."""
    kernel = FlashAttention(tile=0, dtype="float16", group=2, **kw)
    for cfg in kernel.configs:
        kernel.instance(cfg)
        kernel.program(cfg, {})


@needs_gpu
@pytest.mark.gpu
@pytest.mark.parametrize(
    "kw", GPU_VARIANTS, ids=lambda kw: "-".join(f"{k}{v}" for k, v in kw.items())
)
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_gpu_forward_variants(kw, dtype):
    d, causal = kw["dim"], kw.get("causal", False)
    # 3 blocks of 128 rows (in a cluster: the last pair's second block past the end)
    q, k, v = S.random_qkv(torch, 2, 4, 2, 333, 333 if causal else 517, d, dtype, "cuda")
    scale = S.default_scale(d, None)
    ro, rl = gpu_reference(torch, q, k, v, causal, scale)
    kernel = FlashAttention(tile=0, dtype=dtype, group=2, **kw)
    check_forward(torch, flash_attention, q, k, v, causal, kernel, (ro, rl))


@needs_gpu
@pytest.mark.gpu
@pytest.mark.parametrize("skv", [100, 128, 129])
def test_gpu_early_s1_short_kv(skv):
    # one or two KV tiles: the second S reads a tile past the end (TMA fills it with zeros and
    # still completes the barrier), wholly masked
    q, k, v = S.random_qkv(torch, 2, 4, 2, 300, skv, 128, "float16", "cuda")
    ro, rl = gpu_reference(torch, q, k, v, False, S.default_scale(128, None))
    kernel = FlashAttention(tile=0, dtype="float16", group=2, dim=128, overlap=1, early_s1=True,
                            pingpong=False, num_sms=5)  # fmt: skip
    check_forward(torch, flash_attention, q, k, v, False, kernel, (ro, rl))


@needs_gpu
@pytest.mark.gpu
@pytest.mark.parametrize(
    "kw", GPU_SKIP_EMPTY, ids=lambda kw: "-".join(f"{k}{v}" for k, v in kw.items())
)
def test_gpu_skip_empty(kw):
    d, causal = kw["dim"], kw.get("causal", False)
    q, k, v = S.random_qkv(torch, 2, 4, 2, 1000, 1000 if causal else 1234, d, "float16", "cuda")
    ro, rl = gpu_reference(torch, q, k, v, causal, S.default_scale(d, None))
    kernel = FlashAttention(tile=0, group=2, **kw)
    check_forward(torch, flash_attention, q, k, v, causal, kernel, (ro, rl))


@needs_gpu
@pytest.mark.gpu
@pytest.mark.parametrize("dtype, d", [("float16", 128), ("bfloat16", 128), ("float16", 256),
                                      ("float16", 64)])  # fmt: skip
def test_gpu_decode_every_config(dtype, d):
    b, h, hkv, nq, max_len = 4, 16, 4, 1, 2000
    q, k, v = S.random_qkv(torch, b, h, hkv, nq, max_len, d, dtype, "cuda")
    lens = [2000, 1, 777, 1500]
    lt = torch.tensor(lens, dtype=torch.int32, device="cuda")
    want = S.reference_decode(q.cpu(), k.cpu(), v.cpu(), lens, S.default_scale(d, None))
    # the tuned kernel first (its configs built at once): without and with the combine, o poisoned
    for splits in (1, 3):
        o = torch.full_like(q, float("nan"))
        o, lse = decode_attention(q, k, v, lt, kernel=decode_kernel(d, dtype), out=o, splits=splits)
        torch.cuda.synchronize()
        assert S.max_error(o, want[0]) < 2e-2 and S.max_error(lse, want[1]) < 1e-3, splits
    for cfg in decode_kernel(d).configs:
        kernel = decode_kernel(d, dtype, **cfg)
        o = torch.full_like(q, float("nan"))
        o, lse = decode_attention(q, k, v, lt, kernel=kernel, out=o)
        torch.cuda.synchronize()
        assert S.max_error(o, want[0]) < 2e-2, cfg
        assert S.max_error(lse, want[1]) < 1e-3, cfg


def test_combine_space():
    assert len(DecodeCombine(dim=64).configs) == 1
    assert np.isfinite(S.default_scale(64, None))
