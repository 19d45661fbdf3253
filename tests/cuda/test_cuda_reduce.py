"""CUDA backend reductions and broadcasting: compiled by NVRTC, run on the CPU emulator."""

from __future__ import annotations

import numpy as np
import pytest

import tilus
from tests.cuda.conftest import needs_nvrtc
from tests.helpers_cpu_cuda import available, build, emulate
from tilus import float16, float32, int32

needs_gxx = pytest.mark.skipif(not available(), reason="needs g++ for the CPU emulator")


@pytest.fixture(scope="module", autouse=True)
def _fresh_cache(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("TILUS_CACHE_DIR", str(tmp_path_factory.mktemp("tilus-cache")))
    yield
    mp.undo()


class Reductions(tilus.Script):
    """Every reduction over both dims of one tile, keepdim or not, broadcast back."""

    def __init__(self, bm, bn, warps, dtype):
        super().__init__()
        self.bm, self.bn, self.warps, self.dtype = bm, bn, warps, dtype

    def __call__(
        self,
        x_ptr: ~float32,
        rows_ptr: ~float32,
        cols_ptr: ~float32,
        flags_ptr: ~int32,
        y_ptr: ~float32,
        tot_ptr: ~float32,
    ):
        self.attrs.blocks = 1
        self.attrs.warps = self.warps
        bm, bn = self.bm, self.bn
        gx = self.global_view(x_ptr, dtype=float32, shape=[bm, bn])
        x = self.cast(self.load_global(gx, offsets=[0, 0], shape=[bm, bn]), self.dtype)
        rows = self.global_view(rows_ptr, dtype=float32, shape=[3, bm])
        cols = self.global_view(cols_ptr, dtype=float32, shape=[3, bn])
        rsum = self.sum(x, dim=1)
        rmax = self.max(x, dim=1, keepdim=True)
        rmin = self.min(x, dim=-1)
        self.store_global(rows, self.cast(rsum, float32), offsets=[0, 0], dims=[1])
        self.store_global(rows, self.cast(self.squeeze(rmax, dim=1), float32), offsets=[1, 0],
                          dims=[1])  # fmt: skip
        self.store_global(rows, self.cast(rmin, float32), offsets=[2, 0], dims=[1])
        csum = self.sum(x, dim=0, keepdim=True)
        self.store_global(cols, self.cast(csum, float32), offsets=[0, 0])
        self.store_global(cols, self.cast(self.max(x, dim=0), float32), offsets=[1, 0], dims=[1])
        self.store_global(cols, self.cast(self.min(x, dim=0), float32), offsets=[2, 0], dims=[1])
        pos = x > 0.0
        flags = self.global_view(flags_ptr, dtype=int32, shape=[4, bm])
        self.store_global(flags, self.cast(self.any(pos, dim=1), int32), offsets=[0, 0], dims=[1])
        self.store_global(flags, self.cast(self.all(pos, dim=1), int32), offsets=[1, 0], dims=[1])
        colany = self.unsqueeze(self.any(pos, dim=0), dim=0)  # [1, bn]
        self.store_global(
            flags,
            self.cast(self.sum(self.cast(colany, int32), dim=1), int32),
            offsets=[2, 0],
            dims=[1],
        )
        # broadcast back: [bm, 1], [bn] and a scalar tile against [bm, bn]
        y = x - rmax + self.squeeze(csum, dim=0) * 0.5
        total = self.sum(x)
        gy = self.global_view(y_ptr, dtype=float32, shape=[bm, bn])
        self.store_global(gy, self.cast(self.where(pos, y, 1.0) * total, float32), offsets=[0, 0])
        gt = self.global_view(tot_ptr, dtype=float32, shape=[1])
        self.store_global(gt, self.cast(self.unsqueeze(total, dim=0), float32), offsets=[0])


def _reference(x):
    rows = np.stack([x.sum(1), x.max(1), x.min(1)])
    cols = np.stack([x.sum(0), x.max(0), x.min(0)])
    pos = x > 0
    flags = np.zeros((4, x.shape[0]), np.int32)
    flags[0], flags[1] = pos.any(1), pos.all(1)
    flags[2, 0] = pos.any(0).sum()
    total = x.sum()
    y = np.where(pos, x - x.max(1, keepdims=True) + x.sum(0) * 0.5, 1.0) * total
    return rows, cols, flags, y, np.array([total])


CASES = [
    (16, 64, 4, float32),  # lanes along the row, warps down the columns
    (4, 256, 4, float32),  # a row across all four warps: shared slots
    (2, 512, 8, float32),
    (32, 16, 2, float32),  # columns inside a lane's registers
    (8, 8, 1, float32),  # a small tile every thread holds whole
    (8, 128, 4, float16),
    (2, 448, 7, float32),  # 224 threads a row (no power of two): 32 lanes shuffle, 7 slots
    (1, 1792, 14, float16),
]


@needs_nvrtc
@needs_gxx
@pytest.mark.parametrize("bm, bn, warps, dtype", CASES)
def test_reductions_run_on_the_emulator(bm, bn, warps, dtype):
    k = Reductions(bm, bn, warps, dtype)
    ck = tilus.compile(k, *[None] * 6)
    assert "__shfl_xor_sync" in ck.source or bm * bn <= 64
    rng = np.random.default_rng()
    x = rng.standard_normal((bm, bn)).astype(np.float32)
    x[0, :] = np.abs(x[0, :]) + 0.1  # one row all positive (all() is true there)
    if dtype == float16:
        x = x.astype(np.float16).astype(np.float32)
    rows = np.full((3, bm), np.nan, np.float32)
    cols = np.full((3, bn), np.nan, np.float32)
    flags = np.full((4, bm), -1, np.int32)
    y = np.full((bm, bn), np.nan, np.float32)
    tot = np.full(1, np.nan, np.float32)
    build(ck)([1], [x, rows, cols, flags, y, tot])
    ref = _reference(x.astype(np.float64))
    tol = 2e-2 if dtype == float16 else 1e-4
    for got, want, what in zip((rows, cols, flags, y, tot), ref, "rows cols flags y total".split()):
        if what == "flags":
            assert (got[:3, :1] == want[:3, :1]).all() and (got[:2] == want[:2]).all(), what
            continue
        scale = max(1.0, float(np.abs(want).max()))
        assert np.abs(got - want).max() <= tol * scale, (what, got, want)
    # the interpreter agrees
    with tilus.option.scoped(interpret=True):
        y2 = np.full_like(y, np.nan)
        r2 = np.full_like(rows, np.nan)
        k(x, r2, cols.copy(), flags.copy(), y2, tot.copy())
    assert np.abs(r2 - rows).max() <= tol * max(1.0, float(np.abs(rows).max()))


class AccReduce(tilus.Script):
    """Row and column sums of an mma.sync accumulator (an anchored, non-blocked layout)."""

    def __call__(self, a_ptr: ~float16, b_ptr: ~float16, r_ptr: ~float32, c_ptr: ~float32):
        self.attrs.blocks = 1
        self.attrs.warps = 4
        ga = self.global_view(a_ptr, dtype=float16, shape=[64, 32])
        gb = self.global_view(b_ptr, dtype=float16, shape=[32, 64])
        a = self.load_global(ga, offsets=[0, 0], shape=[64, 32])
        b = self.load_global(gb, offsets=[0, 0], shape=[32, 64])
        acc = self.dot(a, b, acc_dtype=float32)
        m = self.max(acc, dim=1, keepdim=True)
        p = self.exp(acc - m)
        gr = self.global_view(r_ptr, dtype=float32, shape=[64])
        gc = self.global_view(c_ptr, dtype=float32, shape=[64, 64])
        self.store_global(gr, self.sum(p, dim=1), offsets=[0])
        self.store_global(gc, p / self.sum(p, dim=1, keepdim=True), offsets=[0, 0])


@needs_nvrtc
@needs_gxx
def test_reduce_of_an_mma_accumulator():
    ck = tilus.compile(AccReduce(), None, None, None, None)
    assert "mma_c layout" in ck.source
    rng = np.random.default_rng()
    a = rng.standard_normal((64, 32)).astype(np.float16)
    b = rng.standard_normal((32, 64)).astype(np.float16)
    r = np.full(64, np.nan, np.float32)
    c = np.full((64, 64), np.nan, np.float32)
    assert ck.resources.get("local_bytes", 0) == 0 and ck.resources.get("spill_store_bytes") == 0
    # (the emulator has no tensor cores: the values are checked on the interpreter here and on
    # the GPU in test_gpu_rowwise.py)
    acc = a.astype(np.float64) @ b.astype(np.float64)
    p = np.exp(acc - acc.max(1, keepdims=True))
    with tilus.option.scoped(interpret=True):
        AccReduce()(a, b, r, c)
    assert np.abs(r - p.sum(1)).max() < 1e-3 * p.sum(1).max()
    assert np.abs(c - p / p.sum(1, keepdims=True)).max() < 1e-4


class BoolBad(tilus.Script):
    def __call__(self, x_ptr: ~float32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        g = self.global_view(x_ptr, dtype=float32, shape=[32])
        x = self.load_global(g, offsets=[0], shape=[32])
        self.sum(x, dim=1)  # no dim 1


def test_reduce_over_a_missing_dim_is_located():
    with pytest.raises(tilus.TilusProgramError) as e:
        with tilus.option.scoped(interpret=True):
            BoolBad()(np.zeros(32, np.float32))
    assert "test_cuda_reduce.py:" in str(e.value) and "self.sum(x, dim=1)" in str(e.value)


class Transposed(tilus.Script):
    """A transposed register tile as an elementwise operand and as a reduction's source."""

    def __call__(self, x_ptr: ~float32, y_ptr: ~float32, z_ptr: ~float32, r_ptr: ~float32):
        self.attrs.blocks = 1
        self.attrs.warps = 2
        gx = self.global_view(x_ptr, dtype=float32, shape=[32, 64])
        gy = self.global_view(y_ptr, dtype=float32, shape=[64, 32])
        x = self.load_global(gx, offsets=[0, 0], shape=[32, 64])
        y = self.load_global(gy, offsets=[0, 0], shape=[64, 32])
        xt = self.transpose(x)
        gz = self.global_view(z_ptr, dtype=float32, shape=[64, 32])
        self.store_global(gz, xt * 2.0 + y, offsets=[0, 0])
        gr = self.global_view(r_ptr, dtype=float32, shape=[64])
        self.store_global(gr, self.sum(xt, dim=1), offsets=[0])


@needs_nvrtc
@needs_gxx
def test_transposed_operand_and_reduction():
    rng = np.random.default_rng()
    x = rng.standard_normal((32, 64)).astype(np.float32)
    y = rng.standard_normal((64, 32)).astype(np.float32)
    z = np.full((64, 32), np.nan, np.float32)
    r = np.full(64, np.nan, np.float32)
    emulate(Transposed(), (x, y, z, r), [1])
    assert np.abs(z - (x.T * 2 + y)).max() < 1e-5
    assert np.abs(r - x.sum(0)).max() < 1e-4


class Moves(tilus.Script):
    """Reshapes that move elements between threads, and register slices, dynamic indices."""

    def __call__(self, i: int32, j: int32, x_ptr: ~float32, r_ptr: ~float32, s_ptr: ~float32):
        self.attrs.blocks = 1
        self.attrs.warps = 2
        gx = self.global_view(x_ptr, dtype=float32, shape=[8, 64])
        x = self.load_global(gx, offsets=[0, 0], shape=[8, 64])
        gr = self.global_view(r_ptr, dtype=float32, shape=[16, 32])
        self.store_global(gr, self.reshape(x, [16, 32]) + 1.0, offsets=[0, 0])
        gs = self.global_view(s_ptr, dtype=float32, shape=[2, 64])
        self.store_global(gs, x[i] * 2.0, offsets=[0, 0], dims=[1])
        self.store_global(gs, x[:, j], offsets=[1, 0], dims=[1])


@needs_nvrtc
@needs_gxx
def test_reshape_and_slices_through_shared_memory():
    rng = np.random.default_rng()
    x = rng.standard_normal((8, 64)).astype(np.float32)
    r = np.full((16, 32), np.nan, np.float32)
    s = np.full((2, 64), np.nan, np.float32)
    ck = emulate(Moves(), (5, 41, x, r, s), [1])
    assert "through shared memory" in ck.source
    assert np.array_equal(r, x.reshape(16, 32) + 1)
    assert np.array_equal(s[0], x[5] * 2) and np.array_equal(s[1, :8], x[:, 41])


class Attention(tilus.Script):
    """``(q @ k) @ v`` with the first product cast to fp16: an accumulator becomes an operand."""

    def __call__(self, q_ptr: ~float16, k_ptr: ~float16, v_ptr: ~float16, o_ptr: ~float32):
        self.attrs.blocks = 1
        self.attrs.warps = 4
        gq = self.global_view(q_ptr, dtype=float16, shape=[64, 32])
        gk = self.global_view(k_ptr, dtype=float16, shape=[32, 64])
        gv = self.global_view(v_ptr, dtype=float16, shape=[64, 32])
        q = self.load_global(gq, offsets=[0, 0], shape=[64, 32])
        k = self.load_global(gk, offsets=[0, 0], shape=[32, 64])
        v = self.load_global(gv, offsets=[0, 0], shape=[64, 32])
        s = self.dot(q, k, acc_dtype=float32)
        p = self.cast(self.exp(s - self.max(s, dim=1, keepdim=True)), float16)
        o = self.dot(p, v, acc_dtype=float32)
        go = self.global_view(o_ptr, dtype=float32, shape=[64, 32])
        self.store_global(go, o, offsets=[0, 0])


@needs_nvrtc
def test_dot_of_a_cast_dot_compiles():
    ck = tilus.compile(Attention(), None, None, None, None)
    assert "through shared memory" in ck.source
    assert ck.resources.get("local_bytes", 0) == 0
    rng = np.random.default_rng()
    q = rng.standard_normal((64, 32)).astype(np.float16)
    k = rng.standard_normal((32, 64)).astype(np.float16)
    v = rng.standard_normal((64, 32)).astype(np.float16)
    o = np.full((64, 32), np.nan, np.float32)
    with tilus.option.scoped(interpret=True):
        Attention()(q, k, v, o)
    s = q.astype(np.float64) @ k.astype(np.float64)
    p = np.exp(s - s.max(1, keepdims=True)).astype(np.float16).astype(np.float64)
    assert np.abs(o - p @ v.astype(np.float64)).max() < 1e-2 * np.abs(p @ v).max()


class Printer(tilus.Script):
    """print_tensor of a tile spread over two warps (and of a reduced one)."""

    def __call__(self, x_ptr: ~float32):
        self.attrs.blocks = 1
        self.attrs.warps = 2
        gx = self.global_view(x_ptr, dtype=float32, shape=[4, 32])
        x = self.load_global(gx, offsets=[0, 0], shape=[4, 32])
        self.print_tensor("x:", x)
        self.print_tensor("row sums:", self.sum(x, dim=1, keepdim=True), fmt="%.1f")
        self.print_tensor("any:", self.cast(self.any(x > 1.0, dim=0), int32))
        self.print_tensor("total:", self.sum(x))


@needs_nvrtc
@needs_gxx
def test_print_tensor_matches_the_interpreter(capfd):
    # halves: every sum is exact, so both backends print the same digits
    x = (np.random.default_rng().integers(-8, 8, (4, 32)) / 2).astype(np.float32)
    with tilus.option.scoped(interpret=True):
        Printer()(x)
    want = capfd.readouterr().out
    emulate(Printer(), (x,), [1])
    got = capfd.readouterr().out
    assert got == want and "row sums:" in got and "total:" in got


MATH = ["exp", "exp2", "log", "log2", "sqrt", "rsqrt", "sin", "cos", "tan", "tanh", "asin",
        "acos", "atan", "sinh", "cosh", "asinh", "atanh", "trunc", "floor", "ceil"]  # fmt: skip


class MathOps(tilus.Script):
    """Every unary math op of a tile, and isnan/isinf."""

    def __call__(self, x_ptr: ~float32, y_ptr: ~float32, f_ptr: ~int32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        gx = self.global_view(x_ptr, dtype=float32, shape=[64])
        gy = self.global_view(y_ptr, dtype=float32, shape=[len(MATH) + 1, 64])
        x = self.load_global(gx, offsets=[0], shape=[64])
        for k, op in enumerate(MATH):
            self.store_global(gy, getattr(self, op)(x), offsets=[k, 0], dims=[1])
        self.store_global(gy, self.acosh(x + 2.0), offsets=[len(MATH), 0], dims=[1])
        gf = self.global_view(f_ptr, dtype=int32, shape=[2, 64])
        bad = (x - x) / (x - x)  # 0/0: nan at every element
        self.store_global(gf, self.cast(self.isnan(bad), int32), offsets=[0, 0], dims=[1])
        self.store_global(gf, self.cast(self.isinf(1.0 / (x - x)), int32), offsets=[1, 0],
                          dims=[1])  # fmt: skip


@needs_nvrtc
@needs_gxx
def test_math_builtins():
    x = np.random.default_rng().uniform(0.05, 0.95, 64).astype(np.float32)
    want = [getattr(np, {"asin": "arcsin", "acos": "arccos", "atan": "arctan", "asinh": "arcsinh",
                         "atanh": "arctanh"}.get(op, op))(x.astype(np.float64))
            if op != "rsqrt" else 1 / np.sqrt(x.astype(np.float64)) for op in MATH]  # fmt: skip
    want.append(np.arccosh(x.astype(np.float64) + 2))
    for run in ("interpreter", "emulator"):
        y = np.full((len(MATH) + 1, 64), np.nan, np.float32)
        f = np.full((2, 64), -1, np.int32)
        if run == "interpreter":
            with tilus.option.scoped(interpret=True):
                MathOps()(x, y, f)
        else:
            ck = emulate(MathOps(), (x, y, f), [1])
            assert "tl_ex2(" in ck.source and "tl_lg2(" in ck.source
        for k, w in enumerate(want):
            assert np.abs(y[k] - w).max() < 1e-5 * max(1, np.abs(w).max()), (run, k)
        assert (f == 1).all(), run


class Scans(tilus.Script):
    """cumsum/cumprod/scan over either dim, inclusive and exclusive, float and int."""

    def __call__(self, x_ptr: ~float32, i_ptr: ~int32, y_ptr: ~float32, j_ptr: ~int32):
        self.attrs.blocks = 1
        self.attrs.warps = 2
        gx = self.global_view(x_ptr, dtype=float32, shape=[4, 64])
        gi = self.global_view(i_ptr, dtype=int32, shape=[4, 64])
        x = self.load_global(gx, offsets=[0, 0], shape=[4, 64])
        xi = self.load_global(gi, offsets=[0, 0], shape=[4, 64])
        gy = self.global_view(y_ptr, dtype=float32, shape=[4, 4, 64])
        gj = self.global_view(j_ptr, dtype=int32, shape=[2, 4, 64])
        self.store_global(gy, self.cumsum(x, dim=1), offsets=[0, 0, 0], dims=[1, 2])
        self.store_global(gy, self.cumsum(x, dim=0, exclusive=True), offsets=[1, 0, 0],
                          dims=[1, 2])  # fmt: skip
        self.store_global(gy, self.cumprod(x, dim=1), offsets=[2, 0, 0], dims=[1, 2])
        self.store_global(gy, self.scan(x, dim=1, op="max"), offsets=[3, 0, 0], dims=[1, 2])
        self.store_global(gj, self.scan(xi, dim=1, op="xor"), offsets=[0, 0, 0], dims=[1, 2])
        self.store_global(gj, self.scan(xi, dim=1, op="min", exclusive=True), offsets=[1, 0, 0],
                          dims=[1, 2])  # fmt: skip


@needs_nvrtc
@needs_gxx
def test_scans_match_the_interpreter():
    rng = np.random.default_rng()
    x = rng.uniform(0.9, 1.1, (4, 64)).astype(np.float32)
    xi = rng.integers(-1000, 1000, (4, 64)).astype(np.int32)
    outs = {}
    for run in ("interpreter", "emulator"):
        y = np.full((4, 4, 64), np.nan, np.float32)
        j = np.full((2, 4, 64), -7, np.int32)
        if run == "interpreter":
            with tilus.option.scoped(interpret=True):
                Scans()(x, xi, y, j)
        else:
            emulate(Scans(), (x, xi, y, j), [1])
        outs[run] = (y, j)
    y, j = outs["emulator"]
    assert np.allclose(y[0], np.cumsum(x, 1), rtol=1e-5)
    ex0 = np.concatenate([np.zeros((1, 64)), np.cumsum(x, 0)[:-1]])
    assert np.allclose(y[1], ex0, rtol=1e-5)
    assert np.allclose(y[2], np.cumprod(x, 1), rtol=1e-4)
    assert np.array_equal(y[3], np.maximum.accumulate(x, 1))
    assert np.array_equal(j[0], np.bitwise_xor.accumulate(xi, 1))
    big = np.iinfo(np.int32).max
    assert np.array_equal(j[1][:, 0], [big] * 4)
    assert np.array_equal(j[1][:, 1:], np.minimum.accumulate(xi, 1)[:, :-1])
    for a, b in zip(outs["emulator"], outs["interpreter"]):
        assert np.array_equal(a, b)  # the same sequential order on both


class Poke(tilus.Script):
    """``t[i, j] = v`` on a tile spread over two warps, constant and dynamic indices."""

    def __call__(self, i: int32, x_ptr: ~float32):
        self.attrs.blocks = 1
        self.attrs.warps = 2
        gx = self.global_view(x_ptr, dtype=float32, shape=[4, 64])
        x = self.load_global(gx, offsets=[0, 0], shape=[4, 64])
        x[2, 5] = 7.0
        x[i, i + 1] = -3.0
        self.store_global(gx, x, offsets=[0, 0])


@needs_nvrtc
@needs_gxx
def test_element_write_to_a_distributed_tile():
    x = np.random.default_rng().standard_normal((4, 64)).astype(np.float32)
    want = x.copy()
    want[2, 5], want[3, 4] = 7.0, -3.0
    emulate(Poke(), (3, x), [1])
    assert np.array_equal(x, want)
