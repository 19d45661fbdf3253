"""``fast_divmod`` with host-computed magic numbers (tilus/passes/fast_divmod.py): which divisors
become hidden parameters, the generated CUDA and SASS, the launcher's hidden arguments (driver
faked) and agreement with the interpreter."""

from __future__ import annotations

import ctypes
import importlib.util
import re
import sys
from pathlib import Path

import numpy as np
import pytest

import tilus
from tests.cuda.conftest import needs_gpu, needs_nvrtc
from tests.cuda.test_codegen import seed
from tests.helpers_fakegpu import FakeTensor as _Fake
from tests.test_fast_divmod_math import device_divmod
from tilus import float16, int32
from tilus.backends.cuda import launcher as LR
from tilus.backends.cuda.codegen.kernel import generate
from tilus.ir.printer import print_ir
from tilus.lang.script import InstantiatedScript

ROWS = 6  # the output rows: (q, r) by rows * cols, by cols, by blockIdx.x + 1


class DivMod(tilus.Script):
    """Quotient and remainder of the block index ``i`` by three divisors: ``rows * cols`` and
    ``cols`` (launch-invariant: hidden parameters) and ``i // 32 + 1`` (varies: plain ``/``)."""

    def __call__(self, n: int32, rows: int32, cols: int32, out: ~int32):
        self.attrs.blocks = [n]
        self.attrs.warps = 1
        per = rows * cols
        i = self.blockIdx.x
        varying = (i >> 5) + 1
        g = self.global_view(out, dtype=int32, shape=[ROWS, n])
        q0, r0 = self.fast_divmod(i, per)
        q1, r1 = self.fast_divmod(i, cols)
        q2, r2 = self.fast_divmod(i, varying)
        for k, v in enumerate([q0, r0, q1, r1, q2, r2]):
            t = self.register_tensor(dtype=int32, shape=[1, 1], init=v)
            self.store_global(g, t, offsets=[k, i])


def _program(kernel, *args):
    const_args, _ = kernel.bind(args, {})
    return kernel.program(kernel.configs[0], const_args)


