"""The decode kernel's memory floor: the same K and V bytes streamed through its ring, no math.

``DecodeStream`` is ``DecodeAttention`` (``examples/attention/decode_attention.py``) with the
consumer's work taken out: the same grid (a block per sequence, KV head and chunk of the
cache), the same producer warp issuing the same TMA boxes into the same ring of shared stages,
and a consumer warp group that only waits for each stage to land and frees it. Its time is
what the pipeline needs to move the KV cache from HBM into shared memory, so it is the floor
the decode kernel is measured against in ``bench/attention.py`` (the ``floor: stream`` rows
and the ``x floor`` ratio), under either L2 flush: after the dirty flush it includes the
write-back of the flush's dirty lines, which any kernel reading those bytes pays.

Its autotune space is the decode kernel's, so the tuned floor is the fastest ring of the
space.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO / "examples" / "attention") not in sys.path:
    sys.path.insert(0, str(REPO / "examples" / "attention"))

from decode_attention import DecodeAttention, split_grid  # noqa: E402

import tilus  # noqa: E402
from tilus import int32, void_p  # noqa: E402


@tilus.autotune("block_n, num_stages", [(128, 3), (128, 2), (64, 6), (64, 4)])
class DecodeStream(DecodeAttention):
    """``DecodeAttention``'s grid, producer and ring; the consumer waits on each stage's K and V
    barriers and frees the stage, touching no data (``__init__`` as ``DecodeAttention``'s)."""

    def __call__(
        self,
        batch: int32,
        heads_kv: int32,
        max_len: int32,
        splits: int32,
        chunk: int32,
        k_ptr: void_p,
        v_ptr: void_p,
        lens_ptr: ~int32,
    ):
        dt, dim, bn, stages = self.dtype, self.dim, self.block_n, self.num_stages
        self.attrs.blocks = [splits, heads_kv, batch]
        self.attrs.warps = 5  # a consumer warp group + the producer warp, as the decode kernel
        self.attrs.min_blocks = self.blocks
        gk = self.global_view(k_ptr, dtype=dt, shape=[batch * heads_kv, max_len, dim])
        gv = self.global_view(v_ptr, dtype=dt, shape=[batch * heads_kv, max_len, dim])
        glens = self.global_view(lens_ptr, dtype=int32, shape=[batch])
        bkv: int32 = self.blockIdx.z * heads_kv + self.blockIdx.y
        _sq, sk, sv, _qbar, kfull, ring = self.ring_tiles(bn, stages)
        start, _count, n_kv = self.kv_range(glens, self.blockIdx.z, chunk, bn)
        with self.thread_group(128, 32):  # the producer warp, as in DecodeAttention
            self.produce(gk, gv, sk, sv, kfull, ring, bkv, start, n_kv)
        with self.warp_group(0, 4):  # the consumer: wait for the stage, free it
            for _j in self.range(n_kv):
                self.mbarrier.wait(kfull[ring.stage], phase=ring.phase)
                self.mbarrier.wait(ring.full[ring.stage], phase=ring.phase)
                with self.single_thread():
                    self.mbarrier.arrive(ring.empty[ring.stage])
                ring.advance()


def stream_launcher(q, k, v, lens, max_seq_len, kernel=None):
    """``run()`` streaming the cache ``k, v [b, hkv, max_len, d]`` with the grid (splits and
    chunk) that ``decode_launcher`` picks for the same arguments."""
    b, hkv, max_len, d = k.shape
    if d > 128:
        raise tilus.TilusArgumentError(f"the stream floor takes head dims up to 128, got {d}")
    dt = str(k.dtype).replace("torch.", "")
    kernel = kernel or DecodeStream(dim=d, dtype=dt)
    splits, chunk = split_grid(q, k, max_seq_len)

    def run():
        kernel(b, hkv, max_len, splits, chunk, k, v, lens)

    return run
