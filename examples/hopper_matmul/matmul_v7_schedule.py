"""Matmul V7's work schedule: which units a persistent block runs (tiles, split-K parts, stream-K)."""

from matmul_v7_epilogue import V7Epilogue

from tilus import int32
from tilus.utils import cdiv

#: split-K is used only when M has at most this many tiles (M <= 256 with 64-row tiles), so that
#: the fp32 workspace of the partial sums has a size known when the kernel is built.
SPLIT_M_TILES = 4


class V7Schedule(V7Epilogue):
    """The unit schedule of :class:`matmul_v7.MatmulV7` (not a kernel of its own).

    A *unit* is what one consumer warp group computes in one go: a C tile, a pair of N tiles in
    a cluster, a split-K part of a tile, or with ``stream_k`` a run of K tiles of one C tile.
    ``unit_span`` gives the block's units as ``range(first, stop, step)`` and ``unit_work``
    what a unit computes.

    **Stream-K** (``stream_k=1``): with ``T`` C tiles on ``S`` blocks, plain persistent blocks
    take ``ceil(T / S)`` tiles each while some take one fewer, so the last wave leaves SMs idle
    (2048 tiles on 132 SMs: 15.5 tiles of work, 16 tiles of time; 64 tiles: half the SMs idle).
    Stream-K gives every block the same number of K tiles: the first ``T // S - 1`` waves run as
    whole tiles (round robin, so blocks running together share operands in L2); the remaining
    tiles (all of them when ``T < 2S``) are laid out as one sequence of K tiles and cut into
    ``S`` equal runs, one per block. A tile may so be cut between several consecutive blocks
    (more than two when a run is shorter than a tile). A block runs its run's tiles last to
    first; every part of a split tile stores its fp32 sums in a workspace slot of its own and
    counts itself in on the tile's counter, and the part that counts in last sums the slots
    and stores C (no block ever waits for another, so any number of blocks may be launched).
    With fewer K tiles in all than blocks, every tile is a unit of its own.
    """

    def first_unit(self):
        """The first work unit of the block (the same in both blocks of a cluster)."""
        return self.blockIdx.x // self.cluster_size

    def splits(self, num_m: int32, k_size: int):
        """How many K parts each tile has in this launch: ``split_k`` when M has at most
        ``SPLIT_M_TILES`` tiles, else 1; at most one part per K tile, and at most one per
        block (the parts of a tile, consecutive units, then run in different blocks: only
        the workspace and the count order them, and no block waits for another)."""
        k_tiles = cdiv(k_size, self.block_k)
        split: int32 = 1
        if self.split_k > 1:
            if num_m <= SPLIT_M_TILES:
                split = min(self.split_k, k_tiles, self.num_sms)
        return split

    def units(self, num_m: int32, num_n: int, split: int32):
        """How many work units the launch has (a unit: a C tile, a pair of M tiles in a
        cluster, or one K part of a tile)."""
        return cdiv(num_m, self.cluster_m) * cdiv(num_n, self.cluster_n) * split

    def sk_plan(self, num_m: int32, num_n: int, k_size: int):
        """Stream-K: ``(whole, iters, lo, hi, dp)``: the tiles run whole (the first waves),
        the K tiles of the rest, this block's run ``[lo, hi)`` of them and its whole tiles."""
        k_tiles = cdiv(k_size, self.block_k)
        sms = self.num_sms
        tiles = num_m * num_n
        whole: int32 = 0  # T // S - 1 waves of whole tiles leave S to 2S - 1 tiles
        if tiles >= 2 * sms:
            whole = (tiles // sms - 1) * sms
        if tiles * k_tiles < sms:  # too few K tiles to give every block one: every tile whole
            whole = tiles
        iters = (tiles - whole) * k_tiles
        b = self.blockIdx.x
        lo = b * iters // sms
        hi = (b + 1) * iters // sms
        dp: int32 = 0
        if b < whole:
            dp = (whole - b + sms - 1) // sms
        return whole, iters, lo, hi, dp

    def sk_owner(self, x: int32, iters: int32):
        """Stream-K: the block whose run holds K tile ``x`` of the streamed sequence (runs
        ``[b * iters // S, (b + 1) * iters // S)``, each at least one K tile long)."""
        return ((x + 1) * self.num_sms - 1) // iters

    def unit_span(self, num_m: int32, num_n: int, k_size: int, split: int32):
        """``(first, stop, step)``: the block's units are ``range(first, stop, step)``
        (``split``: the split-K parts of a tile, from :meth:`splits`)."""
        if self.stream_k:
            k_tiles = cdiv(k_size, self.block_k)
            _, _, lo, hi, dp = self.sk_plan(num_m, num_n, k_size)
            runs: int32 = 0  # the tiles that the block's run touches
            if hi > lo:
                runs = (hi - 1) // k_tiles - lo // k_tiles + 1
            span = (0, dp + runs, 1)
        else:
            span = (self.first_unit(), self.units(num_m, num_n, split), self.num_clusters)
        return span

    def unit_work(self, unit: int32, num_m: int32, num_n: int, k_size: int, split: int32):
        """``(m tile, n tile, first K tile, K tiles, entry, part, parts)`` of work unit
        ``unit``: ``parts`` > 1 when the tile's K tiles are split, this unit being part
        ``part``, its sums combined in workspace entry ``entry``. Split-K (``split`` parts):
        the parts of a tile are consecutive units, part ``p`` of ``s`` taking K tiles
        ``[p * T / s, (p + 1) * T / s)`` (``T`` K tiles: every part gets at least one)."""
        if self.stream_k:
            work = self.sk_work(unit, num_m, num_n, k_size)
        else:
            work = self.split_work(unit, num_m, num_n, k_size, split)
        return work

    def split_work(self, unit: int32, num_m: int32, num_n: int, k_size: int, split: int32):
        """:meth:`unit_work` without stream-K (whole tiles or split-K parts)."""
        k_tiles = cdiv(k_size, self.block_k)
        tile = unit
        part = 0
        k_lo = 0
        k_cnt = k_tiles
        if self.split_k > 1:
            tile = unit // split
            part = unit % split
            k_lo = part * k_tiles // split
            k_cnt = (part + 1) * k_tiles // split - k_lo
        m_tile, n_tile = self.coords(tile, num_m, num_n)
        return m_tile, n_tile, k_lo, k_cnt, tile, part, split

    def sk_work(self, unit: int32, num_m: int32, num_n: int, k_size: int):
        """:meth:`unit_work` with ``stream_k``: the block's whole tiles, then the tiles its
        run touches, last to first (the first and the last may be parts of tiles split with
        the neighbours, and a run shorter than a tile is one part of one tile). ``entry``:
        the split tile's counter, ``part`` of ``parts``: which of the consecutive blocks that
        hold its parts this one is."""
        k_tiles = cdiv(k_size, self.block_k)
        whole, iters, lo, hi, dp = self.sk_plan(num_m, num_n, k_size)
        tile: int32 = self.blockIdx.x + unit * self.num_sms
        part: int32 = 0
        parts: int32 = 1
        k_lo: int32 = 0
        k_cnt: int32 = k_tiles
        entry: int32 = 0
        if unit >= dp:
            t = (hi - 1) // k_tiles - (unit - dp)
            k_lo = max(lo - t * k_tiles, 0)
            k_cnt = min(hi - t * k_tiles, k_tiles) - k_lo
            first = self.sk_owner(t * k_tiles, iters)
            part = self.blockIdx.x - first
            parts = self.sk_owner(t * k_tiles + k_tiles - 1, iters) - first + 1
            entry = t
            tile = whole + t
        m_tile, n_tile = self.coords(tile, num_m, num_n)
        return m_tile, n_tile, k_lo, k_cnt, entry, part, parts

    def coords(self, tile: int32, num_m: int32, num_n: int):
        """``(m tile, n tile)`` of tile ``tile`` in V4's order (in a cluster: of the pair)."""
        if self.cluster_m == 2:  # a unit is a pair of M tiles sharing the B tile
            m_pair, n_tile = self.tile_coords(tile, cdiv(num_m, 2), num_n)
            m_tile = 2 * m_pair + self.cluster.blockRank
        elif self.cluster_n == 1:
            m_tile, n_tile = self.tile_coords(tile, num_m, num_n)
        else:  # a unit is a pair of N tiles; the block of rank r takes the pair's tile r
            m_tile, n_pair = self.tile_coords(tile, num_m, cdiv(num_n, 2))
            n_tile = 2 * n_pair + self.cluster.blockRank
        return m_tile, n_tile
