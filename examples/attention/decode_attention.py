"""Decode attention (flash-decoding): a few query tokens per sequence against a KV cache.

``q [batch, heads, nq, dim]`` (``nq`` new tokens per sequence, usually 1), a contiguous KV cache
``k, v [batch, heads_kv, max_len, dim]`` of which sequence ``b`` uses its first ``lens[b]``
positions, ``o`` like ``q`` and ``lse [batch, heads, nq]``. Every query token attends to all
``lens[b]`` keys of its sequence (the new tokens are already in the cache).

One token per head leaves a GEMM with almost no rows, so the work is spread over the KV length
instead: ``DecodeAttention`` gives each block one KV head and one of ``splits`` chunks of the
cache, and its tile holds every query row of that KV head (``heads / heads_kv`` heads times
``nq`` tokens, padded to WGMMA's 64 rows; TMA zero-fills the padding), so the chunk of K and V is
read from memory once for all of them. A producer warp streams K and V tiles through a ring of
shared stages with TMA (Q's copy first: it needs no sequence length); a consumer warp group computes ``S = Q K^T`` and ``O += P V`` by WGMMA
with the online softmax between them, and writes its partial ``O`` (float32, normalized) and
``LSE`` per split. ``DecodeCombine`` then merges the splits of each row with weights
``exp(lse_s - max lse)`` (empty chunks have ``lse = -inf`` and weigh nothing). With one split
(enough sequences and KV heads to fill the SMs) the split kernel writes ``o`` and ``lse``
itself and the combine is not launched. A config whose Q tile and ring fit in 112 KiB runs two
blocks an SM (``blocks``; registers capped for two), so that with several waves of blocks one
block's start and end overlap the other's stream.

Run ``python examples/attention/decode_attention.py``: on the interpreter without a GPU, on CUDA
with one, checked against a float64 reference.
"""

from __future__ import annotations

import sys
from pathlib import Path

import tilus
from tilus import bfloat16, float16, float32, int32, void_p
from tilus.utils import cdiv

if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
from attention_support import (  # noqa: E402
    check_attention_args,
    default_scale,
    random_qkv,
    reference_decode,
    report_decode,
)
from flash_attention import LN2, LOG2E  # noqa: E402
from flash_tiles import Ring  # noqa: E402

ROWS = 64  # WGMMA's M: the query rows of one KV head, padded
MAX_SPLITS = 64  # the combine kernel's tile of splits
TWO_BLOCK_SMEM = 112 * 1024  # Q and the ring of each of two blocks an SM (228 KiB an SM, 1 KiB
# of it reserved per block, 1 KiB left for the barriers)


class Outputs(tilus.Class):
    """Where a split kernel's block stores its O and LSE: the partial ones (``gpo``, ``gplse``
    [parts, rows, ...]) for ``DecodeCombine``, or with ``direct`` (one split: every block has
    its whole sequence) the output ``go``, ``glse`` [batch * heads_kv, rows, ...] at ``bkv``."""

    def __init__(self, gpo, gplse, go, glse, direct, bkv):
        self.gpo = gpo
        self.gplse = gplse
        self.go = go
        self.glse = glse
        self.direct = direct
        self.bkv = bkv


