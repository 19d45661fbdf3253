"""The generic IR traversal: children, walk and rewrite follow the dataclass fields."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from tilus import float32, int32
from tilus.errors import TilusCompileError
from tilus.ir import visit
from tilus.ir.expr import Binary, Call, Const, Expr, TensorElement, Var, binary, call
from tilus.ir.function import Function
from tilus.ir.stmt import AssignStmt, DeclareStmt, ForStmt, IfStmt, SeqStmt, Stmt
from tilus.ir.tensor import GlobalTensor, RegisterTensor
from tilus.passes import walk as W
from tilus.passes.uniformity import check_uniformity
from tilus.passes.verify import verify


@dataclass(frozen=True, eq=False, slots=True)
class Clamp(Expr):
    """An expression class the traversal has never heard of."""

    x: Expr
    bounds: tuple
    dtype: object


@dataclass(frozen=True, eq=False, slots=True)
class Repeat(Stmt):
    """A statement class the traversal has never heard of: binds ``var`` in ``body``."""

    var: Var
    times: Expr
    body: Stmt
    BINDS = ("var",)


def test_children_and_walk_follow_fields_in_order():
    x, y = Var("x", int32), Var("y", int32)
    t = RegisterTensor("t", int32, (4,))
    e = Binary("+", x, TensorElement(t, (y,), int32), int32)
    assert visit.children(e) == (x, e.b)
    assert visit.children(e.b) == (t, y)
    assert W.operands(e.b) == (y,)  # the tile is not a scalar operand
    assert list(visit.walk(e)) == [e, x, e.b, t, y]
    c = Clamp(x, (Const(0, int32), y), int32)
    assert visit.children(c) == (x, c.bounds[0], y)
    assert [type(n).__name__ for n in visit.walk(c)] == ["Clamp", "Var", "Const", "Var"]


def test_walk_reaches_a_global_view_shape_and_enter_prunes():
    n = Var("n", int32, "param")
    g = GlobalTensor("g", float32, (n, 64))
    assert any(x is n for x in visit.walk(g))
    assert list(visit.walk(g, lambda node: not isinstance(node, GlobalTensor))) == [g]


def test_rewrite_rebuilds_only_what_changed():
    x, y, z = Var("x", int32), Var("y", int32), Var("z", int32)
    left = Binary("*", x, Const(3, int32), int32)
    right = call("min", y, Const(9, int32))
    e = Binary("+", left, right, int32)
    out = visit.rewrite(e, lambda n: z if n is y else None)
    assert out is not e and out.a is left  # untouched subtree kept as is
    assert type(out.b) is Call and out.b.args[0] is z and out.b.args[1] is right.args[1]
    assert visit.rewrite(e, lambda n: None) is e
    c = Clamp(y, (Const(0, int32), y), int32)
    c2 = visit.rewrite(c, lambda n: x if n is y else None)
    assert type(c2) is Clamp and c2.x is x and c2.bounds[1] is x


def test_rewrite_never_rebuilds_a_variable():
    n, m = Var("n", int32, "param"), Var("m", int32, "param")
    g = GlobalTensor("g", float32, (n,))
    s = AssignStmt(None, Var("v", int32), TensorElement(g, (n,), float32))
    out = visit.rewrite(s, lambda node: m if node is n else None)
    assert out.value.tensor is g and out.value.indices == (m,)


def test_statement_helpers_and_wrappers():
    i, v = Var("i", int32), Var("v", int32)
    body = SeqStmt(None, (AssignStmt(None, v, binary("+", v, i)),))
    loop = ForStmt(None, i, Const(0, int32), Const(4, int32), 1, body, None)
    top = SeqStmt(None, (DeclareStmt(None, v, Const(0, int32)), loop))
    assert W.children(loop) == [body]
    assert [type(s).__name__ for s in W.walk(top)] == [
        "SeqStmt",
        "DeclareStmt",
        "ForStmt",
        "SeqStmt",
        "AssignStmt",
    ]
    assert list(visit.own_nodes(loop)) == [loop, i, loop.start, loop.stop, body]


def _fn(body) -> Function:
    return Function("k", (), body, (Const(1, int32),) * 3, 1, (), (), "k.py")


def test_verify_and_uniformity_handle_a_new_statement_class():
    k, v = Var("k", int32), Var("v", int32)
    inner = AssignStmt(None, v, binary("+", v, k))
    ok = SeqStmt(
        None, (DeclareStmt(None, v, Const(0, int32)), Repeat(None, k, Const(3, int32), inner))
    )
    verify(_fn(ok))
    check_uniformity(_fn(ok))
    # the bound variable is visible inside the new statement only
    after = AssignStmt(None, v, k)
    bad = SeqStmt(None, ok.stmts + (after,))
    with pytest.raises(TilusCompileError, match="`k` is used outside"):
        verify(_fn(bad))
    # a variable declared inside a branch is not visible after it
    w = Var("w", int32)
    branch = IfStmt(None, binary("<", v, 1), DeclareStmt(None, w, Const(1, int32)), None)
    with pytest.raises(TilusCompileError, match="`w` is used outside"):
        verify(_fn(SeqStmt(None, (ok.stmts[0], branch, AssignStmt(None, v, w)))))


def test_free_vars_in_first_use_order_and_not_through_tiles():
    a, b = Var("a", int32, "param"), Var("b", int32, "local")
    t = RegisterTensor("t", int32, (4,))
    e = binary("+", binary("*", b, a), TensorElement(t, (a,), int32))
    assert list(visit.free_vars(e)) == [b, a]  # the tile is not a variable read
    assert visit.free_vars(Const.of(3, int32)) == {}
