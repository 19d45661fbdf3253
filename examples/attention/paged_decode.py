"""Decode attention against a paged KV cache (vLLM-style pages and a block table).

``q [batch, heads, nq, dim]`` as in ``decode_attention``; the cache is a pool of pages
``k_cache, v_cache [num_pages, heads_kv, page_size, dim]``; sequence ``b`` stores its logical
page ``p`` (positions ``p * page_size ...``) in physical page ``block_table[b, p]`` (int32
``[batch, max_pages]``) and uses its first ``lens[b]`` positions. ``o`` like ``q``, ``lse
[batch, heads, nq]``.

Why heads before positions in a page: one page of one KV head is then one contiguous
``page_size x dim`` block (16 or 32 KiB at dim 128), the same tile a contiguous cache
``[batch, heads_kv, len, dim]`` gives, so a TMA box reads whole 128-byte lines of one region and
the contiguous cache is the special case of pages laid out in order. (``[num_pages, page_size,
heads_kv, dim]`` would stride a head's rows ``heads_kv * dim`` apart.)

``PagedDecodeAttention`` is ``DecodeAttention`` with a different producer: each KV tile is one
page (``block_n == page_size``) or part of one (64-position tiles of 128-position pages, and
32- or 64-position tiles at head dim 256, where shared memory holds no more); the
producer warp reads the tile's physical page from the block table (one scalar global load,
issued before it waits for the free stage so the load's latency hides behind the wait) and
issues the TMA copies of K and V at that page. Pages of 64 positions can also fill a stage two
at a time (``block_n = 128``: four TMA copies a stage, two page-table loads, and the consumer's
``attend_pairs``: two ``S`` WGMMAs, one softmax step and one ``P V`` group for both), so the
consumer pays its per-stage waits and reductions once per 128 positions, as with 128-position
pages. Splits over the sequence, the online softmax, the partial O/LSE and ``DecodeCombine``
are ``decode_attention``'s.

Bad block tables: by default ``paged_decode_attention`` checks, in one torch reduction before
the launch, that every entry a sequence uses (its first ``cdiv(lens[b], page_size)``) is a page
of the cache, and raises naming the entry. Unchecked (``check_pages=False``, the launcher's
default), an entry outside ``[0, num_pages)`` reads zeros for that page's K and V (TMA fills a
box outside the tensor with zeros): wrong output for that sequence, but never memory outside
the cache. Entries past ``cdiv(lens[b], page_size)`` are never read.

Run ``python examples/attention/paged_decode.py``: on the interpreter without a GPU, on CUDA
with one, checked against a float64 reference that gathers the pages.
"""

from __future__ import annotations

import sys
from pathlib import Path

import tilus
from tilus import bfloat16, float16, float32, int32, void_p
from tilus.errors import TilusArgumentError
from tilus.utils import cdiv

if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
from attention_support import (  # noqa: E402
    DTYPES,
    default_scale,
    dtype_name,
    paged_reference,
    random_paged,
    report_decode,
    tensor_arg,
)
from decode_attention import (  # noqa: E402
    ROWS,
    TWO_BLOCK_SMEM,
    DecodeBase,
    DecodeCombine,
    split_chunks,
)
from flash_attention import LOG2E  # noqa: E402

PAGE_SIZES = (64, 128)


def paged_tiles(page_size: int, dim: int = 128) -> list[tuple[int, int]]:
    """(block_n, num_stages) candidates for a page size: a tile is a page or part of one (at
    head dim 256 a ring of 64- or 32-position tiles, beside the 32 KiB Q tile)."""
    if dim > 128:
        return [(64, 3), (64, 2), (32, 6), (32, 4)]
    if page_size == 128:  # in order of the H200 times at batch 16-64, KV 4k-16k
        return [(128, 2), (128, 3), (64, 4), (64, 6)]
    return [(128, 3), (128, 2), (64, 3), (64, 4)]  # 128: two pages a stage


