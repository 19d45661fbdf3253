"""``dot`` kernels of each mma.sync form (used by tests/test_dot_forms.py and the GPU tests)."""

import tilus
from tilus import float32, int32, tfloat32, void_p
from tilus.utils import cdiv


class DotForm(tilus.Script):
    """c[m, n] = a[m, k] @ b[k, n] (+ c0 when ``with_c``) with register operands.

    ``operand``/``acc``: the dtypes of a, b and of the accumulator; a tf32 dot loads float32
    operands and casts them to tfloat32. ``out`` is the dtype stored (the accumulator's).
    """

    def __init__(self, operand, acc, bm=64, bn=64, k=64, warps=4, with_c=False):
        super().__init__()
        self.operand, self.acc, self.bm, self.bn, self.k = operand, acc, bm, bn, k
        self.warps, self.with_c = warps, with_c

    def __call__(
        self,
        m_size: int32,
        n_size: int32,
        a_ptr: void_p,
        b_ptr: void_p,
        c0_ptr: void_p,
        c_ptr: void_p,
    ):
        self.attrs.blocks = [cdiv(m_size, self.bm), cdiv(n_size, self.bn)]
        self.attrs.warps = self.warps
        bm, bn, k = self.bm, self.bn, self.k
        load_dt = float32 if self.operand == tfloat32 else self.operand
        om: int32 = bm * self.blockIdx.x
        on: int32 = bn * self.blockIdx.y
        ga = self.global_view(a_ptr, dtype=load_dt, shape=[m_size, k])
        gb = self.global_view(b_ptr, dtype=load_dt, shape=[k, n_size])
        gc = self.global_view(c_ptr, dtype=self.acc, shape=[m_size, n_size])
        a = self.load_global(ga, offsets=[om, 0], shape=[bm, k])
        b = self.load_global(gb, offsets=[0, on], shape=[k, bn])
        if self.operand == tfloat32:
            a = self.cast(a, dtype=tfloat32)
            b = self.cast(b, dtype=tfloat32)
        if self.with_c:
            gc0 = self.global_view(c0_ptr, dtype=self.acc, shape=[m_size, n_size])
            c0 = self.load_global(gc0, offsets=[om, on], shape=[bm, bn])
            c = self.dot(a, b, c0)
        else:
            c = self.dot(a, b, acc_dtype=self.acc)
        self.store_global(gc, c, offsets=[om, on])


class BadDot(tilus.Script):
    """Planted dtype errors: each `# BUG:<name>` line is the reported one."""

    def __init__(self, bug):
        super().__init__()
        self.bug = bug

    def __call__(self, a_ptr: void_p):
        self.attrs.blocks = 1
        self.attrs.warps = 4
        a8 = self.register_tensor(dtype=tilus.int8, shape=[64, 32], init=1)
        h = self.register_tensor(dtype=tilus.float16, shape=[32, 64], init=1.0)
        f = self.register_tensor(dtype=float32, shape=[64, 32], init=1.0)
        t = self.register_tensor(dtype=tfloat32, shape=[32, 64], init=1.0)
        t2 = self.register_tensor(dtype=tfloat32, shape=[64, 32], init=1.0)
        i8b = self.register_tensor(dtype=tilus.int8, shape=[32, 64], init=1)
        if self.bug == "mix":
            self.dot(a8, h, acc_dtype=int32)  # BUG:mix
        elif self.bug == "tf32_acc":
            self.dot(t2, t, acc_dtype=tilus.float16)  # BUG:tf32_acc
        elif self.bug == "tf32_on_f32":
            self.dot(f, t, acc_dtype=float32)  # BUG:tf32_on_f32
        elif self.bug == "int_into_float":
            self.dot(a8, i8b, acc_dtype=float32)  # BUG:int_into_float


class SharedDot(tilus.Script):
    """c = a @ b with both operands staged in shared memory and read by load_shared (the V0
    shape: ldmatrix where the fragments allow)."""

    def __init__(self, operand, acc, bm=64, bn=64, k=64, warps=4):
        super().__init__()
        self.operand, self.acc, self.bm, self.bn, self.k, self.warps = (
            operand,
            acc,
            bm,
            bn,
            k,
            warps,
        )

    def __call__(self, m_size: int32, n_size: int32, a_ptr: void_p, b_ptr: void_p, c_ptr: void_p):
        self.attrs.blocks = [cdiv(m_size, self.bm), cdiv(n_size, self.bn)]
        self.attrs.warps = self.warps
        bm, bn, k, dt = self.bm, self.bn, self.k, self.operand
        om: int32 = bm * self.blockIdx.x
        on: int32 = bn * self.blockIdx.y
        ga = self.global_view(a_ptr, dtype=dt, shape=[m_size, k])
        gb = self.global_view(b_ptr, dtype=dt, shape=[k, n_size])
        sa = self.shared_tensor(dtype=dt, shape=[bm, k])
        sb = self.shared_tensor(dtype=dt, shape=[k, bn])
        self.store_shared(sa, self.load_global(ga, offsets=[om, 0], shape=[bm, k]))
        self.store_shared(sb, self.load_global(gb, offsets=[0, on], shape=[k, bn]))
        self.sync()
        c = self.dot(self.load_shared(sa), self.load_shared(sb), acc_dtype=self.acc)
        gc = self.global_view(c_ptr, dtype=self.acc, shape=[m_size, n_size])
        self.store_global(gc, c, offsets=[om, on])