def _expected(n, rows, cols):
    i = np.arange(n, dtype=np.int64)
    var = i // 32 + 1
    per = rows * cols
    return np.stack([i // per, i % per, i // cols, i % cols, i // var, i % var]).astype(np.int32)


# --- the pass ----------------------------------------------------------------------------------
def test_only_launch_invariant_divisors_become_hidden_parameters():
    prog = _program(DivMod(), 64, 3, 5, np.zeros((ROWS, 64), np.int32))
    plan = prog.fastdiv
    assert [d.text for d in plan.divisors] == ["per", "cols"]
    assert [print_ir(d.expr) for d in plan.divisors] == ["(rows * cols)", "cols"]
    assert len(plan.calls) == 4  # div and mod by each; the blockIdx-based ones are left alone
    assert "hidden tl_div0 = (rows * cols)" in prog.text  # part of the compile-cache key


def test_kernels_without_fast_divmod_keep_their_program_text():
    V4 = seed("matmul_v4").MatmulWGMMAV4  # a kernel with: text = IR + hidden-divisor lines
    prog = _program(V4(), 4096, 4096, 4096, float16, float16, float16)
    assert prog.text.startswith(print_ir(prog.fn))
    V2 = seed("matmul_v2").MatmulWGMMAV2  # a kernel without: unchanged text
    cfg = V2().configs[0]
    const_args, _ = V2(**cfg).bind((4096, 4096, 4096, float16, float16, float16), {})
    prog2 = V2(**cfg).program(cfg, const_args)
    assert prog2.text == print_ir(prog2.fn) and prog2.fastdiv.divisors == ()


# --- generated CUDA and SASS -------------------------------------------------------------------
def test_seed_v4_divides_by_the_hidden_divisor():
    V4 = seed("matmul_v4").MatmulWGMMAV4
    ks = generate(_program(V4(), 4096, 4096, 4096, float16, float16, float16))
    src = ks.source
    assert "const tl_divisor_t tl_div0) {" in src  # after the tensor maps
    assert [d.text for d in ks.divisors] == ["tiles_per_group"]
    assert "int group_idx = tl_fastdiv(linear_idx, tl_div0);" in src
    assert "int in_group_idx = tl_fastmod(linear_idx, tl_div0);" in src
    assert "__umulhi" in src and "struct tl_divisor_t" in src
    # no C division by a parameter-derived value is left (only by the constants 128 and 4)
    body = re.sub(r"//.*", "", src[src.index('extern "C"') :])
    divs = re.findall(r"[/%] \(*[A-Za-z_]\w*", body)
    assert divs == [], divs


def test_example_v4_tile_coords_use_the_hidden_divisor(monkeypatch):
    examples = Path(__file__).resolve().parents[2] / "examples" / "hopper_matmul"
    monkeypatch.syspath_prepend(str(examples))  # for its `import harness`
    monkeypatch.delitem(sys.modules, "harness", raising=False)
    spec = importlib.util.spec_from_file_location(
        "fast_divmod_example_v4", examples / "matmul_v4.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    V4 = mod.MatmulWGMMAV4
    for cfg in V4().configs:
        kernel = V4(**cfg)
        const_args, _ = kernel.bind((1000, 2048, 512, float16, float16, float16), {})
        ks = generate(kernel.program(cfg, const_args))
        body = re.sub(r"//.*", "", ks.source[ks.source.index('extern "C"') :])
        assert len(ks.divisors) == 1 and print_ir(ks.divisors[0].expr).endswith(
            f"/ {cfg['block_m']}) * {cfg['swizzle']})"
        ), print_ir(ks.divisors[0].expr)
        assert body.count(", tl_div0)") == 2, cfg  # the group's div and mod
        assert not re.findall(r"[/%] \(*[A-Za-z_]\w*", body), cfg  # no division by a variable


def test_varying_divisors_divide_plainly_and_other_kernels_get_no_helper():
    prog = _program(DivMod(), 64, 3, 5, np.zeros((ROWS, 64), np.int32))
    src = generate(prog).source
    body = src[src.index('extern "C"') :]
    assert "const tl_divisor_t tl_div0,\n    const tl_divisor_t tl_div1) {" in body
    assert body.count("tl_fastdiv(") == 2 and body.count("tl_fastmod(") == 2
    assert re.search(r"= \(i / varying\);", src) and re.search(r"= \(i % varying\);", src)
    V2 = seed("matmul_v2").MatmulWGMMAV2
    cfg = V2().configs[0]
    const_args, _ = V2(**cfg).bind((4096, 4096, 4096, float16, float16, float16), {})
    assert "tl_divisor_t" not in generate(V2(**cfg).program(cfg, const_args)).source


DIVISION_SEQUENCE = ("I2F", "MUFU", "F2I")  # int division by a runtime value: float reciprocal


@needs_nvrtc
def test_seed_v4_sass_has_no_division_sequence(monkeypatch, tmp_path):
    import tilus.passes.pipeline as P
    from tilus.passes.fast_divmod import FastDivPlan
    from tilus.runtime.sass import sass_opcodes

    monkeypatch.setenv("TILUS_CACHE_DIR", str(tmp_path))
    V4 = seed("matmul_v4").MatmulWGMMAV4
    args = (4096, 4096, 4096, float16, float16, float16)
    after = sass_opcodes(tilus.compile(V4(), *args).sass())
    assert after["HGMMA"] > 0
    assert not any(after.get(op) for op in DIVISION_SEQUENCE), after
    # the same kernel without hidden divisors has the sequence (so the check above means
    # something); a fresh instance re-lowers it (programs are cached per instance)
    monkeypatch.setattr(P, "plan_fast_divmod", lambda fn: FastDivPlan())
    kernel = InstantiatedScript(V4, (), {})
    before = sass_opcodes(tilus.compile(kernel, *args).sass())
    assert all(before.get(op) for op in DIVISION_SEQUENCE), before


# --- the launcher (driver faked) ---------------------------------------------------------------
def FakeTensor(array):  # noqa: N802 - reads like the class it builds
    """An int32 'CUDA tensor' (tests/helpers_fakegpu.py) backed by ``array``."""
    return _Fake(array, dtype=np.int32)


class FakeGPU:
    """Runs DivMod 'on the GPU': reads the kernel parameters the launcher passes, the hidden
    divisors included, and computes the outputs with the device formula in NumPy."""

    def __init__(self):
        self.hidden: list = []

    def make_launch(self, kernel, threads, smem):
        def go(gx, gy, gz, stream, params):
            slots = ctypes.cast(params, ctypes.POINTER(ctypes.c_void_p))
            n, rows, cols = (ctypes.c_int32.from_address(slots[i]).value for i in range(3))
            out = _Fake.registry[ctypes.c_uint64.from_address(slots[3]).value]
            hidden = [tuple((ctypes.c_uint32 * 3).from_address(slots[i])) for i in (4, 5)]
            self.hidden.append(hidden)
            assert gx == n and threads == 32
            i = np.arange(n, dtype=np.int64)
            var = i // 32 + 1
            res = []
            for d, magic, shift in hidden:
                from tilus.passes.fast_divmod import magic_numbers

                assert (magic, shift) == magic_numbers(d)
                res.extend(device_divmod(i, d))
            res.extend([i // var, i % var])
            out.array[:] = np.stack(res).astype(np.int32)

        return go


@pytest.fixture
def gpu(monkeypatch, tmp_path):
    fake = FakeGPU()
    monkeypatch.setenv("TILUS_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(LR, "_load", lambda ck, index: ck.kernel.name)
    monkeypatch.setattr(LR, "_make_launch", fake.make_launch)
    monkeypatch.setattr(LR, "_make_context", lambda index: lambda: None)
    monkeypatch.setattr(LR, "_stream_getter", lambda index: lambda: 0)
    return fake


@needs_nvrtc
def test_launcher_passes_hidden_divisors_per_integer_arguments(gpu):
    kernel = DivMod()
    for n, rows, cols in [(64, 3, 5), (96, 7, 1), (64, 3, 5), (128, 1000, 3)]:
        out = FakeTensor(np.full((ROWS, n), -1))
        kernel(n, rows, cols, out)
        np.testing.assert_array_equal(out.array, _expected(n, rows, cols))
    per_call = [[h[0] for h in hidden] for hidden in gpu.hidden]
    assert per_call == [[15, 5], [7, 1], [15, 5], [3000, 3]]


@needs_nvrtc
def test_launcher_rejects_a_zero_divisor_naming_the_line(gpu):
    kernel = DivMod()
    out = FakeTensor(np.zeros((ROWS, 64)))
    with pytest.raises(tilus.TilusArgumentError) as e:
        kernel(64, 0, 5, out)
    msg = str(e.value)
    assert "DivMod" in msg and "fast_divmod divisor `per` is 0" in msg, msg
    assert "test_fast_divmod.py:" in msg and "q0, r0 = self.fast_divmod(i, per)" in msg, msg
    with pytest.raises(tilus.TilusArgumentError, match="divisor `per` is -6"):
        kernel(64, 3, -2, out)
    assert gpu.hidden == []  # nothing was launched
    kernel(0, 0, 0, FakeTensor(np.zeros((ROWS, 0))))  # an empty grid divides by nothing


# --- the interpreter agrees with the magic-number math -------------------------------------------
@pytest.mark.parametrize("n, rows, cols", [(64, 3, 5), (160, 1, 1), (96, 2, 47), (64, 9, 1000)])
def test_interpreter_and_magic_numbers_agree(n, rows, cols):
    out = np.full((ROWS, n), -1, np.int32)
    DivMod()(n, rows, cols, out)
    np.testing.assert_array_equal(out, _expected(n, rows, cols))
    # the hidden arguments the launcher would pass, applied with the device formula
    ks = generate(_program(DivMod(), n, rows, cols, out))
    plan = LR.LaunchPlan("DivMod", ks)
    bound = plan.bind(
        {"n": n, "rows": rows, "cols": cols}, {"n": 0, "rows": 1, "cols": 2, "out": 3}
    )
    i = np.arange(n, dtype=np.int64)
    for k, (d, _, _) in enumerate(bound.divisors):
        q, r = device_divmod(i, d)
        np.testing.assert_array_equal(q, out[2 * k])
        np.testing.assert_array_equal(r, out[2 * k + 1])


# --- on a GPU ----------------------------------------------------------------------------------
class DivModAt(tilus.Script):
    """``divmod(off + blockIdx.x, d)`` for a launch-invariant ``d`` (a hidden divisor)."""

    def __call__(self, n: int32, off: int32, d: int32, out: ~int32):
        self.attrs.blocks = [n]
        self.attrs.warps = 1
        g = self.global_view(out, dtype=int32, shape=[2, n])
        q, r = self.fast_divmod(off + self.blockIdx.x, d)
        self.store_global(
            g, self.register_tensor(dtype=int32, shape=[1, 1], init=q), offsets=[0, self.blockIdx.x]
        )
        self.store_global(
            g, self.register_tensor(dtype=int32, shape=[1, 1], init=r), offsets=[1, self.blockIdx.x]
        )


@pytest.mark.gpu
@needs_gpu
def test_gpu_fast_divmod_matches_python():
    import torch

    rng = np.random.default_rng(7)
    n = 4096
    divisors = list(range(1, 300)) + [2**k + e for k in range(9, 31) for e in (-1, 0, 1)]
    divisors += [int(x) for x in rng.integers(300, 2**31 - 1, size=200)] + [2**31 - 1]
    kernel = DivModAt()
    for d in divisors:
        for off in (0, int(rng.integers(0, 2**31 - n)), 2**31 - n):
            out = torch.full((2, n), -1, dtype=torch.int32, device="cuda")
            kernel(n, off, d, out)
            i = np.arange(off, off + n, dtype=np.int64)
            got = out.cpu().numpy()
            np.testing.assert_array_equal(got[0], i // d, err_msg=f"d={d} off={off}")
            np.testing.assert_array_equal(got[1], i % d, err_msg=f"d={d} off={off}")
    with pytest.raises(tilus.TilusArgumentError, match="divisor `d` is 0"):
        kernel(n, 0, 0, torch.zeros((2, n), dtype=torch.int32, device="cuda"))
