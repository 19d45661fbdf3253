"""``dot`` beyond float16 -> float32: float16 accumulation, int8/uint8 -> int32, tf32."""

from __future__ import annotations

import numpy as np
import pytest
from dot_forms_kernels import BadDot, DotForm, SharedDot

import tilus
from tilus import bfloat16, float16, float32, int8, int32, tfloat32, uint8
from tilus.backends.interp.rules import DOT_F16_STEP
from tilus.ir.cscalar import round_float_format
from tilus.testing import marker_line

M, N = 100, 72  # ragged: not multiples of the 64 x 64 tile


def _run(operand, acc, a, b, c0=None, k=64, **kw):
    c = np.full((M, N), np.nan if acc.is_float() else -7, dtype=acc.np_storage)
    c0_arr = c0 if c0 is not None else np.zeros(1, acc.np_storage)
    DotForm(operand, acc, k=k, with_c=c0 is not None, **kw)(M, N, a, b, c0_arr, c)
    return c


def _ints(rng, dt, *shape):
    lo, hi = (-128, 128) if dt == int8 else (0, 256)
    return rng.integers(lo, hi, size=shape).astype(dt.np_storage)


@pytest.mark.parametrize("dt", [int8, uint8])
def test_int8_dot_is_exact(dt):
    rng = np.random.default_rng()
    a, b = _ints(rng, dt, M, 64), _ints(rng, dt, 64, N)
    c = _run(dt, int32, a, b)
    np.testing.assert_array_equal(c, a.astype(np.int64) @ b.astype(np.int64))


def test_int32_accumulation_wraps_like_int32_adds():
    # no .satfinite: the sum past 2^31 - 1 wraps (the GPU tier checks the same values)
    rng = np.random.default_rng()
    a = np.full((M, 64), 127, np.int8)
    b = _ints(rng, int8, 64, N) // 2 + 64
    c0 = np.full((M, N), 2**31 - 1000, np.int32)
    c = _run(int8, int32, a, b, c0)
    ref = (a.astype(np.int64) @ b.astype(np.int64) + c0) % 2**32
    ref = np.where(ref >= 2**31, ref - 2**32, ref)
    assert (ref < 0).any()
    np.testing.assert_array_equal(c, ref)


def f16_accumulate(a, b, c0=None):
    """The documented model of mma.sync .f16 accumulation: the sum of each k16 step (in float64,
    then rounded to float32), added to the float16 accumulator and rounded once per step."""
    r = np.zeros((a.shape[0], b.shape[1]), np.float16) if c0 is None else c0.copy()
    for k0 in range(0, a.shape[1], 16):
        step = a[:, k0 : k0 + 16].astype(np.float64) @ b[k0 : k0 + 16].astype(np.float64)
        step = step.astype(np.float32)
        r = (r.astype(np.float32) + step).astype(np.float16)
    return r


def test_f16_accumulator_rounds_once_per_k16_step():
    assert DOT_F16_STEP == 16
    rng = np.random.default_rng()
    a = rng.standard_normal((M, 64)).astype(np.float16)
    b = rng.standard_normal((64, N)).astype(np.float16)
    c0 = rng.standard_normal((M, N)).astype(np.float16)
    c = _run(float16, float16, a, b, c0)
    np.testing.assert_array_equal(c, f16_accumulate(a, b, c0))
    ref = a.astype(np.float64) @ b.astype(np.float64) + c0
    assert np.abs(c - ref).max() < 0.05 * np.abs(ref).max()


def test_tf32_dot_rounds_its_inputs():
    rng = np.random.default_rng()
    a = rng.standard_normal((M, 32)).astype(np.float32)
    b = rng.standard_normal((32, N)).astype(np.float32)
    c = _run(tfloat32, float32, a, b, k=32)
    ta, tb = (round_float_format(x, tfloat32).astype(np.float64) for x in (a, b))
    np.testing.assert_allclose(c, ta @ tb, rtol=1e-5, atol=1e-5)
    # and the rounding matters: the float32 product differs
    assert np.abs(c - a.astype(np.float64) @ b).max() > 1e-4


