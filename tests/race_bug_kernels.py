"""Kernels with one planted ordering bug each (used by tests/test_race_checks.py).

The line an error is reported at carries `# BUG:<name>`, the other access of the pair
`# FIRST:<name>`; the tests look the markers up, so the file is kept out of `ruff format`.
"""

import tilus
from tilus import float16, float32, int32


class Exchange(tilus.Script):
    """Warp A writes a shared tile, warp B reads it; an mbarrier orders them unless `bug`."""

    def __init__(self, bug: str = "none"):
        super().__init__()
        self.bug = bug

    def __call__(self, x_ptr: ~float32, y_ptr: ~float32, z_ptr: ~float32):
        self.attrs.blocks = 1
        self.attrs.warps = 2
        gx = self.global_view(x_ptr, dtype=float32, shape=[32, 32])
        gy = self.global_view(y_ptr, dtype=float32, shape=[32, 32])
        gz = self.global_view(z_ptr, dtype=float32, shape=[32, 32])
        s = self.shared_tensor(dtype=float32, shape=[32, 32])
        bars = self.mbarrier.alloc(counts=[32, 32])  # full (A -> B), empty (B -> A)
        with self.thread_group(0, 32):  # A: writes s twice, B reads each version
            t = self.load_global(gx, offsets=[0, 0], shape=[32, 32])
            if self.bug == "arrive_early":
                self.mbarrier.arrive(bars[0])
                self.store_shared(s, t)  # FIRST:arrive_early
            else:
                self.store_shared(s, t)  # FIRST:no_barrier
                if self.bug != "no_barrier":
                    self.mbarrier.arrive(bars[0])
            if self.bug != "no_release":
                self.mbarrier.wait(bars[1], phase=0)  # B has read the first version
            self.store_shared(s, t * 2.0)  # FIRST:no_release
            self.store_global(gz, t, offsets=[0, 0])  # BUG:global
        with self.thread_group(32, 32):  # B
            if self.bug != "no_barrier":
                self.mbarrier.wait(bars[0], phase=0)
            u = self.load_shared(s)  # BUG:no_barrier BUG:arrive_early BUG:no_release
            self.mbarrier.arrive(bars[1])
            if self.bug == "global":
                u = u + self.load_global(gz, offsets=[0, 0], shape=[32, 32])  # FIRST:global
            self.store_global(gy, u, offsets=[0, 0])


class Epilogue(tilus.Script):
    """A warp group stages a tile in shared memory and one thread stores it with TMA (V5's
    epilogue), then reads the stored tile back from global memory."""

    def __init__(self, bug: str = "none"):
        super().__init__()
        self.bug = bug

    def __call__(self, x_ptr: ~float16, y_ptr: ~float16, z_ptr: ~float16):
        self.attrs.blocks = 1
        self.attrs.warps = 4
        gx = self.global_view(x_ptr, dtype=float16, shape=[64, 64])
        gy = self.global_view(y_ptr, dtype=float16, shape=[64, 64])
        gz = self.global_view(z_ptr, dtype=float16, shape=[64, 64])
        s = self.shared_tensor(dtype=float16, shape=[64, 64])
        t = self.load_global(gx, offsets=[0, 0], shape=[64, 64])
        if self.bug == "fence_first":
            self.fence.proxy_async()
        self.store_shared(s, t)  # FIRST:no_fence FIRST:fence_first FIRST:no_sync FIRST:global_fence
        if self.bug == "global_fence":
            self.fence.proxy_async(space="global")
        elif self.bug not in ("no_fence", "fence_first", "elected_fence"):
            self.fence.proxy_async()
        if self.bug != "no_sync":
            self.sync()
        with self.single_thread():
            if self.bug == "elected_fence":  # after the sync: ordered after every write
                self.fence.proxy_async()
            self.tma.shared_to_global(s, gy, offsets=[0, 0])  # BUG:no_fence BUG:fence_first BUG:no_sync BUG:global_fence FIRST:read_only FIRST:unsynced
            self.tma.commit_group()
            self.tma.wait_group(0, read=self.bug == "read_only")
        if self.bug != "unsynced":
            self.sync()
        back = self.load_global(gy, offsets=[0, 0], shape=[64, 64])  # BUG:read_only BUG:unsynced
        self.store_global(gz, back, offsets=[0, 0])


