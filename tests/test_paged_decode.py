"""Paged decode attention: every config on the interpreter (in order and shuffled, protocol
checks on) at ragged sizes over shuffled pages, its argument checks, NVRTC builds, GPU runs."""

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
from paged_decode import (  # noqa: E402
    PagedDecodeAttention,
    paged_decode_attention,
    paged_decode_launcher,
    paged_tiles,
)

from tests.cuda.conftest import needs_gpu, needs_nvrtc  # noqa: E402


def _check(q, kc, vc, table, lens, o, lse):
    ro, rl = S.paged_reference(q, kc, vc, table, lens, S.default_scale(q.shape[-1], None))
    assert S.max_error(o, ro) < 2e-2, S.max_error(o, ro)
    assert S.max_error(lse, rl) < 1e-3, S.max_error(lse, rl)


CASES = [  # (b, h, hkv, nq, page_size, d, dtype, lens, splits)
    # GQA 2:1, a sequence of one whole page, one of a ragged part of one, three splits
    (3, 4, 2, 1, 64, 64, "float16", [150, 64, 37], 3),
    # page 128: the 64-position tiles read half pages; two tokens x 4 heads per KV head
    (2, 4, 1, 2, 128, 64, "bfloat16", [300, 129], 2),
    # head dim 256: 64- and 32-position tiles (two and four a page), one split
    (1, 2, 1, 1, 64, 256, "float16", [100], 1),
]