@tilus.autotune("tile", [0, 1, 2, 3])
class PagedDecodeAttention(DecodeBase):
    """Partial attention of one (sequence, KV head, KV chunk) over a paged cache; ``tile`` picks
    one of ``paged_tiles(page_size)`` (or pass ``block_n`` and ``num_stages``)."""

    def __init__(
        self, tile, page_size=128, dim=128, dtype="float16", block_n=None, num_stages=None
    ):
        super().__init__()
        if page_size not in PAGE_SIZES:
            raise TilusArgumentError(f"page_size must be 64 or 128, got {page_size}")
        bn, stages = paged_tiles(page_size, dim)[tile]
        self.block_n = block_n or bn
        self.num_stages = num_stages or stages
        # a stage of two pages: 64-position pages read as the 128-position tiles of page 128
        self.pair = self.block_n == 2 * page_size
        if self.pair and (page_size != 64 or dim > 128):
            raise TilusArgumentError(
                f"block_n = {self.block_n} (two pages a stage) needs page_size 64 and head dim "
                f"64 or 128, got page_size {page_size}, head dim {dim}"
            )
        if self.block_n not in (32, 64, 128) or (page_size % self.block_n and not self.pair):
            raise TilusArgumentError(
                f"block_n = {self.block_n} must be 32, 64 or 128 and divide page_size = "
                f"{page_size} (or be twice it: two pages a stage)"
            )
        self.page_size = page_size
        self.dim = dim
        ring = (ROWS + 2 * self.num_stages * self.block_n) * dim * 2  # Q and the ring, 16-bit
        self.blocks = 2 if ring <= TWO_BLOCK_SMEM else 1  # as in DecodeAttention
        self.dtype = {"float16": float16, "bfloat16": bfloat16}[dtype]

    def __call__(
        self,
        batch: int32,
        heads_kv: int32,
        rows: int32,
        num_pages: int32,
        max_pages: int32,
        splits: int32,
        chunk: int32,
        scale: float32,
        q_ptr: void_p,
        k_ptr: void_p,
        v_ptr: void_p,
        table_ptr: ~int32,
        lens_ptr: ~int32,
        po_ptr: ~float32,
        plse_ptr: ~float32,
        direct: int32,
        o_ptr: void_p,
        lse_ptr: ~float32,
    ):
        dt, dim, bn, stages, ps = (
            self.dtype,
            self.dim,
            self.block_n,
            self.num_stages,
            self.page_size,
        )
        self.attrs.blocks = [splits, heads_kv, batch]
        self.attrs.warps = 5  # a consumer warp group + the producer warp
        self.attrs.min_blocks = self.blocks
        gq = self.global_view(q_ptr, dtype=dt, shape=[batch * heads_kv, rows, dim])
        gk = self.global_view(k_ptr, dtype=dt, shape=[num_pages, heads_kv, ps, dim])
        gv = self.global_view(v_ptr, dtype=dt, shape=[num_pages, heads_kv, ps, dim])
        gtable = self.global_view(table_ptr, dtype=int32, shape=[batch, max_pages])
        glens = self.global_view(lens_ptr, dtype=int32, shape=[batch])
        gpo = self.global_view(po_ptr, dtype=float32, shape=[batch * heads_kv * splits, rows, dim])
        gplse = self.global_view(
            plse_ptr, dtype=float32, shape=[batch * heads_kv * splits, rows, 1]
        )
        seq: int32 = self.blockIdx.z
        head: int32 = self.blockIdx.y
        bkv: int32 = seq * heads_kv + head
        part: int32 = bkv * splits + self.blockIdx.x
        out = self.outputs(gpo, gplse, direct, o_ptr, lse_ptr, batch * heads_kv, rows, bkv)
        sq, sk, sv, qbar, kfull, ring = self.ring_tiles(bn, stages, 2 if self.pair else 1)
        scale_log2: float32 = scale * LOG2E
        with self.thread_group(128, 32):  # Q's copy first: it does not need the lengths
            with self.single_thread():
                self.mbarrier.arrive_and_expect_tx(qbar[0], transaction_bytes=sq.nbytes)
            self.tma.global_to_shared(
                src=gq, dst=sq, offsets=[bkv, 0, 0], dims=[1, 2], mbarrier=qbar[0]
            )
        if self.pair:  # the first stage's pages, loaded beside the sequence's length
            slot: int32 = self.blockIdx.x * chunk // ps  # < max_pages: chunks start before hi
            nxt0: int32 = self.load_global(gtable, offsets=[seq, slot], shape=[1], dims=[1]).item()
            nxt1: int32 = self.load_global(
                gtable, offsets=[seq, min(slot + 1, max_pages - 1)], shape=[1], dims=[1]
            ).item()
        start, count, n_kv = self.kv_range(glens, seq, chunk, bn)

        with self.thread_group(128, 32):  # the producer warp
            if self.pair:
                self.produce_pairs(gk, gv, gtable, sk, sv, kfull, ring, seq, head, slot, count,
                                   n_kv, max_pages, nxt0, nxt1)  # fmt: skip
            else:
                self.produce_tiles(gk, gv, gtable, sk, sv, kfull, ring, seq, head, start, n_kv)

        with self.warp_group(0, 4):  # the consumer warp group
            if self.pair:
                self.attend_pairs(sq, sk, sv, qbar, kfull, ring, count, n_kv, scale_log2, out,
                                  part)  # fmt: skip
            else:
                self.attend(sq, sk, sv, qbar, kfull, ring, count, n_kv, scale_log2, out, part)

    def produce_tiles(self, gk, gv, gtable, sk, sv, kfull, ring, seq, head, start, n_kv):
        """The producer of a ring of one page (or part of one) a stage: per tile, its physical
        page from the block table (loaded before the wait for the free stage, so its latency
        hides there), then the TMA copies of K and V."""
        bn, ps = self.block_n, self.page_size
        for j in self.range(n_kv):
            pos: int32 = start + j * bn  # the tile's first position in the sequence
            page: int32 = self.load_global(
                gtable, offsets=[seq, pos // ps], shape=[1], dims=[1]
            ).item()
            row: int32 = pos % ps if bn < ps else 0  # a half page: which half
            self.arm_stage(kfull, ring, sk[ring.stage].nbytes, sv[ring.stage].nbytes)
            self.tma.global_to_shared(
                src=gk,
                dst=sk[ring.stage],
                offsets=[page, head, row, 0],
                dims=[2, 3],
                mbarrier=kfull[ring.stage],
            )
            self.tma.global_to_shared(
                src=gv,
                dst=sv[ring.stage],
                offsets=[page, head, row, 0],
                dims=[2, 3],
                mbarrier=ring.full[ring.stage],
            )
            ring.advance()

    def produce_pairs(self, gk, gv, gtable, sk, sv, kfull, ring, seq, head, slot, count, n_kv,
                      max_pages, nxt0, nxt1):  # fmt: skip
        """The producer of a ring whose stages hold two pages: four TMA copies a stage (K and V
        of each page), K's two on ``kfull``, V's two on ``ring.full``. The block table is read
        a stage ahead (``nxt0, nxt1``: the entries at ``slot`` and the next, the chunk's first
        stage, read with the sequence's length), so no stage waits for its entries. A stage
        whose second page is past the chunk's ``count`` positions loads its first page twice
        (masked by the consumer): no page past the sequence's is read, and no table entry past
        ``max_pages``."""
        ps = self.page_size
        for j in self.range(n_kv):
            page0: int32 = nxt0
            page1: int32 = nxt1 if j * 2 * ps + ps < count else nxt0
            if j + 1 < n_kv:  # the next stage's entries, while this one waits and issues
                at: int32 = slot + 2 * (j + 1)
                nxt0 = self.load_global(gtable, offsets=[seq, at], shape=[1], dims=[1]).item()
                nxt1 = self.load_global(
                    gtable, offsets=[seq, min(at + 1, max_pages - 1)], shape=[1], dims=[1]
                ).item()
            st = self.arm_stage(
                kfull, ring, 2 * sk[ring.stage, 0].nbytes, 2 * sv[ring.stage, 0].nbytes
            )
            self.tma.global_to_shared(
                src=gk, dst=sk[st, 0], offsets=[page0, head, 0, 0], dims=[2, 3], mbarrier=kfull[st]
            )
            self.tma.global_to_shared(
                src=gk, dst=sk[st, 1], offsets=[page1, head, 0, 0], dims=[2, 3], mbarrier=kfull[st]
            )
            self.tma.global_to_shared(
                src=gv, dst=sv[st, 0], offsets=[page0, head, 0, 0], dims=[2, 3],
                mbarrier=ring.full[st],
            )  # fmt: skip
            self.tma.global_to_shared(
                src=gv, dst=sv[st, 1], offsets=[page1, head, 0, 0], dims=[2, 3],
                mbarrier=ring.full[st],
            )  # fmt: skip
            ring.advance()


def check_paged_args(q, k_cache, v_cache, block_table, lens):
    """Check the shapes, dtypes and devices; return (b, h, hkv, nq, num_pages, page_size,
    max_pages, d, dtype)."""
    tensor_arg("q", q, 4)
    dt = dtype_name(q)
    if dt not in DTYPES:
        raise TilusArgumentError(f"q must be float16 or bfloat16, got {dt}")
    tensor_arg("k_cache", k_cache, 4, dt)
    tensor_arg("v_cache", v_cache, 4, dt)
    tensor_arg("block_table", block_table, 2, "int32")
    tensor_arg("lens", lens, 1, "int32")
    b, h, nq, d = q.shape
    if tuple(k_cache.shape) != tuple(v_cache.shape):
        raise TilusArgumentError(
            f"k_cache {list(k_cache.shape)} and v_cache {list(v_cache.shape)} must have one shape"
        )
    num_pages, hkv, ps, dk = k_cache.shape
    if dk != d:
        raise TilusArgumentError(f"k_cache has head dim {dk}, q has head dim {d}: they must match")
    if d not in (64, 128, 256):
        raise TilusArgumentError(f"q: head dim {d} is not supported (64, 128 or 256)")
    if ps not in PAGE_SIZES:
        raise TilusArgumentError(
            f"k_cache [num_pages, heads_kv, page_size, dim]: page_size {ps} is not supported "
            "(64 or 128)"
        )
    if hkv < 1 or h % hkv:
        raise TilusArgumentError(
            f"k_cache: heads_kv = {hkv} must divide the {h} query heads (grouped-query attention)"
        )
    if (h // hkv) * nq > ROWS:
        raise TilusArgumentError(
            f"q: {h // hkv} query heads per KV head x {nq} tokens = {(h // hkv) * nq} rows; "
            f"at most {ROWS}"
        )
    if nq < 1 or num_pages < 1:
        raise TilusArgumentError(f"empty input: q has {nq} tokens, k_cache {num_pages} pages")
    if block_table.shape[0] != b or block_table.shape[1] < 1:
        raise TilusArgumentError(
            f"block_table must be [batch = {b}, max_pages >= 1], got {list(block_table.shape)}"
        )
    if tuple(lens.shape) != (b,):
        raise TilusArgumentError(f"lens must be int32 of shape [{b}], got {list(lens.shape)}")
    for name, x in (("k_cache", k_cache), ("v_cache", v_cache), ("block_table", block_table),
                    ("lens", lens)):  # fmt: skip
        if getattr(x, "device", None) != getattr(q, "device", None):
            raise TilusArgumentError(f"{name} is on {x.device}, q on {q.device}: move it there")
    return b, h, hkv, nq, num_pages, ps, block_table.shape[1], d, dt


def _bad_entry(torch, block_table, lens, num_pages, ps):
    """The first (sequence, page slot, entry) a sequence uses that is not a page, else None
    (one reduction; the details are looked up only on failure)."""
    used = (
        torch.arange(block_table.shape[1], device=lens.device)[None, :]
        < ((lens.long() + ps - 1) // ps)[:, None]
    )
    bad = used & ((block_table < 0) | (block_table >= num_pages))
    if not bool(bad.any()):
        return None
    i, p = (int(x) for x in bad.nonzero()[0])
    return i, p, int(block_table[i, p])


def paged_decode_launcher(
    q,
    k_cache,
    v_cache,
    block_table,
    lens,
    max_seq_len=None,
    scale=None,
    kernel=None,
    splits=None,
    out=None,
    check_pages=None,
    combine=None,
):
    """Check the arguments once and return ``run() -> (o, lse)`` (the split kernel and the
    combine on preallocated buffers). ``max_seq_len`` (the largest of ``lens``) sizes the
    splits; not given, it is read from ``lens`` with a device synchronization, and the block
    table is checked too (``check_pages``, default: when ``max_seq_len`` is not given). With one
    split the combine is skipped (``combine=True`` runs it anyway)."""
    import torch

    b, h, hkv, nq, num_pages, ps, max_pages, d, dt = check_paged_args(
        q, k_cache, v_cache, block_table, lens
    )
    rows = (h // hkv) * nq
    cap = max_pages * ps
    if max_seq_len is None:
        lo, hi = int(lens.min()), int(lens.max())
        if hi > cap:
            i = int(lens.argmax())
            raise TilusArgumentError(
                f"lens[{i}] = {hi} is more than block_table holds: {max_pages} pages of "
                f"{ps} positions = {cap}"
            )
    else:
        lo, hi = 1, int(max_seq_len)
        if hi > cap:
            raise TilusArgumentError(
                f"max_seq_len = {hi} is more than block_table holds: {max_pages} pages of "
                f"{ps} positions = {cap}"
            )
    if lo < 1:
        raise TilusArgumentError(f"lens must be at least 1, got {lo}")
    if check_pages is None:
        check_pages = max_seq_len is None
    if check_pages:
        bad = _bad_entry(torch, block_table, lens, num_pages, ps)
        if bad is not None:
            i, p, e = bad
            raise TilusArgumentError(
                f"block_table[{i}, {p}] = {e} is not a page of k_cache ({num_pages} pages): "
                f"sequence {i} uses its first {cdiv(int(lens[i]), ps)} entries"
            )
    splits, chunk = split_chunks(b, hkv, hi, q, splits)
    kernel = kernel or PagedDecodeAttention(page_size=ps, dim=d, dtype=dt)
    if kernel.kwargs.get("page_size", 128) != ps:
        raise TilusArgumentError(
            f"kernel was built for page_size {kernel.kwargs.get('page_size', 128)}, "
            f"k_cache has pages of {ps}"
        )
    merge = DecodeCombine(dim=d, dtype=dt)
    dev = q.device
    po = torch.zeros((b * hkv * splits, rows, d), dtype=torch.float32, device=dev)  # once
    plse = torch.zeros((b * hkv * splits, rows), dtype=torch.float32, device=dev)
    o = out if out is not None else torch.empty_like(q)
    lse = torch.empty((b, h, nq), dtype=torch.float32, device=dev)
    sc = default_scale(d, scale)
    args = (b, hkv, rows, num_pages, max_pages, splits, chunk, sc)

    direct = int(splits == 1 and not combine)
    fin = (o, lse) if direct else (po, plse)  # as in decode_launcher: o is the combine's

    def run():
        kernel(*args, q, k_cache, v_cache, block_table, lens, po, plse, direct, *fin)
        if not direct:
            merge(b * hkv, rows, splits, po, plse, o, lse)
        return o, lse

    return run


def paged_decode_attention(
    q, k_cache, v_cache, block_table, lens, scale=None, kernel=None, splits=None, out=None,
    check_pages=True,
):  # fmt: skip
    """``(o, lse)`` of q [b, h, nq, d] against the first ``lens[b]`` positions of each
    sequence in the paged cache k_cache, v_cache [num_pages, hkv, page_size, d] through
    ``block_table`` int32 [b, max_pages] (torch tensors; CPU ones run on the interpreter).
    ``check_pages`` refuses a used block-table entry that is not a page (see the module)."""
    run = paged_decode_launcher(
        q, k_cache, v_cache, block_table, lens, None, scale, kernel, splits, out, check_pages
    )
    return run()


CPU_CASES = [  # (batch, heads, heads_kv, nq, page_size, dim, dtype, lens)
    (3, 4, 2, 1, 64, 64, "float16", [150, 64, 37]),
    (2, 4, 1, 2, 128, 128, "bfloat16", [300, 129]),
]
GPU_CASES = [
    (16, 32, 8, 1, 128, 128, "float16", 8192),
    (8, 16, 16, 1, 64, 128, "bfloat16", 4000),
    (4, 8, 1, 4, 64, 64, "float16", 3000),
]


def main() -> int:
    """Check paged decode attention against a float64 reference; returns the exit status."""
    import torch

    on_gpu = torch.cuda.is_available() and not tilus.option.get_option("interpret")
    device = "cuda" if on_gpu else "cpu"
    ok_all = True
    for b, h, hkv, nq, ps, d, dt, lens in GPU_CASES if on_gpu else CPU_CASES:
        if not isinstance(lens, list):  # ragged: from a quarter of the maximum to all of it
            lens = torch.randint(lens // 4, lens + 1, (b,)).tolist()
        q, kc, vc, table = random_paged(torch, b, h, hkv, nq, lens, ps, d, dt, device)
        lens_t = torch.tensor(lens, dtype=torch.int32, device=device)
        o = torch.full_like(q, float("nan"))
        o, lse = paged_decode_attention(q, kc, vc, table, lens_t, out=o)
        ro, rl = paged_reference(q, kc, vc, table, lens, default_scale(d, None))
        label = f"{b}x{h}/{hkv}x{nq} page {ps} d{d} {dt} lens {min(lens)}..{max(lens)}"
        ok_all &= report_decode(label, o, lse, ro, rl)
    return 0 if ok_all else 1


if __name__ == "__main__":
    sys.exit(main())
