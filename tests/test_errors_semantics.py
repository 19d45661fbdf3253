"""Front-end refusals: limits, launch attributes, bools, helpers, control flow, runtime errors."""

from __future__ import annotations

import re

import numpy as np
import pytest
from helpers_errors import (  # noqa: F401
    _args,
    err_line,
    expect_error,
)
from test_errors_statements import MixedDtypes  # noqa: E402

import tilus
from tilus import float16, float32, int32

# --------------------------------------------------------------------------------------------
# limits and launch attributes


class SharedTooBig(tilus.Script):
    def __call__(self, n: int32):
        self.attrs.blocks = 1
        self.attrs.warps = 4
        a = self.shared_tensor(dtype=float16, shape=[256, 256])
        b = self.shared_tensor(dtype=float16, shape=[256, 256])  # ERR
        self.free_shared(a)
        self.free_shared(b)


class TooManyWarps(tilus.Script):
    def __call__(self, n: int32):
        self.attrs.blocks = 1
        self.attrs.warps = 40  # ERR


class GroupTooBig(tilus.Script):
    def __call__(self, n: int32):
        self.attrs.blocks = 1
        self.attrs.warps = 4
        with self.thread_group(64, 32):
            with self.thread_group(16, 32):  # ERR
                self.sync()


class NoWarps(tilus.Script):
    def __call__(self, n: int32):  # ERR
        self.attrs.blocks = 1


class MinBlocksNotInt(tilus.Script):
    def __call__(self, n: int32):
        self.attrs.blocks = 1
        self.attrs.warps = 4
        self.attrs.min_blocks = 0  # ERR


class MinBlocksTooMany(tilus.Script):
    def __call__(self, n: int32):
        self.attrs.blocks = 1
        self.attrs.warps = 16
        self.attrs.min_blocks = 5  # ERR


class MinBlocks(tilus.Script):
    def __call__(self, x_ptr: ~float32):
        self.attrs.blocks = 1
        self.attrs.warps = 8
        self.attrs.min_blocks = 4  # 1024 threads an SM: 64 registers a thread at most
        g = self.global_view(x_ptr, dtype=float32, shape=[256])
        self.store_global(g, self.load_global(g, offsets=[0], shape=[256]) * 2.0, offsets=[0])


def test_min_blocks_out_of_range():
    expect_error(MinBlocksNotInt, tilus.TilusProgramError, r"min_blocks.*\[1, 32\].*0")


def test_min_blocks_over_the_threads_of_an_sm():
    expect_error(MinBlocksTooMany, tilus.TilusProgramError, "5 blocks of 512 threads.*2048")


def test_min_blocks_is_the_launch_bound_and_ignored_by_the_interpreter():
    from tilus.backends.cuda.codegen.kernel import generate

    k = MinBlocks()
    src = generate(k.program(k.configs[0] if k.configs else {}, {})).source
    assert "__launch_bounds__(256, 4)" in src
    x = np.arange(256, dtype=np.float32)
    with tilus.option.scoped(interpret=True):
        k(x)
    assert np.array_equal(x, np.arange(256, dtype=np.float32) * 2)


def test_shared_tensor_over_the_shared_memory_limit():
    err = expect_error(SharedTooBig, tilus.TilusCompileError, "232448")
    assert "shared" in str(err)


def test_warps_out_of_range():
    expect_error(TooManyWarps, tilus.TilusProgramError, "warps.*40")


def test_thread_group_that_does_not_fit_its_parent():
    expect_error(GroupTooBig, tilus.TilusProgramError, "does not fit.*32")


def test_kernel_that_never_sets_warps():
    expect_error(NoWarps, tilus.TilusProgramError, "warps")


# --------------------------------------------------------------------------------------------
# runtime values used where Python needs a bool


