"""Refusals of the front end: each error has the right type, file, line and a useful message.

Every refused kernel marks the line the error must point at with an ``# ERR`` comment.
"""

from __future__ import annotations

import inspect
import os
import re

import numpy as np
import pytest

import tilus
from tilus import float16, float32, int32

THIS_FILE = os.path.basename(__file__)


def err_line(obj) -> int:
    """The line of ``obj``'s source that carries the ``# ERR`` marker."""
    lines, first = inspect.getsourcelines(obj)
    hits = [first + i for i, text in enumerate(lines) if "# ERR" in text]
    assert len(hits) == 1, f"{obj} needs exactly one # ERR marker"
    return hits[0]


def _args(kernel_cls):
    """Plausible arguments for a kernel's parameters (the kernels below use few kinds)."""
    from tilus.lang.frontend.kernel import kernel_params

    out = []
    for _name, ann, _ in kernel_params(kernel_cls):
        if ann is int:
            out.append(4)
        elif isinstance(ann, tilus.PointerType):
            out.append(np.ones(64 * 64, dtype=ann.base.np_storage))
        else:
            out.append(4)
    return out


def expect_error(kernel_cls, cls=tilus.TilusProgramError, fragment=None, marker_obj=None, *a):
    """Call the kernel and check the error's type, file, line and message."""
    args = a or _args(kernel_cls)
    with pytest.raises(cls) as info:
        kernel_cls()(*args)
    err = info.value
    text = str(err)
    assert type(err) is cls, f"{type(err).__name__}: {text}"
    assert err.loc is not None, text
    assert os.path.basename(err.loc.file) == THIS_FILE, text
    assert err.loc.line == err_line(marker_obj or kernel_cls), text
    head = text.splitlines()[0]
    assert re.match(rf".*{re.escape(THIS_FILE)}:{err.loc.line}:\d+ \(in \w+\): ", head), head
    if fragment is not None:  # searched in the message itself, not in the quoted source line
        msg = "\n".join([err.msg, *err.notes])
        assert re.search(fragment, msg, re.IGNORECASE), text
    return err


# --------------------------------------------------------------------------------------------
# unsupported statements


