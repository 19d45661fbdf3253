"""Generic traversal of the tile IR, driven by the dataclass fields of its node classes.

Every IR node (statement, instruction, scalar expression, tensor) is a frozen dataclass; its
children are the nodes found in its fields, in declaration order, looking into tuples and lists.
Nothing here lists node types, so a new statement, instruction or expression class is walked
and rewritten without an edit of this module.

Variables (``Var`` and tensors) are identities: ``rewrite`` may replace one through its
function but never rebuilds one from its fields (a tensor's runtime shape stays the tensor's).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

from tilus.ir.expr import Expr, Var
from tilus.ir.inst import Inst
from tilus.ir.stmt import Stmt
from tilus.ir.tensor import TensorVar

#: The base classes whose instances are IR nodes.
NODE_TYPES = (Stmt, Inst, Expr, TensorVar)
#: Nodes that stand for a value by identity: never rebuilt by ``rewrite``.
VARIABLE_TYPES = (Var, TensorVar)

_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def field_names(cls: type) -> tuple[str, ...]:
    """The dataclass field names of node class ``cls`` in declaration order (cached)."""
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = (
            tuple(f.name for f in dataclasses.fields(cls)) if dataclasses.is_dataclass(cls) else ()
        )
        _FIELD_NAMES[cls] = names
    return names


def fields(node) -> tuple[tuple[str, Any], ...]:
    """``(name, value)`` of each field of ``node`` in declaration order."""
    return tuple((n, getattr(node, n)) for n in field_names(type(node)))


def nodes_in(value) -> Iterator:
    """The IR nodes in a field value: the value itself, or those inside a tuple or list."""
    if isinstance(value, NODE_TYPES):
        yield value
    elif isinstance(value, (tuple, list)):
        for x in value:
            yield from nodes_in(x)


def children(node) -> tuple:
    """The direct child nodes of ``node`` in field order (empty for constants and names)."""
    out: list = []
    for n in field_names(type(node)):
        v = getattr(node, n)
        if isinstance(v, NODE_TYPES):
            out.append(v)
        elif isinstance(v, (tuple, list)):
            out.extend(nodes_in(v))
    return tuple(out)


def walk(node, enter: Callable[[Any], bool] | None = None) -> Iterator:
    """``node`` and its descendants in program order (pre-order, fields in order).

    ``enter(n)`` decides whether the children of a yielded node ``n`` are visited (default:
    always). ``node`` may also be a tuple or list of nodes.
    """
    stack = list(reversed(list(nodes_in(node))))
    while stack:
        n = stack.pop()
        yield n
        if enter is None or enter(n):
            stack.extend(reversed(children(n)))


def own_nodes(stmt: Stmt) -> Iterator:
    """The nodes of one statement without those of its sub-statements: its expressions,
    instruction and tensors (each sub-statement is yielded, not entered)."""
    return walk(stmt, lambda n: n is stmt or not isinstance(n, Stmt))


def sub_stmts(node) -> tuple[Stmt, ...]:
    """The direct sub-statements of a statement."""
    return tuple(c for c in children(node) if isinstance(c, Stmt))


def stmts(node) -> Iterator[Stmt]:
    """Every statement of ``node`` in program order (pre-order)."""
    stack = [node]
    while stack:
        s = stack.pop()
        yield s
        stack.extend(reversed(sub_stmts(s)))


def exprs(node) -> tuple[Expr, ...]:
    """The direct scalar sub-expressions of a node (a tile element's indices, not its tile)."""
    return tuple(c for c in children(node) if isinstance(c, Expr))


def free_vars(e) -> dict:
    """The scalar variables expression ``e`` reads, in first-use order (a dict used as an
    ordered set; a tile element's indices are read, not its tile)."""
    out: dict = {}
    stack = [e]
    while stack:
        x = stack.pop()
        if isinstance(x, Var):
            out[x] = None
        stack.extend(reversed(exprs(x)))
    return out


def rewrite(node, fn: Callable[[Any], Any]):
    """A copy of ``node`` with ``fn`` applied top-down; only what changed is rebuilt.

    ``fn(n)`` returns the replacement of ``n`` (its children are not visited then) or None to
    keep ``n`` and rewrite its children; a node whose children all come back unchanged is
    returned as is (the same object), any other is rebuilt with ``dataclasses.replace``.
    Variables are never rebuilt, only replaced by ``fn``. Tuples and lists of nodes are
    rewritten element-wise.
    """
    if isinstance(node, (tuple, list)):
        new = [rewrite(x, fn) for x in node]
        return node if all(a is b for a, b in zip(new, node)) else type(node)(new)
    if not isinstance(node, NODE_TYPES):
        return node
    r = fn(node)
    if r is not None:
        return r
    if isinstance(node, VARIABLE_TYPES):
        return node
    changes = {}
    for n in field_names(type(node)):
        v = getattr(node, n)
        if isinstance(v, (NODE_TYPES, tuple, list)):
            nv = rewrite(v, fn)
            if nv is not v:
                changes[n] = nv
    return dataclasses.replace(node, **changes) if changes else node
