"""Front-end refusals: unsupported statements, signatures, names, tile types and shapes."""

from __future__ import annotations

import os

import numpy as np
import pytest
from helpers_errors import (  # noqa: F401
    _args,
    err_line,
    expect_error,
)

import tilus
from tilus import float16, float32, int32

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
