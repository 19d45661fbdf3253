"""The ring form (persistent blocks, copy_async-pipelined) of the row-wise kernels: the interpreter at ragged
sizes with fewer blocks than row groups (so every block loops and refills its stages), the
generated CUDA on the CPU emulator, and the SASS (cp.async 16-byte copies, 128-bit shared
loads and global stores, no local memory)."""

from __future__ import annotations

import re
import sys

import numpy as np
import pytest

import tilus
from tests.cuda.conftest import ROOT, needs_nvrtc
from tests.helpers_cpu_cuda import available, emulate
from tilus import void_p

needs_gxx = pytest.mark.skipif(not available(), reason="needs g++ for the CPU emulator")


@pytest.fixture(scope="module")
def ex(tmp_path_factory):
    """The examples' modules (imported by their plain names, as the scripts import each other)."""
    names = ["example_support", "rowwise_support", "softmax", "layer_norm", "rms_norm"]
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(ROOT / "examples"))
        mp.setenv("TILUS_CACHE_DIR", str(tmp_path_factory.mktemp("tilus-cache")))
        for n in names:
            mp.delitem(sys.modules, n, raising=False)
        import importlib

        yield {n: importlib.import_module(n) for n in names}
        for n in names:
            sys.modules.pop(n, None)


def _cases(ex, rng, m, n):
    """(kernel class, inputs, reference, tolerance) of each ring kernel on fresh inputs."""
    x = rng.standard_normal((m, n)).astype(np.float16)
    w, b = (rng.standard_normal(n).astype(np.float16) for _ in range(2))
    sm, ln, rn = ex["softmax"], ex["layer_norm"], ex["rms_norm"]
    return [
        (sm.Softmax, (x,), sm.reference, 2e-3),
        (ln.LayerNorm, (x, w, b), ln.reference, 1e-2),
        (rn.RMSNorm, (x, w), rn.reference, 1e-2),
    ]


def _pin(cls, cfg, hints=0):
    """``cls(**cfg)`` with ``hints`` (the autotune group's fifth name)."""
    return cls(**cfg, hints=hints)


def _close(got, want, tol):
    assert not np.isnan(got).any()
    err = np.abs(got.astype(np.float64) - want).max() / max(1.0, np.abs(want).max())
    assert err < tol, err


# (m, n, config): m not a multiple of the rows a stage holds, n not a multiple of the tile,
# fewer blocks than row groups; 2 and 3 stages
CASES = [
    (7, 200, dict(block=512, per_thread=8, stages=2, warps=0, max_blocks=3)),  # 2 rows a stage
    (9, 100, dict(block=128, per_thread=8, stages=3, warps=0, max_blocks=2)),  # 1 row a stage
    (
        3,
        9000,
        dict(block=2048, per_thread=8, stages=2, warps=0, max_blocks=2),
    ),  # 2 column chunks
    # the small-block form: one warp a block over 4 column chunks; 2 warps over 4 rows a stage
    (5, 1000, dict(block=8192, per_thread=8, stages=3, warps=1, max_blocks=2)),
    (9, 100, dict(block=8192, per_thread=16, stages=2, warps=2, max_blocks=2)),
]


@pytest.mark.parametrize("m, n, cfg", CASES)
def test_ring_kernels_on_the_interpreter(ex, m, n, cfg):
    rng = np.random.default_rng()
    for cls, args, ref, tol in _cases(ex, rng, m, n):
        y = np.full((m, n), np.nan, np.float16)
        _pin(cls, cfg)(m, n, *args, y)
        _close(y, ref(*(a.astype(np.float64) for a in args)), tol)


def test_ring_plan_fits_shared_memory(ex):
    sm = ex["softmax"]
    for n in (100, 1024, 8192, 32000, 32768):
        for block, per_thread, stages, nw in sm.RING_SPACE + sm.SMALL_SPACE:
            for vectors in (0, 1, 2):
                bn, rows, chunks, warps, s, vec_shared, per_sm = sm.ring_plan(
                    n, block, per_thread, stages, vectors, nw
                )
                assert chunks == 1 or rows == 1
                assert nw in (0, warps) and per_sm <= sm.SM_BLOCKS
                assert rows * bn // chunks // (32 * warps) <= max(per_thread, bn // 32 // warps)
                used = s * rows * bn * 2 + (vectors * bn * 2 if vec_shared else 0)
                assert 2 <= s <= stages and used <= sm.RING_SMEM and 1 <= warps <= 32
                assert per_sm * (used + 1024) <= 228 * 1024 and per_sm * 32 * warps <= 2048


