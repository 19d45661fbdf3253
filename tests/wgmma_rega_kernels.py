"""Kernels with a register A operand of wgmma.mma (used by tests/test_wgmma_register_a.py).

Each planted bug's line carries a `# BUG:<name>` marker so the tests can assert the reported line.
"""

import tilus
from tilus import float16, float32, int32, void_p
from tilus.utils import cdiv


def _to_shared(self, g, rows, cols, offset, dtype):
    """A [rows, cols] tile of global ``g`` at row ``offset`` copied into a new shared tile
    (out-of-bounds rows read 0), ordered before wgmma's async-proxy reads."""
    s = self.shared_tensor(dtype=dtype, shape=[rows, cols])
    self.store_shared(s, self.load_global(g, offsets=[offset, 0], shape=[rows, cols]))
    return s


class RegA(tilus.Script):
    """c[m, n] = a[m, k] @ b[n, k]^T with a loaded straight into registers (the A fragment)."""

    def __init__(self, bm=64, bn=64, k=32, dtype=float16):
        super().__init__()
        self.bm, self.bn, self.k, self.dtype = bm, bn, k, dtype

    def __call__(self, m_size: int32, n_size: int32, a_ptr: void_p, b_ptr: void_p, c_ptr: ~float32):
        self.attrs.blocks = [cdiv(m_size, self.bm), cdiv(n_size, self.bn)]
        self.attrs.warps = 4
        bm, bn, k, dt = self.bm, self.bn, self.k, self.dtype
        om: int32 = bm * self.blockIdx.x
        on: int32 = bn * self.blockIdx.y
        ga = self.global_view(a_ptr, dtype=dt, shape=[m_size, k])
        gb = self.global_view(b_ptr, dtype=dt, shape=[n_size, k])
        a = self.load_global(ga, offsets=[om, 0], shape=[bm, k])
        sb = _to_shared(self, gb, bn, k, on, dt)
        self.fence.proxy_async()
        self.sync()
        acc = self.register_tensor(dtype=float32, shape=[bm, bn], init=0.0)
        self.wgmma.fence()
        self.wgmma.mma(a, sb.transpose(), acc)
        self.wgmma.commit_group()
        self.wgmma.wait_group(0)
        gc = self.global_view(c_ptr, dtype=float32, shape=[m_size, n_size])
        self.store_global(gc, acc, offsets=[om, on])


class Chain(tilus.Script):
    """o = cast(a @ b1^T, f16) @ b2^T: the P @ V step of attention, P from registers.

    a [m, k1], b1 [n1, k1], b2 [d, n1]; the first wgmma's accumulator [bm, n1] cast to float16
    is the A operand [bm, n1] of the second (K = n1), repeated ``iters`` times into one o.
    """

    def __init__(self, bug="none", bm=64, n1=64, k1=32, d=32, iters=1, dtype=float16):
        super().__init__()
        self.bug = bug
        self.bm, self.n1, self.k1, self.d, self.iters, self.dtype = bm, n1, k1, d, iters, dtype

    def __call__(
        self, m_size: int32, a_ptr: void_p, b1_ptr: void_p, b2_ptr: void_p, o_ptr: ~float32
    ):
        self.attrs.blocks = cdiv(m_size, self.bm)
        self.attrs.warps = 4
        bm, n1, k1, d, dt = self.bm, self.n1, self.k1, self.d, self.dtype
        om: int32 = bm * self.blockIdx.x
        ga = self.global_view(a_ptr, dtype=dt, shape=[m_size, k1])
        gb1 = self.global_view(b1_ptr, dtype=dt, shape=[n1, k1])
        gb2 = self.global_view(b2_ptr, dtype=dt, shape=[d, n1])
        sa = _to_shared(self, ga, bm, k1, om, dt)
        sb1 = _to_shared(self, gb1, n1, k1, 0, dt)
        sb2 = _to_shared(self, gb2, d, n1, 0, dt)
        self.fence.proxy_async()
        self.sync()
        o = self.register_tensor(dtype=float32, shape=[bm, d], init=0.0)
        other = self.register_tensor(dtype=dt, shape=[bm, n1], init=1.0)
        for _it in range(self.iters):
            s = self.register_tensor(dtype=float32, shape=[bm, n1], init=0.0)
            self.wgmma.fence()
            self.wgmma.mma(sa, sb1.transpose(), s)
            self.wgmma.commit_group()
            self.wgmma.wait_group(0)
            p = self.cast(s, dtype=dt)
            if self.bug != "no_fence":
                self.wgmma.fence()
            self.wgmma.mma(p, sb2.transpose(), o)  # BUG:no_fence
            self.wgmma.commit_group()
            if self.bug == "write_in_flight":
                self.assign(p, other)  # BUG:write_in_flight
            if self.bug == "read_in_flight":
                other = p + other  # BUG:read_in_flight
            self.wgmma.wait_group(0)
        go = self.global_view(o_ptr, dtype=float32, shape=[m_size, d])
        self.store_global(go, o, offsets=[om, 0])


class RegAConflict(tilus.Script):
    """A register tile used both as an mma.sync operand (converted at the dot) and as a wgmma
    A fragment; the two results, in their fixed layouts (mma_c, wgmma_acc), added (the mma
    result converted at the addition)."""

    def __call__(self, a_ptr: ~float16, c_ptr: ~float32):
        self.attrs.blocks = 1
        self.attrs.warps = 4
        ga = self.global_view(a_ptr, dtype=float16, shape=[64, 16])
        a = self.load_global(ga, offsets=[0, 0], shape=[64, 16])
        b = self.load_global(ga, offsets=[0, 0], shape=[16, 64])
        c = self.dot(a, b, acc_dtype=float32)
        sb = self.shared_tensor(dtype=float16, shape=[64, 16])
        acc = self.register_tensor(dtype=float32, shape=[64, 64], init=0.0)
        self.wgmma.fence()
        self.wgmma.mma(a, sb.transpose(), acc)
        self.wgmma.commit_group()
        self.wgmma.wait_group(0)
        gc = self.global_view(c_ptr, dtype=float32, shape=[64, 64])
        self.store_global(gc, acc + c, offsets=[0, 0])


class RegATransposed(tilus.Script):
    """A transposed register view as the A operand."""

    def __call__(self, a_ptr: ~float16, c_ptr: ~float32):
        self.attrs.blocks = 1
        self.attrs.warps = 4
        ga = self.global_view(a_ptr, dtype=float16, shape=[16, 64])
        a = self.load_global(ga, offsets=[0, 0], shape=[16, 64])
        sb = self.shared_tensor(dtype=float16, shape=[64, 16])
        acc = self.register_tensor(dtype=float32, shape=[64, 64], init=0.0)
        self.wgmma.fence()
        self.wgmma.mma(a.transpose(), sb.transpose(), acc)  # BUG:transposed
        self.wgmma.commit_group()
        self.wgmma.wait_group(0)
        gc = self.global_view(c_ptr, dtype=float32, shape=[64, 64])
        self.store_global(gc, acc, offsets=[0, 0])