class ComprehensionOnRuntimeValue(tilus.Script):
    def __call__(self, n: int32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        picks = [i for i in range(4) if n > i]  # ERR
        self.printf("%d\n", len(picks))


class AndOfTileAndScalar(tilus.Script):
    def __call__(self, n: int32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        t = self.register_tensor(dtype=int32, shape=[4], init=1)
        u = t and n  # ERR
        self.print_tensor("u", u)


class TileAsIfCondition(tilus.Script):
    def __call__(self, n: int32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        t = self.register_tensor(dtype=int32, shape=[4], init=1)
        if t > 0:  # ERR
            self.printf("x\n")


def test_runtime_value_as_bool_in_a_comprehension():
    expect_error(ComprehensionOnRuntimeValue, tilus.TilusProgramError, "runtime value")


def test_and_between_a_tile_and_a_scalar():
    expect_error(AndOfTileAndScalar, tilus.TilusProgramError, "and/or")


def test_tile_as_an_if_condition():
    expect_error(TileAsIfCondition, tilus.TilusProgramError, "tile")


# --------------------------------------------------------------------------------------------
# the message format, and errors inside helpers


class HelperError(tilus.Script):
    def helper(self, t):
        return t + self.register_tensor(dtype=int32, shape=[3], init=0)  # ERR

    def __call__(self, n: int32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        t = self.register_tensor(dtype=int32, shape=[4], init=1)
        self.helper(t)


def test_error_inside_a_helper_points_at_the_helper_line():
    err = expect_error(HelperError, tilus.TilusProgramError, "broadcast", HelperError.helper)
    assert err.loc.func == "helper"
    assert "(in helper)" in str(err).splitlines()[0]


def test_message_shows_the_source_line_and_a_caret():
    err = expect_error(MixedDtypes, tilus.TilusProgramError)
    lines = str(err).splitlines()
    assert lines[1].strip() == "c = a + b  # ERR"
    caret = lines[2]
    assert caret.strip() == "^"
    col = caret.index("^") - 4  # the snippet is indented by four spaces
    assert lines[1][4:][col:].startswith("a + b") or lines[1][4:][col:].startswith("c = ")
    assert head_has_location(lines[0], err_line(MixedDtypes))


def head_has_location(head: str, line: int) -> bool:
    return (
        re.match(
            rf".*{re.escape('test_errors_statements.py')}:{line}:\d+ \(in __call__\): .+", head
        )
        is not None
    )


# --------------------------------------------------------------------------------------------
# more refusals: control flow, compile-time checks, instruction arguments


class RuntimeStep(tilus.Script):
    def __call__(self, n: int32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        for i in range(0, 10, n):  # ERR
            self.printf("%d\n", i)


class ForElse(tilus.Script):
    def __call__(self, n: int32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        for i in range(n):  # ERR
            self.printf("%d\n", i)
        else:
            self.printf("done\n")


class StaticAssert(tilus.Script):
    def __init__(self, block=48):
        super().__init__()
        self.block = block

    def __call__(self, n: int32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        self.static_assert(self.block % 32 == 0, "block must be a multiple of 32")  # ERR


class AssertFalse(tilus.Script):
    def __call__(self, n: int32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        assert 3 > 4, "three is not more than four"  # ERR


class AssertRuntime(tilus.Script):
    def __call__(self, n: int32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        assert n > 0  # ERR


class ConstIndexOutOfRange(tilus.Script):
    def __call__(self, n: int32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        r = self.register_tensor(dtype=int32, shape=[4], init=0)
        r[4] = n  # ERR


class BreakOutOfGroup(tilus.Script):
    def __call__(self, n: int32):
        self.attrs.blocks = 1
        self.attrs.warps = 2
        for _ in range(n):
            with self.single_warp(1):
                break  # ERR


class ReturnInGroup(tilus.Script):
    def __call__(self, n: int32):
        self.attrs.blocks = 1
        self.attrs.warps = 2
        with self.single_thread():
            return  # ERR


class EarlyReturnInHelper(tilus.Script):
    def helper(self, x: int32):
        if x > 0:
            return x  # ERR
        return -x

    def __call__(self, n: int32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        self.printf("%d\n", self.helper(n))


class UnknownLaunchAttr(tilus.Script):
    def __call__(self, n: int32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        self.attrs.threads = 128  # ERR


class RuntimeShape(tilus.Script):
    def __call__(self, n: int32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        r = self.register_tensor(dtype=int32, shape=[n], init=0)  # ERR
        self.print_tensor("r", r)


class RuntimeListIndex(tilus.Script):
    def __call__(self, n: int32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        table = [1, 2, 3]
        self.printf("%d\n", table[n])  # ERR


class SubTileAssign(tilus.Script):
    def __call__(self, n: int32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        r = self.register_tensor(dtype=int32, shape=[4, 4], init=0)
        r[1] = n  # ERR


class ExpOfInts(tilus.Script):
    def __call__(self, n: int32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        r = self.register_tensor(dtype=int32, shape=[4], init=1)
        e = self.exp(r)  # ERR
        self.print_tensor("e", e)


class WhereNotBool(tilus.Script):
    def __call__(self, n: int32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        r = self.register_tensor(dtype=int32, shape=[4], init=1)
        w = self.where(r, r, 0)  # ERR
        self.print_tensor("w", w)


class ViewDtypeMismatch(tilus.Script):
    def __call__(self, a: ~float16):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        g = self.global_view(a, dtype=float32, shape=[16])  # ERR
        self.print_tensor("g", g)


class LoadFromRegister(tilus.Script):
    def __call__(self, n: int32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        r = self.register_tensor(dtype=int32, shape=[4], init=1)
        t = self.load_global(r, offsets=[0], shape=[4])  # ERR
        self.print_tensor("t", t)


class BadDims(tilus.Script):
    def __call__(self, a: ~float32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        g = self.global_view(a, dtype=float32, shape=[4, 4, 4])
        t = self.load_global(g, offsets=[0, 0, 0], shape=[4, 4], dims=[1, 1])  # ERR
        self.print_tensor("t", t)


class GridFromLocal(tilus.Script):
    def __call__(self, n: int32):
        nb: int32 = n
        nb = nb + 1
        self.attrs.blocks = [nb]  # ERR
        self.attrs.warps = 1


class FloatShift(tilus.Script):
    def __call__(self, n: int32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        r = self.register_tensor(dtype=float32, shape=[4], init=1.0)
        s = r << 1  # ERR
        self.print_tensor("s", s)


class TmaWaitReadNotBool(tilus.Script):
    def __call__(self, n: int32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        with self.single_thread():
            self.tma.wait_group(0, read=1)  # ERR


@pytest.mark.parametrize(
    "kernel, fragment",
    [
        (RuntimeStep, "step"),
        (TmaWaitReadNotBool, "read must be True or False"),
        (ForElse, "else"),
        (StaticAssert, "multiple of 32"),
        (AssertFalse, "three is not more than four"),
        (AssertRuntime, "compile-time"),
        (ConstIndexOutOfRange, "out of range"),
        (BreakOutOfGroup, "thread group"),
        (ReturnInGroup, "thread group"),
        (UnknownLaunchAttr, "threads"),
        (RuntimeShape, "shape"),
        (RuntimeListIndex, "runtime value"),
        (SubTileAssign, "sub-tile"),
        (ExpOfInts, "floating-point"),
        (WhereNotBool, "boolean"),
        (ViewDtypeMismatch, "float16"),
        (LoadFromRegister, "global"),
        (BadDims, "dims"),
        (GridFromLocal, "nb"),
        (FloatShift, "integer"),
    ],
)
def test_more_refusals(kernel, fragment):
    expect_error(kernel, tilus.TilusProgramError, fragment)


def test_early_return_in_a_helper():
    expect_error(
        EarlyReturnInHelper,
        tilus.TilusProgramError,
        "last statement",
        EarlyReturnInHelper.helper,
    )


# --------------------------------------------------------------------------------------------
# runtime errors point at the line too


class ScalarDivByZero(tilus.Script):
    def __call__(self, n: int32, out: ~int32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        g = self.global_view(out, dtype=int32, shape=[4])
        r = self.register_tensor(dtype=int32, shape=[4], init=0)
        r[0] = 10 // n  # ERR
        self.store_global(g, r, offsets=[0])


class RuntimeIndexOutOfRange(tilus.Script):
    def __call__(self, n: int32, out: ~int32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        g = self.global_view(out, dtype=int32, shape=[4])
        r = self.register_tensor(dtype=int32, shape=[4], init=0)
        r[n] = 1  # ERR
        self.store_global(g, r, offsets=[0])


def test_scalar_division_by_zero_at_run_time():
    out = np.zeros(4, np.int32)
    expect_error(ScalarDivByZero, tilus.TilusRuntimeError, "zero", None, 0, out)


def test_tile_index_out_of_range_at_run_time():
    out = np.zeros(4, np.int32)
    expect_error(RuntimeIndexOutOfRange, tilus.TilusRuntimeError, "out of range", None, 4, out)


# --------------------------------------------------------------------------------------------
# silent-miscompile guards


class Counter(tilus.Class):
    def __init__(self):
        self.k = 0  # a host int: it cannot count runtime iterations

    def inc(self):
        self.k += 1  # ERR


class CountsInLoop(tilus.Script):
    def __call__(self, n: int32, out: ~int32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        g = self.global_view(out, dtype=int32, shape=[1])
        c = Counter()
        for _ in range(n):
            c.inc()
        r = self.register_tensor(dtype=int32, shape=[1], init=c.k)
        self.store_global(g, r, offsets=[0])


def test_class_host_attribute_updated_in_a_runtime_loop():
    out = np.full(1, -1, np.int32)
    try:
        CountsInLoop()(5, out)
    except tilus.TilusProgramError as e:  # a refusal at the update is fine
        assert e.loc is not None and e.loc.line == err_line(Counter), str(e)
        return
    assert out[0] == 5, "silently miscompiled"


class BadAnnotation(tilus.Script):
    def __call__(self, n: no_such_dtype):  # ERR  # noqa: F821
        self.attrs.blocks = 1
        self.attrs.warps = 1


def test_unresolvable_annotation_names_the_unknown_name():
    expect_error(BadAnnotation, tilus.TilusProgramError, "no_such_dtype", None, 1)


class GridInRuntimeIf(tilus.Script):
    def __call__(self, m: int32, out: ~int32):
        if m > 0:
            self.attrs.blocks = 4  # ERR
        else:
            self.attrs.blocks = 2
        self.attrs.warps = 1
        g = self.global_view(out, dtype=int32, shape=[4])
        r = self.register_tensor(dtype=int32, shape=[1], init=7)
        self.store_global(g, r, offsets=[self.blockIdx.x])


def test_launch_attributes_inside_a_runtime_if():
    out = np.zeros(4, np.int32)
    try:
        GridInRuntimeIf()(1, out)
    except tilus.TilusProgramError as e:  # a refusal inside the if is fine
        assert e.loc is not None and e.loc.line in (
            err_line(GridInRuntimeIf),
            err_line(GridInRuntimeIf) + 2,
        ), str(e)
        return
    assert out.tolist() == [7, 7, 7, 7], "silently miscompiled"


class KeywordOnly(tilus.Script):
    def __call__(self, n: int32, *, m: int32):  # ERR
        self.attrs.blocks = 1
        self.attrs.warps = 1


class StarKwargs(tilus.Script):
    def __call__(self, n: int32, **extra):  # ERR
        self.attrs.blocks = 1
        self.attrs.warps = 1


@pytest.mark.parametrize("kernel", [KeywordOnly, StarKwargs])
def test_keyword_only_and_star_kwargs_params(kernel):
    expect_error(kernel, tilus.TilusProgramError, "positional-or-keyword", None, 1)


def test_kernel_without_a_source_file_is_refused_clearly():
    namespace = {"tilus": tilus, "int32": int32}
    exec(  # noqa: S102 - a kernel whose source cannot be read back
        "class NoSource(tilus.Script):\n"
        "    def __call__(self, n: int32):\n"
        "        self.attrs.blocks = 1\n"
        "        self.attrs.warps = 1\n",
        namespace,
    )
    with pytest.raises(tilus.TilusProgramError, match="source"):
        namespace["NoSource"]()(1)


class PythonPrint(tilus.Script):
    def __call__(self, m: int32):
        self.attrs.blocks = 2
        self.attrs.warps = 1
        print("value", m + 1)  # ERR


def test_python_print_of_a_runtime_value(capsys):
    try:
        expect_error(PythonPrint, tilus.TilusProgramError, "printf|print", None, 3)
    finally:
        capsys.readouterr()