@needs_nvrtc
@needs_gxx
@pytest.mark.parametrize(
    "m, n, cfg",
    [
        (7, 200, dict(block=512, per_thread=8, stages=3, warps=0, max_blocks=2)),
        # the small-block form: 2 warps over 2 column chunks, a cross-warp reduction each
        (5, 900, dict(block=8192, per_thread=8, stages=2, warps=2, max_blocks=2)),
    ],
)
def test_ring_kernels_on_the_emulator(ex, m, n, cfg):
    rng = np.random.default_rng()
    for cls, args, ref, tol in _cases(ex, rng, m, n):
        y = np.full((m, n), np.nan, np.float16)
        emulate(_pin(cls, cfg), (m, n, *args, y), [2])
        _close(y, ref(*(a.astype(np.float64) for a in args)), tol)


@needs_nvrtc
def test_ring_sass(ex):
    import tilus

    m, n = 4096, 8192
    x = np.zeros((m, n), np.float16)
    v = np.zeros(n, np.float16)
    for cls, nvec in (
        (ex["softmax"].Softmax, 0),
        (ex["layer_norm"].LayerNorm, 2),
        (ex["rms_norm"].RMSNorm, 1),
    ):
        cfg = dict(block=8192, per_thread=16, stages=2, warps=0)
        ck = tilus.compile(_pin(cls, cfg), m, n, x, *[v] * nvec, x)
        sass = ck.sass()
        for op in ("LDGSTS.E.BYPASS.128", "LDS.128", "STG.E.128"):
            assert re.search(rf"\b{re.escape(op)}\b", sass), (cls.__name__, op)
        assert not re.search(r"\b(LDL|STL)\b", sass), cls.__name__


@needs_nvrtc
def test_small_form_sass(ex):
    """The small-block form: 16-byte copies and accesses, no local memory, and one block
    barrier a row besides one a cross-warp reduction (none with one warp a block)."""
    import tilus

    for n, cfg, bars in [
        (8192, dict(block=8192, per_thread=32, stages=2, warps=2), (3, 3, 2)),
        (1024, dict(block=8192, per_thread=32, stages=4, warps=1), (1, 1, 1)),
    ]:
        m = 4096
        x = np.zeros((m, n), np.float16)
        v = np.zeros(n, np.float16)
        kernels = (
            (ex["softmax"].Softmax, 0),
            (ex["layer_norm"].LayerNorm, 2),
            (ex["rms_norm"].RMSNorm, 1),
        )
        for (cls, nvec), nbar in zip(kernels, bars):
            sass = tilus.compile(_pin(cls, cfg), m, n, x, *[v] * nvec, x).sass()
            for op in ("LDGSTS.E.BYPASS.128", "LDS.128", "STG.E.128", "SHFL.BFLY"):
                assert re.search(rf"\b{re.escape(op)}\b", sass), (cls.__name__, n, op)
            assert not re.search(r"\b(LDL|STL)\b", sass), (cls.__name__, n)
            assert len(re.findall(r"\bBAR\.SYNC\b", sass)) == nbar, (cls.__name__, n)


class SharedRoundTrip(tilus.Script):
    """A tile through shared memory and back, stored and loaded with 16-byte shared vectors."""

    def __init__(self, dtype):
        super().__init__()
        self.dtype = dtype

    def __call__(self, x_ptr: void_p, y_ptr: void_p, z_ptr: void_p):
        self.attrs.blocks = 1
        self.attrs.warps = 2
        gx = self.global_view(x_ptr, dtype=self.dtype, shape=[8, 64])
        gy = self.global_view(y_ptr, dtype=self.dtype, shape=[8, 64])
        gz = self.global_view(z_ptr, dtype=self.dtype, shape=[8, 64])
        s = self.shared_tensor(dtype=self.dtype, shape=[8, 64])
        self.store_shared(s, self.load_global(gx, offsets=[0, 0], shape=[8, 64]) * 2)
        self.sync()
        self.store_global(gy, self.load_shared(s), offsets=[0, 0])
        self.store_global(gz, self.load_shared(s) + 1, offsets=[0, 0])