class WgmmaOperands(tilus.Script):
    """A producer warp writes the WGMMA operands with generic stores, a consumer warp group
    multiplies them; `bug` drops the proxy fence or rewrites an operand after the release."""

    def __init__(self, bug: str = "none"):
        super().__init__()
        self.bug = bug

    def __call__(self, a_ptr: ~float16, b_ptr: ~float16, c_ptr: ~float32):
        self.attrs.blocks = 1
        self.attrs.warps = 5
        ga = self.global_view(a_ptr, dtype=float16, shape=[64, 16])
        gb = self.global_view(b_ptr, dtype=float16, shape=[64, 16])
        gc = self.global_view(c_ptr, dtype=float32, shape=[64, 64])
        sa = self.shared_tensor(dtype=float16, shape=[64, 16])
        sb = self.shared_tensor(dtype=float16, shape=[64, 16])
        bars = self.mbarrier.alloc(counts=[32])
        with self.thread_group(128, 32):  # producer warp
            self.store_shared(sa, self.load_global(ga, offsets=[0, 0], shape=[64, 16]))  # FIRST:no_fence
            self.store_shared(sb, self.load_global(gb, offsets=[0, 0], shape=[64, 16]))
            if self.bug != "no_fence":
                self.fence.proxy_async()
            self.mbarrier.arrive(bars[0])
            if self.bug == "late_write":
                self.store_shared(sb, self.load_global(gb, offsets=[0, 0], shape=[64, 16]))  # FIRST:late_write
        with self.thread_group(0, 128):  # consumer warp group
            acc = self.register_tensor(dtype=float32, shape=[64, 64], init=0.0)
            self.mbarrier.wait(bars[0], phase=0)
            self.wgmma.fence()
            self.wgmma.mma(sa, sb.transpose(), acc)  # BUG:no_fence BUG:late_write
            self.wgmma.commit_group()
            self.wgmma.wait_group(0)
            self.store_global(gc, acc, offsets=[0, 0])


class WrongBarrier(tilus.Script):
    """The consumer waits on a barrier the producer arrives on right after issuing the TMA
    load, not on the one the load completes on: the read races with the load however the
    schedule goes (in flight, or landed but not ordered)."""

    def __init__(self, bug: str = "none"):
        super().__init__()
        self.bug = bug

    def __call__(self, x_ptr: ~float16, y_ptr: ~float16):
        self.attrs.blocks = 1
        self.attrs.warps = 2
        gx = self.global_view(x_ptr, dtype=float16, shape=[32, 64])
        gy = self.global_view(y_ptr, dtype=float16, shape=[32, 64])
        s = self.shared_tensor(dtype=float16, shape=[32, 64])
        bars = self.mbarrier.alloc(counts=[1, 1])  # full (TMA), issued (plain arrive)
        with self.thread_group(32, 32):
            with self.single_thread():
                self.mbarrier.arrive_and_expect_tx(bars[0], transaction_bytes=s.nbytes)
                self.tma.global_to_shared(src=gx, dst=s, offsets=[0, 0], mbarrier=bars[0])  # FIRST:wrong_barrier
                self.mbarrier.arrive(bars[1])
        with self.thread_group(0, 32):
            if self.bug == "wrong_barrier":
                self.mbarrier.wait(bars[1], phase=0)
            else:
                self.mbarrier.wait(bars[0], phase=0)
            self.store_global(gy, self.load_shared(s), offsets=[0, 0])  # BUG:wrong_barrier


class Leftovers(tilus.Script):
    """One-block WGMMA on TMA-loaded tiles, for the checks that are not about ordering."""

    def __init__(self, bug: str = "none"):
        super().__init__()
        self.bug = bug

    def __call__(self, a_ptr: ~float16, b_ptr: ~float16, c_ptr: ~float32):
        self.attrs.blocks = 1
        self.attrs.warps = 4
        ga = self.global_view(a_ptr, dtype=float16, shape=[64, 16])
        gb = self.global_view(b_ptr, dtype=float16, shape=[64, 16])
        gc = self.global_view(c_ptr, dtype=float32, shape=[64, 64])
        sa = self.shared_tensor(dtype=float16, shape=[64, 16])
        sb = self.shared_tensor(dtype=float16, shape=[64, 16])
        bars = self.mbarrier.alloc(counts=[1])
        acc = self.register_tensor(dtype=float32, shape=[64, 64], init=0.0)
        with self.single_thread():
            self.mbarrier.arrive_and_expect_tx(bars[0], transaction_bytes=sa.nbytes + sb.nbytes)
            self.tma.global_to_shared(src=ga, dst=sa, offsets=[0, 0], mbarrier=bars[0])
            if self.bug == "double_tma":
                self.tma.global_to_shared(src=gb, dst=sa, offsets=[0, 0], mbarrier=bars[0])  # BUG:double_tma
            else:
                self.tma.global_to_shared(src=gb, dst=sb, offsets=[0, 0], mbarrier=bars[0])
        self.mbarrier.wait(bars[0], phase=0)
        self.wgmma.fence()
        self.wgmma.mma(sa, sb.transpose(), acc)  # BUG:unretired
        self.wgmma.commit_group()
        if self.bug != "unretired":
            self.wgmma.wait_group(0)
            self.store_global(gc, acc, offsets=[0, 0])
        if self.bug == "endless":
            i: int32 = 0
            while i >= 0: i = (i + 1) % 8  # BUG:endless  # noqa: E701