@pytest.mark.parametrize(
    "bug, fragment",
    [
        ("mix", "different dtypes int8 and float16"),
        ("tf32_acc", "tfloat32 dot accumulates in float32"),
        ("tf32_on_f32", "different dtypes float32 and tfloat32"),
        ("int_into_float", "integer operands accumulate in an integer type"),
    ],
)
def test_dtype_mixes_are_located_errors(bug, fragment):
    with pytest.raises(tilus.TilusProgramError) as info:
        BadDot(bug)(np.zeros(4, np.float32))
    assert fragment in str(info.value), str(info.value)
    assert info.value.loc.line == marker_line(BadDot, f"BUG:{bug}")


# --- CUDA (compile only): the SASS of each form ----------------------------------------------

needs_nvrtc = pytest.importorskip("tests.cuda.conftest").needs_nvrtc

FORMS = [
    (float16, float32, 64, "HMMA.16816.F32"),
    (bfloat16, float32, 64, "HMMA.16816.F32.BF16"),
    (float16, float16, 64, "HMMA.16816.F16"),
    (int8, int32, 64, "IMMA.16832.S8.S8"),
    (uint8, int32, 64, "IMMA.16832.U8.U8"),
    (tfloat32, float32, 32, "HMMA.1688.F32.TF32"),
]


@pytest.fixture(scope="module")
def _fresh_cache(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("TILUS_CACHE_DIR", str(tmp_path_factory.mktemp("tilus-cache")))
    yield
    mp.undo()


def _compile(script, *args, **kw):
    ck = tilus.compile(script, *args, **kw)
    return ck[0] if isinstance(ck, list) else ck


@needs_nvrtc
@pytest.mark.parametrize("operand, acc, k, opcode", FORMS, ids=lambda x: str(x))
def test_each_form_compiles_to_its_mma(_fresh_cache, operand, acc, k, opcode):
    from tilus.runtime.sass import sass_opcodes

    ck = _compile(DotForm(operand, acc, k=k, with_c=True), M, N, *([tilus.void_p] * 4))
    sass = ck.sass()
    assert opcode in sass, sorted(sass_opcodes(sass))
    ops = sass_opcodes(sass)
    assert not ops.get("LDL") and not ops.get("STL"), ops


@needs_nvrtc
def test_int8_dot_builds_for_sm_80(_fresh_cache):
    ck = _compile(DotForm(int8, int32), M, N, *([tilus.void_p] * 4), target="sm_80")
    assert "IMMA.16832.S8.S8" in ck.sass()


class F32Dot(tilus.Script):
    def __call__(self, a_ptr: tilus.void_p):
        self.attrs.blocks = 1
        self.attrs.warps = 4
        a = self.register_tensor(dtype=float32, shape=[64, 32], init=1.0)
        b = self.register_tensor(dtype=float32, shape=[32, 64], init=1.0)
        self.dot(a, b, acc_dtype=float32)  # BUG:f32


@needs_nvrtc
def test_float32_dot_is_refused_on_cuda_naming_the_line(_fresh_cache):
    with pytest.raises(tilus.TilusCompileError) as info:
        tilus.compile(F32Dot(), tilus.void_p)
    assert "no mma.sync form for float32" in str(info.value)
    assert "tfloat32 -> float32" in str(info.value)
    assert info.value.loc.line == marker_line(F32Dot, "BUG:f32")


@needs_nvrtc
@pytest.mark.parametrize("operand, acc", [(float16, float32), (int8, int32)], ids=str)
def test_shared_operands_load_with_ldmatrix(_fresh_cache, operand, acc):
    # 16-bit A and B (B with .trans) are all LDSM; int8's A is LDSM, its B (no 8-bit .trans)
    # stays element-wise
    from tilus.runtime.sass import sass_opcodes

    ck = _compile(SharedDot(operand, acc), M, N, *([tilus.void_p] * 3))
    ops = sass_opcodes(ck.sass())
    assert ops.get("LDSM", 0) > 0, ops
    assert "tl_ldmatrix_x4(" in ck.source
    if operand == float16:
        assert "tl_ldmatrix_x4_trans(" in ck.source and not ops.get("LDS"), ops


def test_shared_operands_on_the_interpreter():
    rng = np.random.default_rng()
    a = rng.standard_normal((M, 64)).astype(np.float16)
    b = rng.standard_normal((64, N)).astype(np.float16)
    c = np.full((M, N), np.nan, np.float32)
    SharedDot(float16, float32)(M, N, a, b, c)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-4)