@needs_nvrtc
@needs_gxx
@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_shared_vectors_on_the_emulator(dtype):
    import tilus

    dt = getattr(tilus, dtype)
    rng = np.random.default_rng()
    x = rng.standard_normal((8, 64)).astype(dtype)
    y = np.full_like(x, np.nan)
    z = np.full_like(x, np.nan)
    ck = emulate(SharedRoundTrip(dt), (x, y, z), [1])
    np.testing.assert_array_equal(y, x * 2)
    np.testing.assert_array_equal(z, x * 2 + 1)
    assert "uint4" in ck.source or "uint2" in ck.source


def test_small_form_refuses_long_rows(ex):
    """A small-block config for rows longer than 4096 a warp is refused at the line of its check."""
    from tilus.errors import TilusProgramError

    sm = ex["softmax"]
    m, n = 2, 32000
    x = np.zeros((m, n), np.float16)
    with pytest.raises(TilusProgramError) as info:
        sm.Softmax(block=8192, per_thread=32, stages=2, warps=1, hints=0)(m, n, x, x.copy())
    assert "(4096 with warps=1), not 32768" in str(info.value)
    loc = info.value.loc
    assert loc.file.endswith("softmax.py"), loc
    assert loc.line == _line_of(sm.Softmax.ring_rows, "refuse_long_rows(self, bn)"), loc


def _line_of(func, text: str) -> int:
    import inspect

    lines, start = inspect.getsourcelines(func)
    return start + next(i for i, s in enumerate(lines) if text in s)


def _layer_norm_case(ex, m, n, cfg, mean=0.0, grid=None):
    """Run LayerNorm(**cfg) on fresh rows (around ``mean``) with a NaN-poisoned output, on the
    interpreter or (``grid`` given) the g++ emulator, and check it against float64."""
    rng = np.random.default_rng()
    x = (mean + rng.standard_normal((m, n))).astype(np.float16)
    w = rng.standard_normal(n).astype(np.float16)
    b = rng.standard_normal(n).astype(np.float16)
    y = np.full((m, n), np.nan, np.float16)
    kernel = ex["layer_norm"].LayerNorm(**cfg, hints=0)
    if grid is None:
        kernel(m, n, x, w, b, y)
    else:
        emulate(kernel, (m, n, x, w, b, y), grid)
    want = ex["layer_norm"].reference(x.astype(np.float64), w.astype(np.float64), b)
    _close(y, want, 1e-2)


def test_layer_norm_one_pass_keeps_large_means(ex):
    """The ring layer norm's one-pass statistics (shifted by the row's first chunk) stay
    accurate when the mean is large against the spread (naive sums of squares would cancel)."""
    cfg = dict(block=2048, per_thread=8, stages=2, warps=0, max_blocks=2)
    _layer_norm_case(ex, 3, 9000, cfg, mean=300.0)  # 2 column chunks of 8 elements a thread


def test_layer_norm_long_rows_w_shared_b_in_registers(ex):
    """Rows of 32000 in 2 stages: w and b do not both fit beside the ring, so w is copied to
    shared memory and b held in registers (viewed as uint32 pairs); the ragged tail of the
    4th chunk (zeros, taken off the shifted statistics) never stored."""
    plan = ex["layer_norm"].vector_plan(32000, 8192, 8, 2, 0)
    assert plan[5] == ("shared", "regs") and plan[2] == 4  # w shared, b in registers; 4 chunks
    _layer_norm_case(ex, 2, 32000, dict(block=8192, per_thread=8, stages=2, warps=0, max_blocks=1))


def test_layer_norm_vector_placement(ex):
    """Where the ring layer norm keeps w and b: registers when a thread holds few of their
    columns, shared memory when both fit, else w shared and b in registers; the small-block
    form reads them from global memory."""
    plan = ex["layer_norm"].vector_plan
    assert plan(8192, 8192, 16, 3, 0)[5] == ("regs", "regs")  # 16 columns a thread
    assert plan(8192, 16384, 64, 3, 0)[5] == ("shared", "shared")  # 2 rows a stage
    assert plan(32000, 8192, 8, 2, 0)[5] == ("shared", "regs")
    assert plan(1024, 8192, 32, 4, 1)[5] == ("global", "global")
    _layer_norm_case(ex, 9, 100, dict(block=128, per_thread=8, stages=3, warps=0, max_blocks=2))


