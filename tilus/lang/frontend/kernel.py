"""Entry point of the front end: a configured Script instance to a tile-IR Function."""

from __future__ import annotations

import ast
import inspect

from tilus.dtypes import DataType, PointerType, int32
from tilus.errors import TilusProgramError
from tilus.ir.enums import VarKind
from tilus.ir.expr import Const, Expr, TensorElement, Var, cast
from tilus.ir.function import Function
from tilus.ir.visit import rewrite
from tilus.lang.builder import Builder
from tilus.lang.frontend.source import Frame, closure_vars, parse_function
from tilus.lang.frontend.transpiler import (
    HOST_ANNOTATIONS,
    Transpiler,
    _resolve_annotation,
    _strip_docstring,
)


def kernel_params(script_cls) -> list[tuple[str, object, ast.arg]]:
    """(name, annotation, ast node) of each ``__call__`` parameter after ``self``, checked."""
    fn = script_cls.__call__
    parsed = parse_function(fn)
    sig = inspect.signature(fn)
    args = parsed.node.args
    if args.vararg or args.kwarg or args.kwonlyargs or args.posonlyargs:
        raise TilusProgramError(
            "kernel parameters must be plain positional-or-keyword "
            "parameters (no *args, **kwargs, keyword-only or "
            "positional-only)",
            parsed.loc(parsed.node),
        )
    if parsed.node.returns is not None and not (
        isinstance(parsed.node.returns, ast.Constant) and parsed.node.returns.value is None
    ):
        raise TilusProgramError(
            "a kernel's __call__ must not declare a return type", parsed.loc(parsed.node.returns)
        )
    out = []
    for node, name in zip(args.args[1:], list(sig.parameters)[1:]):
        raw = fn.__annotations__.get(name)
        ann = _resolve_annotation(raw, fn)
        if ann is None and isinstance(raw, str):
            raise TilusProgramError(
                f"the annotation `{raw}` of kernel parameter `{name}` cannot be evaluated "
                "(unknown name?)",
                parsed.loc(node),
            )
        if ann is None:
            raise TilusProgramError(
                f"kernel parameter `{name}` needs an annotation: int/float/bool/str for a "
                "compile-time value, a dtype such as int32 for a runtime scalar, or ~float16 "
                "for a pointer",
                parsed.loc(node),
            )
        if not (ann in HOST_ANNOTATIONS or isinstance(ann, (DataType, PointerType))):
            raise TilusProgramError(
                f"kernel parameter `{name}` has an unsupported annotation {ann!r}", parsed.loc(node)
            )
        out.append((name, ann, node))
    return out


def transpile(script, const_args: dict, config: dict) -> Function:
    """Transpile ``script.__call__`` with the compile-time arguments ``const_args``."""
    cls = type(script)
    fn = cls.__call__
    parsed = parse_function(fn)
    builder = Builder()
    with builder:
        tr = Transpiler(builder)
        frame = Frame(parsed, fn.__globals__, closure_vars(fn), script, cls, is_kernel=True)
        tr.frames.append(frame)
        frame.scopes[0].names["self"] = script
        params = []
        for name, ann, _node in kernel_params(cls):
            if ann in HOST_ANNOTATIONS:
                frame.scopes[0].names[name] = const_args[name]
            else:
                v = Var(name, ann, VarKind.PARAM)
                params.append(v)
                frame.scopes[0].names[name] = v
        for stmt in _strip_docstring(parsed.node.body):
            tr.visit(stmt)
        body = builder.pop_block()
        attrs = builder.attrs
        end = parsed.loc(parsed.node)
        if attrs.warps is None:
            raise TilusProgramError("the kernel never sets self.attrs.warps", end)
        if attrs.blocks is None:
            raise TilusProgramError("the kernel never sets self.attrs.blocks (the grid)", end)
        blocks = _grid(builder, attrs.blocks, attrs._locs.get("blocks"), set(params))
        _check_cluster_grid(blocks, attrs)
        if attrs.min_blocks * attrs.warps * 32 > 2048:
            raise TilusProgramError(
                f"self.attrs.min_blocks = {attrs.min_blocks} blocks of {attrs.warps * 32} "
                f"threads exceed the 2048 threads an SM holds",
                attrs._locs.get("min_blocks"),
            )
    return Function(
        name=cls.__name__,
        params=tuple(params),
        body=body,
        blocks=blocks,
        warps=attrs.warps,
        const_args=tuple(sorted(const_args.items())),
        config=tuple(config.items()),
        source_file=parsed.filename,
        assumes=tuple(builder.assumes),
        cluster=tuple(attrs.cluster_blocks),
        cluster_loc=attrs._locs.get("cluster_blocks"),
        min_blocks=attrs.min_blocks,
    )


def _check_cluster_grid(blocks, attrs) -> None:
    """A constant grid dim must be a whole number of clusters (runtime ones are checked at
    the launch)."""
    for axis, g, c in zip("xyz", blocks, attrs.cluster_blocks):
        if isinstance(g, Const) and g.value % c:
            raise TilusProgramError(
                f"grid dim {axis} is {g.value} blocks, not a multiple of the cluster's {c} "
                f"(cluster_blocks {list(attrs.cluster_blocks)})",
                attrs._locs.get("blocks"),
            )


def _grid(builder: Builder, blocks, loc, params: set) -> tuple:
    items = list(blocks) if isinstance(blocks, (list, tuple)) else [blocks]
    if not 1 <= len(items) <= 3:
        raise TilusProgramError(f"self.attrs.blocks needs 1 to 3 dims, got {len(items)}", loc)
    items += [1] * (3 - len(items))
    out = []
    for it in items:
        if isinstance(it, bool) or not isinstance(it, (int, Expr)):
            raise TilusProgramError(
                f"a grid dim must be an int or a scalar expression, got {it!r}", loc
            )
        out.append(cast(_over_params(builder, it, loc, params), int32))
    return tuple(out)


def _over_params(builder, e, loc, params):
    """Re-express a grid size over kernel parameters, inlining never-reassigned locals."""

    def leaf(x):
        if isinstance(x, TensorElement):
            raise TilusProgramError("the grid cannot depend on a tile element", loc)
        if not isinstance(x, Var) or x in params:
            return None  # operators are rebuilt around their rewritten operands
        if (
            x.kind == VarKind.LOCAL
            and x in builder.decl_init
            and x not in builder.assigned
            and builder.decl_init[x] is not None
        ):
            return _over_params(builder, builder.decl_init[x], loc, params)
        raise TilusProgramError(
            f"the grid (self.attrs.blocks) must be computable from the kernel parameters, but "
            f"it depends on `{x.name}`",
            loc,
        )

    return rewrite(e, leaf) if isinstance(e, Expr) else e