class DecodeBase(tilus.Script):
    """What the split kernels share: the consumer warp group's loop over the KV tiles."""

    def outputs(self, gpo, gplse, direct, o_ptr, lse_ptr, heads, rows, bkv):
        """The ``Outputs`` of a block: views of the output ``o`` and ``lse`` beside the
        partial ones (``heads`` = batch x heads_kv)."""
        go = self.global_view(o_ptr, dtype=self.dtype, shape=[heads, rows, self.dim])
        glse = self.global_view(lse_ptr, dtype=float32, shape=[heads, rows, 1])
        return Outputs(gpo, gplse, go, glse, direct, bkv)

    def kv_range(self, glens, seq, chunk: int32, bn: int):
        """The block's chunk of sequence ``seq``'s keys: its first position, how many of its
        ``chunk`` positions the sequence has (its length from ``glens``) and their tiles."""
        seq_len: int32 = self.load_global(glens, offsets=[seq], shape=[1]).item()
        start: int32 = self.blockIdx.x * chunk
        count: int32 = max(min(seq_len, start + chunk) - start, 0)
        n_kv: int32 = cdiv(count, bn)
        return start, count, n_kv

    def ring_tiles(self, bn: int, stages: int, sub: int = 1):
        """The Q tile, the K and V rings of ``stages`` tiles of ``bn`` positions (with ``sub``
        > 1 each stage is ``sub`` tiles ``[stages, sub, bn / sub, dim]``, one TMA box each), Q's
        barrier, the K barriers and the ring's phases."""
        sq = self.shared_tensor(dtype=self.dtype, shape=[ROWS, self.dim])
        shape = [stages, bn, self.dim] if sub == 1 else [stages, sub, bn // sub, self.dim]
        sk = self.shared_tensor(dtype=self.dtype, shape=shape)
        sv = self.shared_tensor(dtype=self.dtype, shape=shape)
        qbar = self.mbarrier.alloc([1])
        kfull = self.mbarrier.alloc([1] * stages)
        return sq, sk, sv, qbar, kfull, Ring(stages, 1)

    def arm_stage(self, kfull, ring, k_bytes: int, v_bytes: int) -> int32:
        """The producer's next stage, armed: wait until the consumer has freed it, then expect
        ``k_bytes`` of K on its K barrier and ``v_bytes`` of V on its full barrier (one thread
        arms both). Returns the stage."""
        st = ring.stage
        self.mbarrier.wait(ring.empty[st], phase=ring.phase ^ 1, sem="relaxed")
        with self.single_thread():
            self.mbarrier.arrive_and_expect_tx(kfull[st], transaction_bytes=k_bytes)
            self.mbarrier.arrive_and_expect_tx(ring.full[st], transaction_bytes=v_bytes)
        return st

    def produce(self, gk, gv, sk, sv, kfull, ring, bkv, start, n_kv):
        """The producer warp's loop: K and V tiles ``start + j * block_n`` of KV head ``bkv``
        (``n_kv`` of them) into the ring, K on ``kfull``, V on ``ring.full``."""
        bn = self.block_n
        for j in self.range(n_kv):
            self.arm_stage(kfull, ring, sk[ring.stage].nbytes, sv[ring.stage].nbytes)
            self.tma.global_to_shared(
                src=gk,
                dst=sk[ring.stage],
                offsets=[bkv, start + j * bn, 0],
                dims=[1, 2],
                mbarrier=kfull[ring.stage],
            )
            self.tma.global_to_shared(
                src=gv,
                dst=sv[ring.stage],
                offsets=[bkv, start + j * bn, 0],
                dims=[1, 2],
                mbarrier=ring.full[ring.stage],
            )
            ring.advance()

    def attend(self, sq, sk, sv, qbar, kfull, ring, count, n_kv, scale_log2, out, part):
        """Attend the Q tile ``sq`` to the ``count`` keys streamed through the ring (``n_kv``
        tiles: K lands on ``kfull``, V on ``ring.full``) and store O and LSE: the partial ones of
        ``part`` into ``out.gpo, out.gplse``, or with one split (``out.direct``) the output of
        KV head ``out.bkv`` itself into ``out.go, out.glse``; run by the consumer warp group."""
        dt, dim, bn = self.dtype, self.dim, self.block_n
        o = self.register_tensor(dtype=float32, shape=[ROWS, dim], init=0.0)
        m = self.register_tensor(dtype=float32, shape=[ROWS, 1], init=-float("inf"))
        lsum = self.register_tensor(dtype=float32, shape=[ROWS, 1], init=0.0)
        cols = self.register_tensor(dtype=int32, shape=[bn], init=lambda c: c)
        self.mbarrier.wait(qbar[0], phase=0)
        for j in self.range(n_kv):
            stage = ring.stage
            s = self.register_tensor(dtype=float32, shape=[ROWS, bn], init=0.0)
            self.mbarrier.wait(kfull[stage], phase=ring.phase)
            self.wgmma.fence()
            self.wgmma.mma(sq, sk[stage].transpose(), s)
            self.wgmma.commit_group()
            self.wgmma.wait_group(0)
            s = s * scale_log2
            if (j + 1) * bn > count:  # the ragged last tile of the chunk
                s = self.where(cols < count - j * bn, s, -float("inf"))
            m_new = self.maximum(m, self.max(s, dim=1, keepdim=True))
            p = self.exp2(s - m_new)
            alpha = self.exp2(m - m_new)
            self.assign(lsum, lsum * alpha + self.sum(p, dim=1, keepdim=True))
            self.assign(m, m_new)
            self.assign(o, o * alpha)
            pa = self.cast(p, dt)  # P stays in registers: the A operand of P @ V
            self.mbarrier.wait(ring.full[stage], phase=ring.phase)
            self.wgmma.fence()
            self.wgmma.mma(pa, sv[stage], o)
            self.wgmma.commit_group()
            self.wgmma.wait_group(0)
            with self.single_thread():
                self.mbarrier.arrive(ring.empty[stage])
            ring.advance()
        self.finish(o, m, lsum, out, part)

    def attend_pairs(self, sq, sk, sv, qbar, kfull, ring, count, n_kv, scale_log2, out, part):
        """``attend`` for stages of two tiles (``sk, sv [stages, 2, bn / 2, dim]``, two pages
        of a paged cache): ``S`` is two WGMMAs into two accumulators (the second issued when
        the first retires), one softmax step covers both, and ``O += P V`` is two WGMMAs in one
        group, so a stage costs the consumer one round of barrier waits, row reductions and
        rescales, as a ``bn``-position tile does."""
        dt, dim, half = self.dtype, self.dim, self.block_n // 2
        o = self.register_tensor(dtype=float32, shape=[ROWS, dim], init=0.0)
        m = self.register_tensor(dtype=float32, shape=[ROWS, 1], init=-float("inf"))
        lsum = self.register_tensor(dtype=float32, shape=[ROWS, 1], init=0.0)
        cols = self.register_tensor(dtype=int32, shape=[half], init=lambda c: c)
        self.mbarrier.wait(qbar[0], phase=0)
        for j in self.range(n_kv):
            stage = ring.stage
            s0 = self.register_tensor(dtype=float32, shape=[ROWS, half], init=0.0)
            self.mbarrier.wait(kfull[stage], phase=ring.phase)
            self.wgmma.fence()
            self.wgmma.mma(sq, sk[stage, 0].transpose(), s0)
            self.wgmma.commit_group()
            self.wgmma.wait_group(0)
            # the second S after the first retires (issued together, ptxas serializes every
            # WGMMA of the kernel); the first tile's scale and mask run while it computes
            s1 = self.register_tensor(dtype=float32, shape=[ROWS, half], init=0.0)
            self.wgmma.fence()
            self.wgmma.mma(sq, sk[stage, 1].transpose(), s1)
            self.wgmma.commit_group()
            s0 = s0 * scale_log2
            if (2 * j + 1) * half > count:  # the ragged last stage
                s0 = self.where(cols < count - 2 * j * half, s0, -float("inf"))
            top0 = self.max(s0, dim=1, keepdim=True)
            self.wgmma.wait_group(0)
            s1 = s1 * scale_log2
            if (2 * j + 2) * half > count:  # its second tile may have no valid position
                s1 = self.where(cols < count - (2 * j + 1) * half, s1, -float("inf"))
            m_new = self.maximum(m, self.maximum(top0, self.max(s1, dim=1, keepdim=True)))
            p0 = self.exp2(s0 - m_new)
            p1 = self.exp2(s1 - m_new)
            alpha = self.exp2(m - m_new)
            rows_sum = self.sum(p0, dim=1, keepdim=True) + self.sum(p1, dim=1, keepdim=True)
            self.assign(lsum, lsum * alpha + rows_sum)
            self.assign(m, m_new)
            self.assign(o, o * alpha)
            pa0 = self.cast(p0, dt)
            pa1 = self.cast(p1, dt)
            self.mbarrier.wait(ring.full[stage], phase=ring.phase)
            self.wgmma.fence()
            self.wgmma.mma(pa0, sv[stage, 0], o)
            self.wgmma.mma(pa1, sv[stage, 1], o)
            self.wgmma.commit_group()
            self.wgmma.wait_group(0)
            with self.single_thread():
                self.mbarrier.arrive(ring.empty[stage])
            ring.advance()
        self.finish(o, m, lsum, out, part)

    def finish(self, o, m, lsum, out, part):
        """Normalize ``o`` and store it with the LSE (see ``attend``)."""
        dt = self.dtype
        # an empty chunk: o = 0, lse = -inf (it then weighs nothing in the combine)
        o = o * (1.0 / self.maximum(lsum, 1e-30))
        lse = (m + self.log2(lsum)) * LN2
        if out.direct:  # one split: no chunk is empty and no combine is needed
            self.store_global(out.go, self.cast(o, dt), offsets=[out.bkv, 0, 0], dims=[1, 2])
            self.store_global(out.glse, lse, offsets=[out.bkv, 0, 0], dims=[1, 2])
        else:
            self.store_global(out.gpo, o, offsets=[part, 0, 0], dims=[1, 2])
            self.store_global(out.gplse, lse, offsets=[part, 0, 0], dims=[1, 2])


@tilus.autotune("block_n, num_stages", [(128, 3), (128, 2), (64, 6), (64, 4)])
class DecodeAttention(DecodeBase):
    """Partial attention of one (sequence, KV head, KV chunk): all its query rows at once.
    ``blocks``: blocks an SM; by default two where Q and the ring fit in ``TWO_BLOCK_SMEM``
    (registers are then capped for two), so that with several waves of blocks one block's
    start and end overlap the other's stream (b64s3 at head dim 128: measured no faster than
    b128s2 on the H200, so not in the space). ``prefetch``: also prefetch the ring's first
    tiles into L2 before the lengths are read (measured 0.2-2% slower after a clean flush, so
    off by default)."""

    def __init__(self, block_n, num_stages, dim=128, dtype="float16", blocks=None, prefetch=False):
        super().__init__()
        self.block_n = block_n
        self.num_stages = num_stages
        self.prefetch = prefetch
        ring = (ROWS + 2 * num_stages * block_n) * dim * 2  # Q and the K, V stages, 16-bit
        if blocks is None:
            blocks = 2 if ring <= TWO_BLOCK_SMEM else 1
        self.blocks = blocks
        self.dim = dim
        if blocks not in (1, 2):
            raise tilus.TilusArgumentError(f"blocks must be 1 or 2 (blocks an SM), got {blocks}")
        if blocks == 2 and ring > TWO_BLOCK_SMEM:
            raise tilus.TilusArgumentError(
                f"blocks = 2 (two blocks an SM) needs Q and the ring in {TWO_BLOCK_SMEM} bytes; "
                f"block_n {block_n} x {num_stages} stages at head dim {dim} need {ring}"
            )
        self.dtype = {"float16": float16, "bfloat16": bfloat16}[dtype]

    def __call__(
        self,
        batch: int32,
        heads_kv: int32,
        rows: int32,
        max_len: int32,
        splits: int32,
        chunk: int32,
        scale: float32,
        q_ptr: void_p,
        k_ptr: void_p,
        v_ptr: void_p,
        lens_ptr: ~int32,
        po_ptr: ~float32,
        plse_ptr: ~float32,
        direct: int32,
        o_ptr: void_p,
        lse_ptr: ~float32,
    ):
        dt, dim, bn, stages = self.dtype, self.dim, self.block_n, self.num_stages
        self.attrs.blocks = [splits, heads_kv, batch]
        self.attrs.warps = 5  # a consumer warp group + the producer warp
        self.attrs.min_blocks = self.blocks  # __launch_bounds__: registers for two an SM
        gq = self.global_view(q_ptr, dtype=dt, shape=[batch * heads_kv, rows, dim])
        gk = self.global_view(k_ptr, dtype=dt, shape=[batch * heads_kv, max_len, dim])
        gv = self.global_view(v_ptr, dtype=dt, shape=[batch * heads_kv, max_len, dim])
        glens = self.global_view(lens_ptr, dtype=int32, shape=[batch])
        gpo = self.global_view(po_ptr, dtype=float32, shape=[batch * heads_kv * splits, rows, dim])
        gplse = self.global_view(
            plse_ptr, dtype=float32, shape=[batch * heads_kv * splits, rows, 1]
        )
        bkv: int32 = self.blockIdx.z * heads_kv + self.blockIdx.y
        part: int32 = bkv * splits + self.blockIdx.x
        out = self.outputs(gpo, gplse, direct, o_ptr, lse_ptr, batch * heads_kv, rows, bkv)
        sq, sk, sv, qbar, kfull, ring = self.ring_tiles(bn, stages)
        scale_log2: float32 = scale * LOG2E
        with self.thread_group(128, 32):  # what needs no length: Q (and the L2 prefetch)
            with self.single_thread():
                self.mbarrier.arrive_and_expect_tx(qbar[0], transaction_bytes=sq.nbytes)
            self.tma.global_to_shared(
                src=gq, dst=sq, offsets=[bkv, 0, 0], dims=[1, 2], mbarrier=qbar[0]
            )
            if self.prefetch:  # the ring's first tiles start their way from HBM now
                first: int32 = self.blockIdx.x * chunk
                for t in self.range(stages, unroll="all"):
                    self.tma.prefetch(
                        src=gk, like=sk[0], offsets=[bkv, first + t * bn, 0], dims=[1, 2]
                    )
                    self.tma.prefetch(
                        src=gv, like=sv[0], offsets=[bkv, first + t * bn, 0], dims=[1, 2]
                    )
        start, count, n_kv = self.kv_range(glens, self.blockIdx.z, chunk, bn)

        with self.thread_group(128, 32):  # the producer warp
            self.produce(gk, gv, sk, sv, kfull, ring, bkv, start, n_kv)

        with self.warp_group(0, 4):  # the consumer warp group
            self.attend(sq, sk, sv, qbar, kfull, ring, count, n_kv, scale_log2, out, part)


@tilus.autotune("block_n, num_stages", [(64, 3), (64, 2), (32, 6), (32, 4)])
class DecodeAttentionWide(DecodeAttention):
    """``DecodeAttention`` for head dim 256: tiles whose ring fits in shared memory beside the
    32 KiB Q tile (the default space's rings need 256 KiB and more at this width)."""


def decode_kernel(dim: int = 128, dtype: str = "float16", **config):
    """The split kernel for a head dim: ``DecodeAttention``, or ``DecodeAttentionWide`` at 256."""
    cls = DecodeAttentionWide if dim > 128 else DecodeAttention
    return cls(dim=dim, dtype=dtype, **config)


@tilus.autotune("warps", [4])
class DecodeCombine(tilus.Script):
    """``o[row] = sum_s w_s po[s, row] / sum_s w_s``, ``w_s = exp(lse_s - max lse)``."""

    def __init__(self, warps, dim=128, dtype="float16", max_splits=MAX_SPLITS):
        super().__init__()
        self.warps = warps
        self.dim = dim
        self.dtype = {"float16": float16, "bfloat16": bfloat16}[dtype]
        self.max_splits = max_splits

    def __call__(
        self,
        parts: int32,
        rows: int32,
        splits: int32,
        po_ptr: ~float32,
        plse_ptr: ~float32,
        o_ptr: void_p,
        lse_ptr: ~float32,
    ):
        ns, dim = self.max_splits, self.dim
        self.attrs.blocks = [rows, parts]
        self.attrs.warps = self.warps
        gpo = self.global_view(po_ptr, dtype=float32, shape=[parts, splits, rows, dim])
        gplse = self.global_view(plse_ptr, dtype=float32, shape=[parts, splits, rows, 1])
        go = self.global_view(o_ptr, dtype=self.dtype, shape=[parts, rows, dim])
        glse = self.global_view(lse_ptr, dtype=float32, shape=[parts, rows, 1])
        part: int32 = self.blockIdx.y
        row: int32 = self.blockIdx.x
        idx = self.register_tensor(dtype=int32, shape=[ns, 1], init=lambda s, c: s)
        lse = self.load_global(gplse, offsets=[part, 0, row, 0], shape=[ns, 1], dims=[1, 3])
        lse = self.where(idx < splits, lse, -float("inf"))
        top = self.max(lse, dim=0, keepdim=True)
        w = self.exp2((lse - top) * LOG2E)
        po = self.load_global(gpo, offsets=[part, 0, row, 0], shape=[ns, dim], dims=[1, 3])
        total = self.sum(w, dim=0, keepdim=True)
        out = self.sum(po * w, dim=0, keepdim=True) * (1.0 / total)
        self.store_global(go, self.cast(out, self.dtype), offsets=[part, row, 0], dims=[1, 2])
        self.store_global(glse, top + self.log(total), offsets=[part, row, 0], dims=[1, 2])


def num_splits(batch: int, heads_kv: int, max_len: int, block_n: int, sms: int = 132) -> int:
    """Chunks per sequence: the fewest whose blocks fill at least 90% of the SMs' last wave
    (one block per SM), each chunk at least 4 KV tiles long, at most 64 chunks."""
    parts = batch * heads_kv
    best, best_eff = 1, 0.0
    for s in range(1, max(1, min(MAX_SPLITS, cdiv(max_len, 4 * block_n))) + 1):
        blocks = parts * s
        eff = blocks / (cdiv(blocks, sms) * sms)
        if eff >= 0.9:
            return s
        if eff > best_eff:
            best, best_eff = s, eff
    return best


def split_grid(q, k, max_seq_len: int, splits=None) -> tuple[int, int]:
    """``(splits, chunk)``: the chunks of the cache ``k`` [b, hkv, max_len, d] each sequence of
    up to ``max_seq_len`` positions is split into (``splits`` if given, else ``num_splits``
    for the SMs of ``q``'s device), and their length in positions (whole tiles of every
    config's ``block_n``)."""
    return split_chunks(k.shape[0], k.shape[1], max_seq_len, q, splits)


def split_chunks(b: int, hkv: int, max_seq_len: int, q, splits=None) -> tuple[int, int]:
    """``(splits, chunk)`` for ``b`` sequences of ``hkv`` KV heads each (see :func:`split_grid`;
    the paged kernel's too): ``splits`` if given (refused outside ``[1, MAX_SPLITS]``), else
    ``num_splits`` for the SMs of ``q``'s device, made whole tiles of every config's
    ``block_n``."""
    import torch

    bn = 128  # chunks are whole tiles of every config's block_n (and whole pages)
    sms = torch.cuda.get_device_properties(q.device).multi_processor_count if q.is_cuda else 132
    if splits is not None and not 1 <= splits <= MAX_SPLITS:
        raise tilus.TilusArgumentError(f"splits must be in [1, {MAX_SPLITS}], got {splits}")
    splits = splits or num_splits(b, hkv, max_seq_len, bn, sms)
    chunk = cdiv(cdiv(max_seq_len, splits), bn) * bn
    return cdiv(max_seq_len, chunk), chunk


def decode_launcher(
    q, k, v, lens, max_seq_len=None, scale=None, kernel=None, splits=None, out=None, combine=None
):
    """Check the arguments once and return ``run() -> (o, lse)``, which launches the split
    kernel and the combine on preallocated buffers. q [b, h, nq, d], the cache k, v
    [b, hkv, max_len, d], ``lens`` int32 [b]; ``max_seq_len`` (the largest of ``lens``) sizes
    the splits: when it is not given it is read from ``lens`` (a device synchronization).
    With one split the split kernel writes ``o`` and ``lse`` itself and the combine is skipped
    (``combine=True`` runs it anyway)."""
    import torch

    b, h, hkv, nq, max_len, d, dt = check_attention_args(q, k, v)
    rows = (h // hkv) * nq
    if rows > ROWS:
        raise tilus.TilusArgumentError(
            f"q: {h // hkv} query heads per KV head x {nq} tokens = {rows} rows; at most {ROWS}"
        )
    if tuple(lens.shape) != (b,) or str(lens.dtype) not in ("torch.int32", "int32"):
        raise tilus.TilusArgumentError(
            f"lens must be int32 of shape [{b}], got {lens.dtype} {list(lens.shape)}"
        )
    if max_seq_len is None:
        lo, hi = int(lens.min()), int(lens.max())
    else:
        lo, hi = 1, int(max_seq_len)
    if lo < 1 or hi > max_len:
        raise tilus.TilusArgumentError(
            f"lens must be in [1, {max_len}] (the KV cache k holds {max_len} positions), "
            f"got lengths from {lo} to {hi}"
        )
    kernel = kernel or decode_kernel(d, dt)
    merge = DecodeCombine(dim=d, dtype=dt)
    splits, chunk = split_grid(q, k, hi, splits)
    dev = q.device
    po = torch.zeros((b * hkv * splits, rows, d), dtype=torch.float32, device=dev)  # once
    plse = torch.zeros((b * hkv * splits, rows), dtype=torch.float32, device=dev)
    o = out if out is not None else torch.empty_like(q)
    lse = torch.empty((b, h, nq), dtype=torch.float32, device=dev)
    sc = default_scale(d, scale)

    direct = int(splits == 1 and not combine)
    # without the direct path the split kernel leaves o and lse to the combine: it is handed
    # the partial buffers there instead (unwritten outputs would fail the tuner's checks)
    fin = (o, lse) if direct else (po, plse)

    def run():
        kernel(b, hkv, rows, max_len, splits, chunk, sc, q, k, v, lens, po, plse, direct, *fin)
        if not direct:
            merge(b * hkv, rows, splits, po, plse, o, lse)
        return o, lse

    return run


def decode_attention(q, k, v, lens, scale=None, kernel=None, splits=None, out=None):
    """``(o, lse)`` of q [b, h, nq, d] against the first ``lens[b]`` positions of the cache
    k, v [b, hkv, max_len, d] (torch tensors; CPU ones run on the interpreter)."""
    return decode_launcher(q, k, v, lens, None, scale, kernel, splits, out)()


CPU_CASES = [  # (batch, heads, heads_kv, nq, max_len, dim, dtype, lens)
    (2, 4, 1, 1, 300, 128, "float16", [300, 77]),
    (1, 4, 2, 2, 200, 64, "bfloat16", [129]),
]
GPU_CASES = [
    (16, 32, 8, 1, 8192, 128, "float16", None),
    (8, 16, 16, 1, 4000, 128, "bfloat16", None),
    (4, 8, 1, 4, 3000, 64, "float16", None),
]


def main() -> int:
    """Check decode attention against a float64 reference; returns the exit status."""
    import torch

    on_gpu = torch.cuda.is_available() and not tilus.option.get_option("interpret")
    device = "cuda" if on_gpu else "cpu"
    ok_all = True
    for b, h, hkv, nq, max_len, d, dt, lens in GPU_CASES if on_gpu else CPU_CASES:
        q, k, v = random_qkv(torch, b, h, hkv, nq, max_len, d, dt, device)
        if lens is None:  # ragged: from a quarter of the cache to all of it
            lens = torch.randint(max_len // 4, max_len + 1, (b,)).tolist()
        lens_t = torch.tensor(lens, dtype=torch.int32, device=device)
        o = torch.full_like(q, float("nan"))
        o, lse = decode_attention(q, k, v, lens_t, out=o)
        ro, rl = reference_decode(q, k, v, lens, default_scale(d, None))
        label = f"{b}x{h}/{hkv}x{nq} cache {max_len} d{d} {dt}"
        ok_all &= report_decode(label, o, lse, ro, rl)
    return 0 if ok_all else 1


if __name__ == "__main__":
    sys.exit(main())
