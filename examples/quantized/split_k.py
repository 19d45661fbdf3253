"""Split-K for the W4A16 kernels: the parts of a tile meet in an fp32 workspace."""

from __future__ import annotations

from tilus import float16, int32


class SplitKParts:
    """``add_parts`` for a Script whose blocks own rows of W (64 a warp group, or 128) and
    ``block_m`` columns of the accumulator ``Y^T`` and whose blocks along grid z are the parts
    of the K range (``self.split_k`` of them)."""

    def add_parts(self, acc, ws, cnt, tile: int32, part: int32, split: int32):
        """Split-K: publish this part's sums in the workspace and count the part in; the last
        part of the N tile to arrive adds the others' sums into ``acc`` and resets the count.
        Returns whether this part is the last (it then stores Y)."""
        rows = acc.shape[0]  # the rows of W the tile holds (64 a warp group)
        flag = self.shared_tensor(dtype=int32, shape=[1])
        self.store_global(ws, acc, offsets=[(tile * self.split_k + part) * rows, 0])
        self.sync()  # every thread's sums are written before the count is released
        with self.single_warp(0):
            idx = self.register_tensor(dtype=int32, shape=[1], init=tile)
            one = self.register_tensor(dtype=int32, shape=[1], init=1)
            old = self.atomic.global_scatter_add(
                cnt, dim=0, indices=idx, values=one, sem="acq_rel", scope="gpu"
            )
            self.store_shared(flag, old)
            if old[0] == split - 1:  # the last part: leave the count clean for the next launch
                back = self.register_tensor(dtype=int32, shape=[1], init=-split)
                self.atomic.global_scatter_add(cnt, dim=0, indices=idx, values=back, scope="gpu")
        self.sync()
        seen = self.load_shared(flag)
        last: int32 = 0
        if seen[0] == split - 1:
            last = 1
            for p in self.range(split):
                if p != part:
                    acc += self.load_global(
                        ws,
                        offsets=[(tile * self.split_k + p) * rows, 0],
                        shape=[rows, self.block_m],
                    )
        return last

    def finish_parts(self, acc, ws, cnt, part: int32, split: int32, gyt, on: int32, om: int32):
        """Store the tile's sums ``acc`` into ``gyt`` (``Y^T``) at ``[on, om]``, after the
        split-K meeting (``add_parts``) when the K range is split: only the last part
        stores."""
        store: int32 = 1
        if self.split_k > 1:
            if split > 1:
                store = self.add_parts(acc, ws, cnt, self.blockIdx.x, part, split)
        if store == 1:
            self.store_global(gyt, self.cast(acc, float16), offsets=[on, om])