@pytest.mark.parametrize("seed", [None, 4], ids=["in-order", "shuffled"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"page{c[4]}-d{c[5]}-{c[6]}")
def test_every_config_on_the_interpreter(case, seed):
    b, h, hkv, nq, ps, d, dt, lens, splits = case
    q, kc, vc, table = S.random_paged(torch, b, h, hkv, nq, lens, ps, d, dt)
    lt = torch.tensor(lens, dtype=torch.int32)
    o = torch.full_like(q, float("nan"))
    with tilus.option.scoped(interpret=True, interpret_all_configs=True, schedule_seed=seed):
        o, lse = paged_decode_attention(q, kc, vc, table, lt, out=o, splits=splits)
    _check(q, kc, vc, table, lens, o, lse)


@pytest.mark.parametrize("tile", [0, 1])
def test_two_page_stages_read_no_page_past_the_sequence(tile):
    # page 64, stages of two pages; sequences of 3 pages and 1: the last stage's second page is
    # past the sequence, and the slot after its pages names a page of NaNs, which must not be
    # read (the first page is loaded twice and masked; V's NaNs would survive a zero P)
    lens = [190, 40]
    q, kc, vc, table = S.random_paged(torch, 2, 4, 2, 1, lens, 64, 64, "float16")
    spare = sorted(set(range(kc.shape[0])) - set(table.flatten().tolist()))[0]
    kc[spare], vc[spare] = float("nan"), float("nan")
    table[0, 3], table[1, 1] = spare, spare
    assert PagedDecodeAttention(page_size=64, dim=64).instance(dict(tile=tile)).pair
    kernel = PagedDecodeAttention(tile=tile, page_size=64, dim=64)
    lt = torch.tensor(lens, dtype=torch.int32)
    with tilus.option.scoped(interpret=True, schedule_seed=3):
        o, lse = paged_decode_attention(q, kc, vc, table, lt, kernel=kernel, splits=1)
    _check(q, kc, vc, table, lens, o, lse)


def test_one_split_writes_the_output_itself():
    lens = [200, 77]
    q, kc, vc, table = S.random_paged(torch, 2, 8, 2, 1, lens, 128, 64, "float16")
    lt = torch.tensor(lens, dtype=torch.int32)
    with tilus.option.scoped(interpret=True, schedule_seed=5):
        o, lse = paged_decode_launcher(q, kc, vc, table, lt, out=torch.full_like(q, 7.0))()
        _check(q, kc, vc, table, lens, o, lse)
        o2, lse2 = paged_decode_launcher(q, kc, vc, table, lt, combine=True)()
    assert S.max_error(o2, S.to_f64(o)) < 1e-2 and S.max_error(lse2, S.to_f64(lse)) < 1e-6


def test_the_tile_spaces():
    assert all(bn == 128 or bn == 64 for bn, _ in paged_tiles(128))
    # page 64: 64-position tiles, or 128 (two pages a stage)
    assert all(bn in (64, 128) for bn, _ in paged_tiles(64)) and (128, 3) in paged_tiles(64)
    assert all(bn <= 64 and bn * st * 4 * 256 <= 196608 for bn, st in paged_tiles(128, 256))
    assert len(PagedDecodeAttention(page_size=64).configs) == 4
    with pytest.raises(tilus.TilusArgumentError, match="page_size must be 64 or 128"):
        PagedDecodeAttention(page_size=32).instance(dict(tile=0))
    with pytest.raises(
        tilus.TilusArgumentError, match="must be 32, 64 or 128 and divide page_size"
    ):
        PagedDecodeAttention(page_size=128, block_n=96).instance(dict(tile=0))
    with pytest.raises(tilus.TilusArgumentError, match=r"two pages a stage\) needs page_size 64"):
        PagedDecodeAttention(page_size=64, dim=256, block_n=128).instance(dict(tile=0))


def _args(b=2, lens=(100, 30), ps=64, **kw):
    q, kc, vc, table = S.random_paged(torch, b, 4, 2, 1, list(lens), ps, 64, "float16")
    return dict(q=q, k_cache=kc, v_cache=vc, block_table=table, lens=torch.tensor(lens).int()) | kw


def _refused(fragment, **args):
    with pytest.raises(tilus.TilusArgumentError, match=fragment) as info:
        paged_decode_attention(**args)
    return str(info.value)


def test_bad_block_table_entries_are_refused_naming_the_entry():
    a = _args()
    table = a["block_table"].clone()
    table[1, 0] = a["k_cache"].shape[0]  # one past the last page
    msg = _refused(r"block_table\[1, 0\] = 5 is not a page of k_cache \(5 pages\)", **a | dict(
        block_table=table))  # fmt: skip
    assert "sequence 1 uses its first 1 entries" in msg
    table[1, 0] = -1
    _refused(r"block_table\[1, 0\] = -1", **a | dict(block_table=table))
    # slots past a sequence's pages are never read, so anything may be there (-7 here)
    assert int(a["block_table"][1, 1]) == -7
    with tilus.option.scoped(interpret=True):
        paged_decode_attention(**a)


def test_an_unchecked_bad_entry_reads_zeros_never_outside_the_cache():
    # documented: without the host check, a page outside the pool reads as zeros (TMA's fill)
    a = _args(lens=(100, 30))
    table = a["block_table"].clone()
    table[0, 1] = 10_000
    with tilus.option.scoped(interpret=True):
        o, lse = paged_decode_attention(**a | dict(block_table=table), check_pages=False)
    kc, vc = a["k_cache"].clone(), a["v_cache"].clone()
    zero = int(a["block_table"][0, 1])
    kc[zero], vc[zero] = 0, 0  # the same page, zeroed, through the good table
    _check(a["q"], kc, vc, a["block_table"], [100, 30], o, lse)


@pytest.mark.parametrize(
    "change, fragment",
    [
        (dict(lens=torch.tensor([200, 30]).int()), r"lens\[0\] = 200 is more than block_table"),
        (dict(lens=torch.tensor([100, 0]).int()), "lens must be at least 1"),
        (dict(lens=torch.tensor([100, 30])), "lens must be int32, got int64"),
        (dict(lens=torch.tensor([100]).int()), r"lens must be int32 of shape \[2\]"),
        (dict(block_table=torch.zeros(2, 2)), "block_table must be int32, got float32"),
        (dict(block_table=torch.zeros(3, 2).int()), r"block_table must be \[batch = 2"),
        (dict(block_table=torch.zeros(4, 2).int()[::2]), "block_table must be contiguous"),
        (dict(k_cache=torch.zeros(5, 2, 64, 64).float()), "k_cache must be float16, got float32"),
        (dict(v_cache=torch.zeros(5, 2, 64, 32).half()), "k_cache .* and v_cache .* one shape"),
        (
            dict(
                k_cache=torch.zeros(5, 2, 32, 64).half(), v_cache=torch.zeros(5, 2, 32, 64).half()
            ),
            "page_size 32 is not supported",
        ),
        (
            dict(
                k_cache=torch.zeros(5, 3, 64, 64).half(), v_cache=torch.zeros(5, 3, 64, 64).half()
            ),
            "heads_kv = 3 must divide the 4 query heads",
        ),
        (dict(q=torch.zeros(2, 4, 1, 128).half()), "k_cache has head dim 64, q has head dim 128"),
        (dict(q=torch.zeros(2, 4, 64).half()), "q must be 4-D"),
        (dict(q=torch.zeros(2, 4, 1, 64).float()), "q must be float16 or bfloat16"),
        (dict(q=torch.zeros(2, 64, 3, 64).half()), "32 query heads per KV head x 3 tokens"),
        (dict(splits=65), r"splits must be in \[1, 64\]"),
        (
            dict(block_table=torch.zeros(2, 3, device="meta").int()),
            "block_table is on meta, q on cpu",
        ),
        (dict(kernel=PagedDecodeAttention(page_size=128)), "kernel was built for page_size 128"),
    ],
    ids=lambda x: x if isinstance(x, str) else None,
)
def test_bad_arguments_name_the_argument(change, fragment):
    _refused(fragment, **_args() | change)


def test_the_launcher_checks_max_seq_len_against_the_table():
    a = _args()
    with pytest.raises(
        tilus.TilusArgumentError, match="max_seq_len = 193 is more than block_table"
    ):
        paged_decode_launcher(**a, max_seq_len=193)


@needs_nvrtc
@pytest.mark.parametrize("ps, d", [(64, 128), (128, 128), (128, 256)])
def test_builds_without_spills(ps, d):
    v, f, i = tilus.void_p, tilus.float32, tilus.int32
    for tile in range(4):
        ck = tilus.compile(
            PagedDecodeAttention(tile=tile, page_size=ps, dim=d),
            *(16, 8, 4, 4096, 64, 2, 4096, 0.1, v, v, v, i, i, f, f, 0, v, f),
        )
        ck = ck[0] if isinstance(ck, list) else ck
        assert ck.resources["spill_store_bytes"] == 0 and not ck.wgmma_serialized, ck.log
        bn, st = paged_tiles(ps, d)[tile]
        blocks = 2 if (64 + 2 * st * bn) * d * 2 <= 112 * 1024 else 1  # page 64's b64s3: two
        assert f"__launch_bounds__(160, {blocks})" in ck.source, (tile, blocks)
        assert ck.resources["registers"] * 160 * blocks <= 65536


# --- GPU: every config at ragged sizes against the float64 reference, outputs poisoned --------


@needs_gpu
@pytest.mark.gpu
@pytest.mark.parametrize("ps, dtype, d", [(64, "float16", 128), (128, "bfloat16", 128),
                                          (128, "float16", 64), (64, "float16", 256),
                                          (64, "bfloat16", 64)])  # fmt: skip
def test_gpu_every_config(ps, dtype, d):
    lens = [2000, 1, 777, 1500, 129]
    q, kc, vc, table = S.random_paged(torch, 5, 16, 4, 1, lens, ps, d, dtype, "cuda")
    lt = torch.tensor(lens, dtype=torch.int32, device="cuda")
    want = S.paged_reference(
        q.cpu(), kc.cpu(), vc.cpu(), table.cpu(), lens, S.default_scale(d, None)
    )
    # first the tuned kernel (its configs built at once, timed and cross-checked) with the
    # combine, o poisoned; then each config pinned
    kernel = PagedDecodeAttention(page_size=ps, dim=d, dtype=dtype)
    o = torch.full_like(q, float("nan"))
    o, lse = paged_decode_attention(q, kc, vc, table, lt, kernel=kernel, out=o, splits=5)
    torch.cuda.synchronize()
    assert S.max_error(o, want[0]) < 2e-2 and S.max_error(lse, want[1]) < 1e-3
    for tile in range(4):
        kernel = PagedDecodeAttention(tile=tile, page_size=ps, dim=d, dtype=dtype)
        for splits in (None, 5):
            o = torch.full_like(q, float("nan"))
            o, lse = paged_decode_attention(
                q, kc, vc, table, lt, kernel=kernel, out=o, splits=splits
            )
            torch.cuda.synchronize()
            assert not o.isnan().any(), (tile, splits)
            assert S.max_error(o, want[0]) < 2e-2, (tile, splits)
            assert S.max_error(lse, want[1]) < 1e-3, (tile, splits)