@needs_nvrtc
@needs_gxx
def test_layer_norm_vectors_in_registers_on_the_emulator(ex):
    cfg = dict(block=128, per_thread=8, stages=3, warps=0, max_blocks=2)
    assert ex["layer_norm"].vector_plan(100, 128, 8, 3, 0)[5] == ("regs", "regs")
    _layer_norm_case(ex, 9, 100, cfg, grid=[2])


@pytest.mark.parametrize(
    "m, n, cfg",
    [
        (7, 1000, dict(block=1024, per_thread=8, stages=-2, warps=0, max_blocks=2)),
        (5, 300, dict(block=1024, per_thread=8, stages=-1, warps=0, max_blocks=2)),
    ],  # 1 row a stage (2 stages, 4 rows a block); 2 rows a stage in one stage
)
def test_layer_norm_held_rows(ex, m, n, cfg):
    """The held-rows ring: each stage loaded into registers and refilled at once; ragged rows
    and rows past the end of the tensor (zeros, never stored)."""
    _layer_norm_case(ex, m, n, cfg)


@needs_nvrtc
@needs_gxx
def test_layer_norm_held_rows_on_the_emulator(ex):
    cfg = dict(block=1024, per_thread=8, stages=-2, warps=0, max_blocks=2)
    _layer_norm_case(ex, 5, 900, cfg, grid=[2])


# the re-read form: (m, n, per_thread, warps): 4 ragged chunks; one chunk longer than the row;
# 16 chunks (a loop unrolled by 4, not fully); 32 warps, chunks past the row's end
REREAD = [(5, 1000, 8, 1), (3, 200, 8, 2), (2, 4000, 8, 1), (2, 1100, 8, 32)]


@pytest.mark.parametrize("m, n, per_thread, warps", REREAD)
def test_reread_form_on_the_interpreter(ex, m, n, per_thread, warps):
    """The re-read form (a row a block, read twice by the norms, three times by softmax):
    ragged rows, against float64."""
    rng = np.random.default_rng()
    cfg = dict(block=0, per_thread=per_thread, stages=0, warps=warps)
    for cls, args, ref, tol in _cases(ex, rng, m, n):
        y = np.full((m, n), np.nan, np.float16)
        _pin(cls, cfg)(m, n, *args, y)
        _close(y, ref(*(a.astype(np.float64) for a in args)), tol)


def test_reread_layer_norm_keeps_large_means(ex):
    """The re-read form's one-pass statistics (shifted by the first chunk) at a large mean."""
    _layer_norm_case(ex, 3, 1000, dict(block=0, per_thread=8, stages=0, warps=1), mean=300.0)


@needs_nvrtc
@needs_gxx
def test_reread_form_on_the_emulator(ex):
    rng = np.random.default_rng()
    cfg = dict(block=0, per_thread=8, stages=0, warps=1)
    for cls, args, ref, tol in _cases(ex, rng, 3, 1000):
        y = np.full((3, 1000), np.nan, np.float16)
        emulate(_pin(cls, cfg), (3, 1000, *args, y), [3])
        _close(y, ref(*(a.astype(np.float64) for a in args)), tol)


@needs_nvrtc
@needs_gxx
@pytest.mark.parametrize("hints", [1, 2])
def test_reread_form_with_cache_hints_on_the_emulator(ex, hints):
    """The re-read form with its cache hints (the hinted vector accesses, ragged rows)."""
    rng = np.random.default_rng()
    cfg = dict(block=0, per_thread=8, stages=0, warps=1)
    for cls, args, ref, tol in _cases(ex, rng, 3, 1000):
        y = np.full((3, 1000), np.nan, np.float16)
        kernel = _pin(cls, cfg, hints)
        src = tilus.compile(kernel, 3, 1000, *args, y).source
        assert "tl_ld_evict_last_v4" in src and "tl_ld_evict_first_v4" in src, cls.__name__
        assert ("tl_st_stream_v4" in src) == (hints == 2), cls.__name__
        emulate(kernel, (3, 1000, *args, y), [3])
        _close(y, ref(*(a.astype(np.float64) for a in args)), tol)


def test_hints_outside_the_reread_form_are_refused(ex):
    x = np.zeros((3, 1000), np.float16)
    for cls, args, _, _ in _cases(ex, np.random.default_rng(), 3, 1000):
        with pytest.raises(tilus.TilusError, match="take the re-read form"):
            with tilus.option.scoped(interpret=True):
                _pin(cls, dict(block=2048, per_thread=8, stages=0, warps=0), 1)(3, 1000, *args, x)