class UsesTry(tilus.Script):
    def __call__(self, n: int32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        try:  # ERR
            pass
        except ValueError:
            pass


class UsesContinue(tilus.Script):
    def __call__(self, n: int32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        for i in range(n):
            if i > 2:
                continue  # ERR


class UsesDel(tilus.Script):
    def __call__(self, n: int32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        x = n + 1
        del x  # ERR


class UsesGlobal(tilus.Script):
    def __call__(self, n: int32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        global SOME_GLOBAL  # ERR


class NestedDef(tilus.Script):
    def __call__(self, n: int32):
        self.attrs.blocks = 1
        self.attrs.warps = 1

        def inner(x):  # ERR
            return x

        inner(n)


class WithOpen(tilus.Script):
    def __call__(self, n: int32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        with open(os.devnull):  # ERR
            pass


class WithOpenMissingFile(tilus.Script):
    def __call__(self, n: int32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        with open("tilus-no-such-file.txt"):  # ERR
            pass


class LambdaAssignedAndImport(tilus.Script):
    def __call__(self, n: int32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        import math  # ERR

        math.sqrt(2.0)


@pytest.mark.parametrize(
    "kernel, fragment",
    [
        (UsesTry, "try"),
        (UsesContinue, "continue"),
        (UsesDel, "delete|del"),
        (UsesGlobal, "global"),
        (NestedDef, "functiondef|def"),
        (WithOpen, "thread_group"),
        (LambdaAssignedAndImport, "import"),
    ],
)
def test_unsupported_statements(kernel, fragment):
    expect_error(kernel, tilus.TilusProgramError, fragment)


def test_with_open_of_a_missing_file_is_a_program_error():
    expect_error(WithOpenMissingFile, tilus.TilusProgramError, "thread_group|no such file")


# --------------------------------------------------------------------------------------------
# kernel signatures


class MissingAnnotation(tilus.Script):
    def __call__(
        self,
        n: int32,
        m,  # ERR
    ):
        self.attrs.blocks = 1
        self.attrs.warps = 1


class VarArgs(tilus.Script):
    def __call__(self, n: int32, *rest):  # ERR
        self.attrs.blocks = 1
        self.attrs.warps = 1


class ReturnAnnotation(tilus.Script):
    def __call__(self, n: int32) -> int:  # ERR
        self.attrs.blocks = 1
        self.attrs.warps = 1


class ReturnsValue(tilus.Script):
    def __call__(self, n: int32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        return n  # ERR


def test_missing_annotation_on_a_kernel_param():
    expect_error(MissingAnnotation, tilus.TilusProgramError, r"`m`.*annotation", None, 1, 2)


def test_star_args_param():
    expect_error(VarArgs, tilus.TilusProgramError, r"\*args", None, 1)


def test_return_type_annotation():
    expect_error(ReturnAnnotation, tilus.TilusProgramError, "return type", None, 1)


def test_return_value_in_call():
    expect_error(ReturnsValue, tilus.TilusProgramError, "return a value", None, 1)


def test_return_none_annotation_is_accepted():
    class ReturnsNone(tilus.Script):
        def __call__(self, out: ~int32) -> None:
            self.attrs.blocks = 1
            self.attrs.warps = 1
            g = self.global_view(out, dtype=int32, shape=[2])
            self.store_global(g, self.register_tensor(dtype=int32, shape=[2], init=5), offsets=[0])

    out = np.zeros(2, dtype=np.int32)
    ReturnsNone()(out)
    assert list(out) == [5, 5]


# --------------------------------------------------------------------------------------------
# names


class UnknownName(tilus.Script):
    def __call__(self, n: int32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        x = n + no_such_name  # ERR  # noqa: F821
        self.printf("%d\n", x)


class MissingSelfAttr(tilus.Script):
    def __init__(self):
        super().__init__()
        self.block_m = 64

    def __call__(self, n: int32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        x = n * self.block_q  # ERR
        self.printf("%d\n", x)


class BranchLocal(tilus.Script):
    def __call__(self, n: int32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        if n > 2:
            inside = n * 2
            self.printf("%d\n", inside)
        self.printf("%d\n", inside)  # ERR


class RebindConstInLoop(tilus.Script):
    def __call__(self, n: int32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        count = 0
        for _ in range(n):
            count = count + 1  # ERR
        self.printf("%d\n", count)


class HelperIntParam(tilus.Script):
    def helper(self, k: int):
        return k * 2

    def __call__(self, n: int32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        x = self.helper(n)  # ERR
        self.printf("%d\n", x)


def test_unknown_name():
    expect_error(UnknownName, tilus.TilusProgramError, "no_such_name")


def test_attribute_missing_on_self():
    expect_error(MissingSelfAttr, tilus.TilusProgramError, "block_q")


def test_name_defined_only_inside_a_runtime_if():
    expect_error(BranchLocal, tilus.TilusProgramError, "`inside`.*only defined.*runtime")


def test_rebinding_a_compile_time_value_inside_a_runtime_loop():
    expect_error(RebindConstInLoop, tilus.TilusProgramError, "count")


def test_int_param_of_a_helper_receiving_a_runtime_value():
    expect_error(HelperIntParam, tilus.TilusProgramError, "`k`.*compile-time")


# --------------------------------------------------------------------------------------------
# tile types and shapes


class MixedDtypes(tilus.Script):
    def __call__(self, n: int32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        a = self.register_tensor(dtype=float16, shape=[4, 4], init=1.0)
        b = self.register_tensor(dtype=int32, shape=[4, 4], init=1)
        c = a + b  # ERR
        self.print_tensor("c", c)


class StoreRankMismatch(tilus.Script):
    def __call__(self, out: ~float32):
        self.attrs.blocks = 1
        self.attrs.warps = 4
        g = self.global_view(out, dtype=float32, shape=[2, 64, 32])
        t = self.register_tensor(dtype=float32, shape=[64, 32], init=0.0)
        self.store_global(g, t, offsets=[0, 0, 0])  # ERR


class StoreDtypeMismatch(tilus.Script):
    def __call__(self, out: ~float16):
        self.attrs.blocks = 1
        self.attrs.warps = 4
        g = self.global_view(out, dtype=float16, shape=[64, 64])
        t = self.register_tensor(dtype=float32, shape=[64, 64], init=0.0)
        self.store_global(g, t, offsets=[0, 0])  # ERR


class LoadWrongOffsets(tilus.Script):
    def __call__(self, a: ~float32):
        self.attrs.blocks = 1
        self.attrs.warps = 4
        g = self.global_view(a, dtype=float32, shape=[64, 64])
        t = self.load_global(g, offsets=[0], shape=[16, 16])  # ERR
        self.print_tensor("t", t)


class DotInnerMismatch(tilus.Script):
    def __call__(self, n: int32):
        self.attrs.blocks = 1
        self.attrs.warps = 4
        a = self.register_tensor(dtype=float16, shape=[16, 32], init=1.0)
        b = self.register_tensor(dtype=float16, shape=[16, 8], init=1.0)
        c = self.dot(a, b, acc_dtype=float32)  # ERR
        self.print_tensor("c", c)


class BroadcastMismatch(tilus.Script):
    def __call__(self, n: int32):
        self.attrs.blocks = 1
        self.attrs.warps = 4
        a = self.register_tensor(dtype=float32, shape=[4, 8], init=1.0)
        b = self.register_tensor(dtype=float32, shape=[4, 3], init=1.0)
        c = a * b  # ERR
        self.print_tensor("c", c)


def test_adding_a_float16_tile_to_an_int32_tile():
    expect_error(MixedDtypes, tilus.TilusProgramError, "float16.*int32|int32.*float16")


def test_storing_a_2d_tile_into_a_rank_3_view():
    expect_error(StoreRankMismatch, tilus.TilusProgramError, r"\[64, 32\].*rank 3|dims")


def test_store_global_of_float32_into_float16_view():
    expect_error(StoreDtypeMismatch, tilus.TilusProgramError, "float32.*float16")


def test_load_global_with_the_wrong_number_of_offsets():
    expect_error(LoadWrongOffsets, tilus.TilusProgramError, "offsets.*1.*2|rank 2")


def test_dot_with_mismatched_inner_dims():
    expect_error(DotInnerMismatch, tilus.TilusProgramError, "inner|32.*16")


def test_shape_mismatch_in_broadcasting():
    expect_error(BroadcastMismatch, tilus.TilusProgramError, r"\[4, 8\].*\[4, 3\].*broadcast")


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
    return re.match(rf".*{re.escape(THIS_FILE)}:{line}:\d+ \(in __call__\): .+", head) is not None


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


@pytest.mark.parametrize(
    "kernel, fragment",
    [
        (RuntimeStep, "step"),
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
