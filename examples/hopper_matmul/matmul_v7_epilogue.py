"""Matmul V7's epilogues: C tiles through shared memory and TMA stores, and split-K partials."""

from matmul_v4 import MatmulWGMMAV4

from tilus import float32, int32, uint32

#: elements of a band of stream-K's final sum (32 fp32 a thread of a 128-thread group)
SK_BAND = 4096


class V7Epilogue(MatmulWGMMAV4):
    """The epilogue helpers of :class:`matmul_v7.MatmulV7` (not a kernel of its own)."""

    def add_parts(self, acc, ws, cnt, flag, tile: int32, part: int32, split: int32):
        """Split-K: combine the K parts of tile ``tile`` (``ws``/``cnt`` entries: a C tile, or a
        coop group's half of one). Every part publishes its fp32 sums ``acc`` and counts itself
        in on the tile's counter (acq_rel); the last part to count in gathers the total into
        ``acc`` and sets the counter back to 0. Returns whether this part is the last (it then
        stores C). ``partials="store"``: each part stores its sums into its own workspace slot
        (plain stores) and the last one loads and adds the others' slots; ``"add"``:
        every part adds into the tile's sums (``red.add``, one L2 atomic per element) and the
        last reads the total while clearing it (an atomic exchange with zeros)."""
        if self.partials == "store":
            self.store_global(ws[tile, part], acc, offsets=[0, 0])
        else:
            self.atomic.global_add(ws[tile], acc)
        self.sync()  # every thread's sums are written before the count is released
        seen = self.count_in(cnt, tile, split, flag)
        last: int32 = 0
        if seen[0] == split - 1:
            last = 1
            if self.partials == "store":
                for p in self.range(split):
                    if p != part:
                        other = self.load_global(ws[tile, p], offsets=[0, 0], shape=acc.shape)
                        self.add(acc, other, out=acc)
            else:
                zeros = self.register_tensor(dtype=float32, shape=acc.shape, init=0.0)
                self.atomic.global_exch(ws[tile], zeros, output=acc)  # read the sums, clear them
        self.sync()  # flag is read by every thread before the next unit writes it
        return last

    def count_in(self, cnt, entry: int32, parts: int32, flag):
        """Count one of the ``parts`` parts of a split tile in on counter ``cnt[entry]``
        (acq_rel, gpu scope: the group's sums, written before, are released; the last part
        acquires everyone's). Returns the count before this part (``parts - 1``: the last,
        which sets the counter back to 0 for the next launch), read by every thread of the
        group through the shared word ``flag``."""
        with self.single_warp(0):
            idx = self.register_tensor(dtype=int32, shape=[1], init=entry)
            one = self.register_tensor(dtype=int32, shape=[1], init=1)
            old = self.atomic.global_scatter_add(
                cnt, dim=0, indices=idx, values=one, sem="acq_rel", scope="gpu"
            )
            self.store_shared(flag, old)
            if old[0] == parts - 1:  # the last part: leave the count clean for the next launch
                back = self.register_tensor(dtype=int32, shape=[1], init=-parts)
                self.atomic.global_scatter_add(cnt, dim=0, indices=idx, values=back, scope="gpu")
        self.sync()
        return self.load_shared(flag)

    def sk_publish(self, acc, ws, cnt, flag, gc, entry: int32, part: int32, parts: int32,
                   group: int, row: int32, col: int32):  # fmt: skip
        """Stream-K, after the mainloop of a part of a split tile: store its fp32 sums ``acc``
        in the block's slot and count in on the tile's counter ``entry``; the last of the
        ``parts`` to count in sums the slots and stores C at ``(row, col)`` itself. A block's
        slots: one for the part that starts its run inside a tile (``part`` > 0), one for the
        part that ends it there; in coop one per group of each."""
        groups = 2 if self.coop else 1
        rows = acc.shape[0]
        slot = self.sk_slot(self.blockIdx.x, part, group)
        self.store_global(ws, acc, offsets=[slot * rows, 0])
        self.sync()  # every thread's sums are written before the count is released
        seen = self.count_in(cnt, entry * groups + group, parts, flag)
        if seen[0] == parts - 1:
            self.sk_reduce(ws, gc, part, parts, rows, group, row, col)
        self.sync()  # flag is read by every thread before the next unit writes it

    def sk_slot(self, block: int32, part: int32, group: int):
        """Stream-K: the workspace slot of block ``block``'s part ``part`` of a split tile
        (part 0 ends the block's run inside the tile, a later part starts it there), consumer
        group ``group``'s half in coop."""
        groups = 2 if self.coop else 1
        return (2 * block + min(part, 1)) * groups + group

    def sk_reduce(self, ws, gc, part: int32, parts: int32, rows: int, group: int, row: int32,
                  col: int32):  # fmt: skip
        """Stream-K: sum the fp32 slots of a split tile's ``parts`` parts (this block's is
        part ``part``) band by band and store them into C: the accumulator is dead by now, so
        a band of 32 fp32 a thread and part fits beside it. Each load waits on L2, so the
        parts' loads of a band are issued together (the loop unrolled) and bands are few."""
        band = min(SK_BAND // self.block_n, rows)  # rows of a band (32 fp32 a thread)
        first = self.blockIdx.x - part  # the blocks holding the parts: first, first + 1, ...
        for r in self.range(0, rows, band):
            tot = self.register_tensor(dtype=float32, shape=[band, self.block_n], init=0.0)
            for p in self.range(parts, unroll=4):
                slot = self.sk_slot(first + p, p, group)
                x = self.load_global(ws, offsets=[slot * rows + r, 0], shape=tot.shape)
                self.add(tot, x, out=tot)
            self.store_global(gc, self.cast(tot, dtype=self.dtype), offsets=[row + r, col])

    def c_staging(self):
        """The shared C tile of one consumer group (coop: its 64-row half; in a cluster the
        tile's two 64-row halves)."""
        bm, bn = self.block_m, self.block_n
        shape = [2, bm // 2, bn] if self.cluster_n == 2 and not self.coop else [bm, bn]
        if self.coop:
            shape = [bm // 2, bn]
        return self.shared_tensor(dtype=self.dtype, shape=shape)

    def epilogue_tile(self, group: int, turn, phase: uint32, store: int32, sc, gc, acc, acc_hi,
                      row: int32, col: int32):  # fmt: skip
        """Store the group's tile when ``store`` is 1. ``epilogue="tma1"``: the two groups
        share one ``sc`` and take turns on it, each unit (stored or not) waiting for its turn
        on ``turn[group]`` (parity ``phase``) and passing it on ``turn[1 - group]`` once its
        TMA store has read ``sc``."""
        if self.epilogue == "tma1":
            self.mbarrier.wait(turn[group], phase=phase)
        if store == 1:
            self.store_tile(sc, gc, acc, acc_hi, row, col, turn, group)
        elif self.epilogue == "tma1":
            self.mbarrier.arrive(turn[1 - group])  # every thread: the barrier counts 128

    def store_tile(self, sc, gc, acc, acc_hi, row: int32, col: int32, turn=None, group=0):
        """Store the C tile ``acc`` (in a cluster ``acc`` and ``acc_hi``, its 64-row halves; in
        coop a group's half) at ``(row, col)`` of C in the input type: through the shared tile
        ``sc`` and a TMA store, waited for only before the next tile overwrites ``sc``; with
        ``epilogue="direct"`` straight from registers with global stores (no shared C tile, so
        the ring can be deeper)."""
        if self.epilogue == "direct":
            self.store_global(gc, self.cast(acc, dtype=self.dtype), offsets=[row, col])
            if self.cluster_n == 2 and not self.coop:
                self.store_global(gc, self.cast(acc_hi, dtype=self.dtype), offsets=[row + 64, col])
        else:
            if self.epilogue == "tma":
                with self.single_thread():  # the previous tile's TMA store has read sc
                    self.tma.wait_group(0, read=True)
                self.sync()
            if self.cluster_n == 1 or self.coop:
                self.store_shared(sc, self.cast(acc, dtype=self.dtype))
            else:
                self.store_shared(sc[0], self.cast(acc, dtype=self.dtype))
                self.store_shared(sc[1], self.cast(acc_hi, dtype=self.dtype))
            self.fence.proxy_async(space="shared")  # generic writes visible to TMA
            self.sync()
            with self.single_thread():
                if self.cluster_n == 1 or self.coop:
                    self.tma.shared_to_global(sc, gc, offsets=[row, col])
                else:
                    for h in self.range(2, unroll=2):
                        self.tma.shared_to_global(sc[h], gc, offsets=[row + h * 64, col])
                self.tma.commit_group()
                if self.epilogue == "tma1":
                    self.tma.wait_group(0, read=True)
            if self.epilogue == "tma1":  # sc read: the other group's turn, passed by all
                self.sync()
                self.mbarrier.arrive(turn[1 - group])

    def finish_stores(self):
        """Before the group exits: its last TMA store has read ``sc``."""
        if self.epilogue == "tma":  # tma1 waits after every store
            with self.single_thread():
                self.tma.wait_group(0, read=True)
