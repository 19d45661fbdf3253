"""wgmma.mma with the A operand in registers: interpreter results, protocol checks, CUDA code."""

from __future__ import annotations

import numpy as np
import pytest
from wgmma_rega_kernels import Chain, RegA, RegAConflict, RegATransposed

import tilus
from tilus import bfloat16, float16
from tilus.testing import marker_line


def _rand(rng, *shape):
    return rng.standard_normal(shape).astype(np.float16)


def _chain_inputs(m, n1, k1, d):
    rng = np.random.default_rng()
    a, b1, b2 = _rand(rng, m, k1), _rand(rng, n1, k1), _rand(rng, d, n1)
    o = np.full((m, d), np.nan, dtype=np.float32)
    return a, b1, b2, o


def _chain_ref(a, b1, b2, iters):
    s = a.astype(np.float32) @ b1.astype(np.float32).T
    p = s.astype(np.float16).astype(np.float64)  # the kernel rounds P to float16
    return iters * (p @ b2.astype(np.float64).T)


def test_register_a_matches_numpy_ragged():
    rng = np.random.default_rng()
    m, n, k = 100, 72, 32
    a, b = _rand(rng, m, k), _rand(rng, n, k)
    c = np.full((m, n), np.nan, dtype=np.float32)
    RegA(bm=64, bn=64, k=k)(m, n, a, b, c)
    ref = a.astype(np.float64) @ b.astype(np.float64).T
    np.testing.assert_allclose(c, ref, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("seed", [None, 3])
def test_chain_p_from_registers_matches_numpy(seed):
    m, n1, k1, d = 90, 64, 32, 32
    a, b1, b2, o = _chain_inputs(m, n1, k1, d)
    with tilus.option.scoped(schedule_seed=seed):
        Chain(bm=64, n1=n1, k1=k1, d=d, iters=2)(m, a, b1, b2, o)
    ref = _chain_ref(a, b1, b2, 2)
    assert not np.isnan(o).any()
    np.testing.assert_allclose(o, ref, rtol=2e-3, atol=2e-2)


def _raises(kernel, fragment, marker):
    m, n1, k1, d = 64, 64, 32, 32
    a, b1, b2, o = _chain_inputs(m, n1, k1, d)
    with pytest.raises(tilus.TilusRuntimeError) as info:
        kernel(m, a, b1, b2, o)
    err = info.value
    assert fragment in str(err), str(err)
    assert err.loc is not None and err.loc.line == marker_line(Chain, marker), str(err)
    assert err.loc.file.endswith("wgmma_rega_kernels.py")


def test_write_to_register_a_in_flight_is_reported():
    _raises(Chain("write_in_flight"), "still reads it as its A operand", "BUG:write_in_flight")


def test_read_of_register_a_in_flight_is_reported():
    _raises(Chain("read_in_flight"), "still reads it as its A operand", "BUG:read_in_flight")


def test_register_a_written_after_the_fence_is_reported():
    _raises(Chain("no_fence"), "written after the last wgmma.fence()", "BUG:no_fence")


def test_register_a_needs_a_16_bit_float_tile():
    class F32A(tilus.Script):
        def __call__(self, a_ptr: ~tilus.float32):
            self.attrs.blocks = 1
            self.attrs.warps = 4
            a = self.register_tensor(dtype=tilus.float32, shape=[64, 16], init=0.0)
            sb = self.shared_tensor(dtype=float16, shape=[64, 16])
            acc = self.register_tensor(dtype=tilus.float32, shape=[64, 64], init=0.0)
            self.wgmma.mma(a, sb.transpose(), acc)  # BUG:dtype

    with pytest.raises(tilus.TilusProgramError) as info:
        F32A()(np.zeros(4, np.float32))
    assert "float16/bfloat16 operands of one dtype" in str(info.value)
    assert info.value.loc.line == marker_line(F32A, "BUG:dtype")


# --- CUDA (compile only) ---------------------------------------------------------------------

needs_nvrtc = pytest.importorskip("tests.cuda.conftest").needs_nvrtc


@pytest.fixture(scope="module")
def _fresh_cache(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("TILUS_CACHE_DIR", str(tmp_path_factory.mktemp("tilus-cache")))
    yield
    mp.undo()


def _compile(script, *args):
    ck = tilus.compile(script, *args)
    return ck[0] if isinstance(ck, list) else ck


@needs_nvrtc
@pytest.mark.parametrize("dtype", [float16, bfloat16])
def test_chain_moves_no_registers_through_shared_memory(_fresh_cache, dtype):
    # the accumulator [64, 64] cast to 16 bits is the A fragment [64, 64] as it is: the cast
    # is per register and the second wgmma reads the registers (HGMMA with an R operand)
    ck = _compile(
        Chain(bm=128, n1=64, k1=32, d=64, dtype=dtype), 256, dtype, dtype, dtype, tilus.float32
    )
    src = ck.source
    assert "through shared memory" not in src
    assert "_rs(" in src and "_ss(" in src
    sass = ck.sass()
    hgmma = [ln for ln in sass.splitlines() if "HGMMA" in ln]
    # rs form: the A operand is a register (R), not a descriptor (gdesc)
    assert any("gdesc" not in ln.split("HGMMA", 1)[1].split(",")[1] for ln in hgmma), hgmma
    assert not ck.wgmma_serialized, ck.log
    assert ck.resources.get("spill_store_bytes", 0) == 0, ck.resources


@needs_nvrtc
def test_register_a_from_global_compiles(_fresh_cache):
    ck = _compile(RegA(bm=64, bn=64, k=32), 100, 72, float16, float16, tilus.float32)
    assert "tl_wgmma_m64n64k16_f32_f16_rs(" in ck.source
    assert "HGMMA" in ck.sass()


@needs_nvrtc
def test_register_a_next_to_other_fixed_layouts_is_converted(_fresh_cache):
    # a is an mma.sync operand (a copy converted at the dot) and the wgmma A fragment; the
    # mma result is converted to the wgmma accumulator's layout at the addition
    ck = _compile(RegAConflict(), float16, tilus.float32)
    src = ck.source
    assert "(mma_c) -> %" in src and "(wgmma_acc) through shared memory" in src
    assert "_rs(" in src


@needs_nvrtc
def test_register_a_transposed_view_is_refused(_fresh_cache):
    with pytest.raises(tilus.TilusCompileError) as info:
        tilus.compile(RegATransposed(), float16, tilus.float32)
    assert "transposed view" in str(info.value)
    assert info.value.loc.line == marker_line(RegATransposed, "BUG:transposed")
