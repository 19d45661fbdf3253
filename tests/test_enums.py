"""Closed IR choices are enums: strings are converted at the boundary, printed text is unchanged."""

from __future__ import annotations

from helpers_errors import expect_error

import tilus
from tilus import int32, uint32
from tilus.ir import inst as I
from tilus.ir.enums import MemScope, MemSem, TensorKind, Unroll, VarKind
from tilus.ir.expr import Var, as_expr
from tilus.ir.printer import Printer
from tilus.ir.stmt import ForStmt, SeqStmt


def test_var_kind_strings_become_members():
    assert Var("n", int32, "param").kind is VarKind.PARAM
    assert Var("i", int32).kind is VarKind.LOCAL
    assert VarKind.PARAM == "param"  # str-valued: old comparisons keep working


def test_tensor_kind_members_print_as_before():
    assert f"{TensorKind.SHARED}" == "shared"


def test_mbarrier_ordering_stored_as_members_and_printed_as_strings():
    bar = Var("bar", uint32)
    w = I.MBarrierWait(bar, as_expr(0), "acquire", "cta")
    assert w.sem is MemSem.ACQUIRE and w.scope is MemScope.CTA
    assert "sem='acquire', scope='cta'" in Printer().inst(w)


def test_unroll_all_string_becomes_member():
    i = Var("i", int32)
    s = ForStmt(None, i, as_expr(0), as_expr(4), 1, SeqStmt(None, ()), "all")
    assert s.unroll is Unroll.ALL


class BadSem(tilus.Script):
    def __call__(self, n: int32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        bars = self.mbarrier.alloc([1])
        self.mbarrier.arrive(bars[0], sem="acquire")  # ERR


class BadScope(tilus.Script):
    def __call__(self, n: int32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        bars = self.mbarrier.alloc([1])
        self.mbarrier.wait(bars[0], phase=0, scope="gpu")  # ERR


def test_bad_sem_and_scope_refused_at_the_line():
    expect_error(BadSem, fragment="sem must be one of relaxed, release, got 'acquire'")
    expect_error(BadScope, fragment="scope must be one of cta, cluster, got 'gpu'")
