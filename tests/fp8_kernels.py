"""fp8 kernels shared by the CPU and GPU tests: a one-warp-group WGMMA matmul of any fp8 mix,
and the same with an operand that is MN-major (refused)."""

from __future__ import annotations

import tilus
from tilus import float32, int32, uint32, void_p
from tilus.utils import cdiv


class Fp8Wgmma(tilus.Script):
    """``C [m, n] f32 = A [m, k] @ B [n, k]^T`` with A and B of fp8 dtypes ``da`` and ``db``
    (raw bytes), one C tile per block, TMA into one stage, K = 128 bytes per step."""

    def __init__(self, da, db, block_n=64):
        super().__init__()
        self.da, self.db, self.block_n = da, db, block_n

    def __call__(self, m: int32, n: int, k: int, a_ptr: void_p, b_ptr: void_p, c_ptr: ~float32):
        bm, bn, bk = 64, self.block_n, 128
        self.attrs.blocks = [cdiv(m, bm), cdiv(n, bn)]
        self.attrs.warps = 4
        om: int32 = bm * self.blockIdx.x
        on: int32 = bn * self.blockIdx.y
        ga = self.global_view(a_ptr, dtype=self.da, shape=[m, k])
        gb = self.global_view(b_ptr, dtype=self.db, shape=[n, k])
        sa = self.shared_tensor(dtype=self.da, shape=[bm, bk])
        sb = self.shared_tensor(dtype=self.db, shape=[bn, bk])
        acc = self.register_tensor(dtype=float32, shape=[bm, bn], init=0.0)
        bar = self.mbarrier.alloc(counts=[1])
        phase: uint32 = 0
        for ok in range(0, k, bk):
            with self.single_thread():
                self.mbarrier.arrive_and_expect_tx(bar[0], transaction_bytes=sa.nbytes + sb.nbytes)
                self.tma.global_to_shared(src=ga, dst=sa, offsets=[om, ok], mbarrier=bar[0])
                self.tma.global_to_shared(src=gb, dst=sb, offsets=[on, ok], mbarrier=bar[0])
                self.mbarrier.wait(bar[0], phase=phase)
            self.sync()
            self.wgmma.fence()
            self.wgmma.mma(sa, sb.transpose(), acc)
            self.wgmma.commit_group()
            self.wgmma.wait_group(0)
            self.sync()
            phase ^= 1
        gc = self.global_view(c_ptr, dtype=float32, shape=[m, n])
        self.store_global(gc, acc, offsets=[om, on])


class Fp8WgmmaMNMajorB(tilus.Script):
    """B stored [K, N] (N contiguous) and passed as is: MN-major, which 8-bit WGMMA lacks."""

    def __call__(self, a_ptr: void_p, b_ptr: void_p, c_ptr: ~float32):
        self.attrs.blocks = 1
        self.attrs.warps = 4
        sa = self.shared_tensor(dtype=tilus.float8_e4m3, shape=[64, 64])
        sb = self.shared_tensor(dtype=tilus.float8_e4m3, shape=[64, 64])
        acc = self.register_tensor(dtype=float32, shape=[64, 64], init=0.0)
        self.wgmma.mma(sa, sb, acc)  # ERR


class Fp8WgmmaMNMajorA(tilus.Script):
    """A stored [K, M] and passed as its transpose: MN-major."""

    def __call__(self, a_ptr: void_p, b_ptr: void_p, c_ptr: ~float32):
        self.attrs.blocks = 1
        self.attrs.warps = 4
        sa = self.shared_tensor(dtype=tilus.float8_e5m2, shape=[64, 64])
        sb = self.shared_tensor(dtype=tilus.float8_e4m3, shape=[64, 64])
        acc = self.register_tensor(dtype=float32, shape=[64, 64], init=0.0)
        self.wgmma.mma(sa.transpose(), sb.transpose(), acc)  # ERR


class Fp8WgmmaBadK(tilus.Script):
    """K = 16 is one f16 step but half an fp8 instruction."""

    def __call__(self, a_ptr: void_p, b_ptr: void_p, c_ptr: ~float32):
        self.attrs.blocks = 1
        self.attrs.warps = 4
        sa = self.shared_tensor(dtype=tilus.float8_e4m3, shape=[64, 16])
        sb = self.shared_tensor(dtype=tilus.float8_e4m3, shape=[64, 16])
        acc = self.register_tensor(dtype=float32, shape=[64, 64], init=0.0)
        self.wgmma.mma(sa, sb.transpose(), acc)  # ERR


class Fp8WgmmaMixedF16(tilus.Script):
    """fp8 with f16 has no WGMMA form."""

    def __call__(self, a_ptr: void_p, b_ptr: void_p, c_ptr: ~float32):
        self.attrs.blocks = 1
        self.attrs.warps = 4
        sa = self.shared_tensor(dtype=tilus.float8_e4m3, shape=[64, 64])
        sb = self.shared_tensor(dtype=tilus.float16, shape=[64, 64])
        acc = self.register_tensor(dtype=float32, shape=[64, 64], init=0.0)
        self.wgmma.mma(sa, sb.transpose(), acc)  # ERR
