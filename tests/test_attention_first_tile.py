"""FlashAttention's ``full_first`` (a block's first softmax unmasked where it can be), ``overlap``
with ``pingpong`` and the barrier-wait suspend hints: the interpreter at ragged sizes, argument
checks, NVRTC builds, GPU runs."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import tilus

torch = pytest.importorskip("torch")

ATTN = Path(__file__).resolve().parents[1] / "examples" / "attention"
if str(ATTN) not in sys.path:
    sys.path.insert(0, str(ATTN))

import attention_support as S  # noqa: E402
from flash_attention import FlashAttention, flash_attention  # noqa: E402

from tests.cuda.conftest import needs_gpu, needs_nvrtc  # noqa: E402
from tests.helpers_attention import check_forward, gpu_reference  # noqa: E402

HINTS = dict(suspend_ns=200, consumer_suspend_ns=40)
CASES = [  # (sq, skv, d, causal, kernel arguments); three "SMs" loop over the query blocks
    # 300 keys: the first tile is whole (unmasked branch), the last ragged
    (300, 300, 128, False, dict(overlap=1, full_first=True, **HINTS)),
    # 100 keys: the first tile is the ragged one (masked branch)
    (260, 100, 128, False, dict(overlap=1, full_first=True)),
    # causal: group 0 of the first block sees part of tile 0 (masked), the others all of it
    (300, 300, 64, True, dict(block_m=128, consumers=2, persistent=True, full_first=True)),
    (200, 200, 128, False, dict(persistent=True, overlap=0, full_first=True, **HINTS)),
    # overlap with ping-pong: every GEMM issue a turn (the next tile's first S too)
    (300, 300, 128, False, dict(overlap=1, pingpong=True, early_rescale=True)),
    (300, 300, 128, True, dict(persistent=True, overlap=1, pingpong=True, full_first=True)),
    (300, 250, 64, False, dict(block_m=192, consumers=3, persistent=True, overlap=1,
                               pingpong=True)),
    (300, 300, 128, False, dict(overlap=2, pingpong=True)),
]  # fmt: skip


@pytest.mark.parametrize("seed", [None, 5], ids=["in-order", "shuffled"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}x{c[1]}-d{c[2]}-causal{c[3]}")
def test_first_tile_variants_on_the_interpreter(case, seed):
    sq, skv, d, causal, kw = case
    q, k, v = S.random_qkv(torch, 1, 2, 1, sq, skv, d, "float16")
    kernel = FlashAttention(tile=0, dim=d, group=2, causal=causal, num_sms=3, **kw)
    o = torch.full_like(q, float("nan"))
    with tilus.option.scoped(interpret=True, schedule_seed=seed):
        o, lse = flash_attention(q, k, v, causal=causal, out=o, scale=0.3, kernel=kernel)
    ro, rl = S.reference(q, k, v, causal, 0.3)
    assert S.max_error(o, ro) < 2e-2, S.max_error(o, ro)
    assert S.max_error(lse, rl) < 1e-3


@pytest.mark.parametrize(
    "kw, fragment",
    [
        (dict(overlap=1, early_s1=True, full_first=True), "full_first needs early_s1=False"),
        (dict(overlap=2, full_first=True), "full_first needs early_s1=False and overlap 0 or 1"),
        (dict(suspend_ns=0), "suspend_ns must be a positive int, got 0"),
        (dict(consumer_suspend_ns=1.5), "consumer_suspend_ns must be a positive int, got 1.5"),
    ],
)
def test_bad_first_tile_and_hint_arguments_are_refused(kw, fragment):
    q, k, v = S.random_qkv(torch, 1, 2, 1, 40, 40, 128, "float16")
    kernel = FlashAttention(tile=0, dim=128, group=2, persistent=True, pingpong=False, **kw)
    with pytest.raises(tilus.TilusArgumentError, match=fragment):  # checked at its first call
        with tilus.option.scoped(interpret=True):
            flash_attention(q, k, v, kernel=kernel)


@needs_nvrtc
def test_hinted_full_first_kernel_builds_without_serialized_wgmma():
    # the branch of full_first comes after wait_group(0): ptxas keeps the wgmma pipelined
    kernel = FlashAttention(tile=0, dim=128, full_first=True, suspend_ns=300)
    args = (1, 1, 1024, 1024, 0.1) + (tilus.void_p,) * 4 + (tilus.float32,)
    ck = tilus.compile(kernel, *args)
    ck = ck[0] if isinstance(ck, list) else ck
    assert not ck.wgmma_serialized
    assert "mbarrier.try_wait.parity.relaxed.cta.shared::cta.b64 p, [%1], %2, %3;" in ck.source


GPU_FIRST = [  # ragged sizes (and one KV tile or less): both branches of full_first
    (333, 517, 128, False, dict(full_first=True, num_sms=5), "float16"),
    (333, 517, 128, False, dict(full_first=True, num_sms=5), "bfloat16"),
    (300, 100, 128, False, dict(full_first=True, num_sms=5), "float16"),
    (333, 333, 128, True, dict(persistent=True, pingpong=False, overlap=1, full_first=True,
                               num_sms=5), "float16"),
    (1000, 1234, 64, False, dict(full_first=True), "float16"),
    (333, 517, 128, False, dict(suspend_ns=100, num_sms=5), "float16"),
    (333, 517, 128, False, dict(suspend_ns=1000, consumer_suspend_ns=100, num_sms=5), "bfloat16"),
    (333, 517, 128, False, dict(full_first=True, suspend_ns=1000, num_sms=5), "float16"),
    (333, 517, 128, False, dict(pingpong=True, num_sms=5), "float16"),
    (333, 517, 128, False, dict(pingpong=True, early_rescale=True, full_first=True, num_sms=5),
     "bfloat16"),
    (333, 333, 128, True, dict(persistent=True, overlap=1, pingpong=True, early_rescale=True,
                               num_sms=5), "float16"),
    (1000, 1234, 64, False, dict(block_m=192, consumers=3, persistent=True, overlap=1,
                                 pingpong=True, num_sms=5), "float16"),
    (333, 517, 128, False, dict(overlap=2, pingpong=True, num_sms=5), "float16"),
]  # fmt: skip


@needs_gpu
@pytest.mark.gpu
@pytest.mark.parametrize("case", GPU_FIRST, ids=lambda c: "-".join(f"{k}{v}" for k, v in c[4].items()) + f"-{c[0]}x{c[1]}d{c[2]}c{int(c[3])}-{c[5]}")  # fmt: skip
def test_gpu_first_tile_variants(case):
    sq, skv, d, causal, kw, dtype = case
    q, k, v = S.random_qkv(torch, 2, 4, 2, sq, skv, d, dtype, "cuda")
    scale = S.default_scale(d, None)
    ro, rl = gpu_reference(torch, q, k, v, causal, scale)
    kernel = FlashAttention(tile=0, dim=d, dtype=dtype, causal=causal, group=2, **kw)
    check_forward(torch, flash_attention, q, k, v, causal, kernel, (ro, rl))


def test_the_spaces_full_first_gives_way_to_arguments_it_does_not_fit():
    # head dim 64's tile 0 has full_first; overlap=2 (its first softmax runs during a P V) or
    # early_s1 drop it, as a tile's overlap gives way; given explicitly, they conflict
    def ff(**kw):
        k = FlashAttention(tile=0, dim=64, **kw)
        return k.instance(k.configs[0]).full_first

    assert ff() and not ff(causal=True)  # causal: not measured with it
    assert not ff(persistent=True, overlap=2)
    assert not ff(persistent=True, overlap=1, early_s1=True)
