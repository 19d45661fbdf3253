"""Statement half of the transpiler, helper inlining, and the kernel entry point."""

from __future__ import annotations

import ast
import inspect

from tilus.dtypes import DataType, PointerType, int32
from tilus.errors import TilusError, TilusProgramError
from tilus.ir import inst as I
from tilus.ir.enums import TensorKind, VarKind
from tilus.ir.expr import Const, Expr, TensorElement, Var
from tilus.ir.stmt import BreakStmt, ForStmt, IfStmt, ReturnStmt, ThreadGroupStmt, WhileStmt
from tilus.ir.tensor import TensorVar
from tilus.lang.builder import Builder, Group
from tilus.lang.frontend.exprs import BIN_OPS, HOST_ERRORS, ExprVisitor, host_value, to_bool
from tilus.lang.frontend.source import Frame, Scope, closure_vars, parse_function
from tilus.lang.instructions.generic import (
    GenericInstructions,
    RangeSpec,
    ThreadGroupSpec,
    slice_tensor,
)

HOST_ANNOTATIONS = (int, float, bool, str)
MAX_INLINE_DEPTH = 64


class _Return(Exception):
    def __init__(self, value):
        self.value = value


class Transpiler(ExprVisitor):
    """Walks the AST of a kernel and of everything it calls, driving a :class:`Builder`."""

    def __init__(self, builder: Builder):
        self.builder = builder
        self.frames: list[Frame] = []

    @property
    def frame(self) -> Frame:
        return self.frames[-1]

    def loc(self, node):
        return self.frame.parsed.loc(node)

    def error(self, msg, node) -> TilusProgramError:
        return TilusProgramError(msg, self.loc(node))

    # --- user code detection -------------------------------------------------------------------
    def user_callable(self, func):
        """An inliner for user methods of Scripts/Classes and for Class constructors."""
        from tilus.lang.klass import Class

        # Scripts and Classes both derive from the instruction classes (lang/script.py, which
        # calls the transpiler, is not imported here)
        if inspect.ismethod(func) and isinstance(func.__self__, GenericInstructions):
            fn = func.__func__
            if not fn.__module__.startswith("tilus."):
                return lambda args, kwargs, node: self.inline(fn, func.__self__, args, kwargs, node)
        if isinstance(func, type) and issubclass(func, Class) and func is not Class:
            return lambda args, kwargs, node: self.instantiate(func, args, kwargs, node)
        return None

    def instantiate(self, cls, args, kwargs, node):
        obj = cls.__new__(cls)
        object.__setattr__(obj, "_tilus_name", self.builder.take_hint(cls.__name__.lower()))
        init = cls.__init__
        if init is not object.__init__ and not init.__module__.startswith("tilus."):
            self.inline(init, obj, args, kwargs, node)
        return obj

    # --- function inlining ---------------------------------------------------------------------
    def inline(self, fn, self_obj, args, kwargs, node):
        if len(self.frames) >= MAX_INLINE_DEPTH:
            raise self.error("helper calls nest too deeply (recursion is not supported)", node)
        parsed = parse_function(fn)
        sig = inspect.signature(fn)
        try:
            bound = sig.bind(self_obj, *args, **kwargs)
        except TypeError as e:
            raise self.error(f"bad call of {fn.__qualname__}: {e}", node) from None
        bound.apply_defaults()
        cls = _defining_class(fn, self_obj)
        frame = Frame(parsed, fn.__globals__, closure_vars(fn), self_obj, cls)
        anns = fn.__annotations__
        self.frames.append(frame)
        try:
            for i, (name, value) in enumerate(bound.arguments.items()):
                if i == 0:
                    frame.scopes[0].names[name] = value
                    continue
                ann = _resolve_annotation(anns.get(name), fn)
                self.builder.loc = self.loc(parsed.node)
                frame.scopes[0].names[name] = self.bind_param(name, value, ann, node)
            return self.run_body(parsed.node.body)
        finally:
            self.frames.pop()

    def bind_param(self, name, value, ann, node):
        if isinstance(ann, DataType):
            if isinstance(value, TensorVar):
                raise self.error(f"parameter `{name}` is annotated {ann} but got a tile", node)
            v = host_value(value)
            if not isinstance(v, Expr):
                return Const.of(v, ann)
            return self.builder.declare(name, ann, value)
        if ann in HOST_ANNOTATIONS:
            v = host_value(value)
            if isinstance(v, (Expr, TensorVar)):
                raise self.error(
                    f"parameter `{name}` is annotated {ann.__name__} (a compile-time "
                    "value) but got a runtime value; annotate it int32",
                    node,
                )
            return v
        return value

    def run_body(self, body):
        """Run a helper's statements; a final ``return`` gives the call's value."""
        body = _strip_docstring(body)
        for i, stmt in enumerate(body):
            if isinstance(stmt, ast.Return):
                if i != len(body) - 1:
                    raise self.error("return must be the last statement of a helper", stmt)
                self.builder.loc = self.loc(stmt)
                return self.eval(stmt.value) if stmt.value is not None else None
            self.visit(stmt)
        return None

    # --- statements ----------------------------------------------------------------------------
    def visit(self, node):
        method = getattr(self, "stmt_" + type(node).__name__, None)
        if method is None:
            kind = type(node).__name__.lower()
            raise self.error(f"unsupported statement `{kind}` in a tilus kernel", node)
        self.builder.loc = self.loc(node)
        try:
            method(node)
        except TilusError:
            raise
        except HOST_ERRORS as e:
            raise self.error(str(e), node) from None
        except Exception as e:  # host code the kernel calls failed: locate it, keep the cause
            raise self.error(f"{type(e).__name__}: {e}", node) from e

    def visit_block(self, stmts, scope: Scope | None = None):
        runtime = scope is not None and scope.runtime
        if scope is not None:
            self.frame.scopes.append(scope)
        self.builder.runtime_depth += runtime
        try:
            for s in stmts:
                self.visit(s)
        finally:
            self.builder.runtime_depth -= runtime
            if scope is not None:
                popped = self.frame.scopes.pop()
                for name in popped.names:
                    if self.frame.lookup(name) is None:
                        self.frame.branch_locals.setdefault(name, self.builder.loc)

    def stmt_Expr(self, node):
        if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            return  # a docstring or a bare string
        self.eval(node.value)

    def stmt_Pass(self, node):
        pass

    def stmt_Assign(self, node):
        self.builder.name_hint = (
            self.target_hint(node.targets[0]) if len(node.targets) == 1 else None
        )
        value = self.eval(node.value)
        self.builder.name_hint = None
        for target in node.targets:
            self.assign(target, value, None, node)

    def target_hint(self, target) -> str | None:
        """The name a value assigned to ``target`` gets in the IR (``ring.full`` for attributes
        of a tilus.Class object), so errors and generated code use the user's names."""
        from tilus.lang.klass import Class

        if isinstance(target, ast.Name):
            return target.id
        if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name):
            hit = self.frame.lookup(target.value.id)
            obj = hit[1] if hit is not None else None
            if isinstance(obj, Class):
                return f"{getattr(obj, '_tilus_name', type(obj).__name__.lower())}.{target.attr}"
            return target.attr
        return None

    def stmt_AnnAssign(self, node):
        ann = self.eval(node.annotation)
        self.builder.name_hint = self.target_hint(node.target)
        if node.value is None:
            if not isinstance(ann, (DataType, PointerType)):
                raise self.error(
                    "a declaration without a value needs a scalar dtype annotation", node
                )
            self.bind_name(node.target.id, self.builder.declare(node.target.id, ann, None))
            return
        value = self.eval(node.value)
        self.builder.name_hint = None
        self.assign(node.target, value, ann, node)

    def stmt_AugAssign(self, node):
        sym, fn = BIN_OPS[type(node.op)]
        rhs = self.eval(node.value)
        t = node.target
        if isinstance(t, ast.Name):
            cur = self.lookup(t.id, t)
            if isinstance(cur, TensorVar):
                if sym == "//":
                    sym = "/"
                from tilus.lang.instructions.generic import tensor_binary

                tensor_binary(sym, cur, rhs, out=cur)
                return
            self.assign(t, self.binop(sym, fn, cur, rhs), None, node)
        elif isinstance(t, ast.Subscript):
            obj = self.eval(t.value)
            idx = self.eval(t.slice)
            if isinstance(obj, TensorVar):
                cur = slice_tensor(obj, idx)
                self.store_subscript(obj, idx, self.binop(sym, fn, cur, rhs), node)
            else:
                obj[idx] = self.binop(sym, fn, obj[idx], rhs)
        elif isinstance(t, ast.Attribute):
            obj = self.eval(t.value)
            self.assign_attr(
                obj, t.attr, self.binop(sym, fn, getattr(obj, t.attr), rhs), None, node
            )
        else:
            raise self.error("unsupported augmented assignment target", node)

    # --- assignment ----------------------------------------------------------------------------
    def assign(self, target, value, ann, node):
        if isinstance(target, ast.Name):
            self.assign_name(target.id, value, ann, node)
        elif isinstance(target, (ast.Tuple, ast.List)):
            if ann is not None:
                raise self.error("annotated tuple assignment is not supported", node)
            if isinstance(value, (TensorVar, Expr)) or not hasattr(value, "__iter__"):
                raise self.error("only a tuple, list or other host sequence can be unpacked", node)
            value = tuple(value)
            if len(value) != len(target.elts):
                raise self.error(
                    f"cannot unpack {len(value)} values into {len(target.elts)} names", node
                )
            # `p, q = q, p`: Python evaluates every value before assigning any, so values that
            # read a variable this statement assigns are first copied into temporaries
            assigned = {
                self.frame.lookup(t.id)[1]
                for t in target.elts
                if isinstance(t, ast.Name) and self.frame.lookup(t.id) is not None
            }
            if assigned:
                value = tuple(
                    self.builder.declare("tmp", v.dtype, v)
                    if isinstance(v, Expr) and _reads_any(v, assigned)
                    else v
                    for v in value
                )
            for t, v in zip(target.elts, value):
                self.assign(t, v, None, node)
        elif isinstance(target, ast.Attribute):
            self.assign_attr(self.eval(target.value), target.attr, value, ann, node)
        elif isinstance(target, ast.Subscript):
            obj = self.eval(target.value)
            idx = self.eval(target.slice)
            if isinstance(obj, TensorVar):
                self.store_subscript(obj, idx, value, node)
            else:
                obj[idx] = value
        else:
            raise self.error(f"unsupported assignment target `{type(target).__name__}`", node)

    def store_subscript(self, tensor, idx, value, node):
        if tensor.kind != TensorKind.REGISTER:
            raise self.error(f"element assignment works on register tiles, not {tensor.kind}", node)
        elem = slice_tensor(tensor, idx)
        if not isinstance(elem, TensorElement):
            raise self.error("assigning to a sub-tile is not supported; index every dim", node)
        val = self.builder.expect_scalar(value, "the assigned value", tensor.dtype)
        self.builder.inst(I.StoreElement(tensor, elem.indices, val))

    def bind_name(self, name, value):
        self.frame.scopes[-1].names[name] = value

    def new_binding(self, name, value, ann, node):
        b = self.builder
        if isinstance(ann, (DataType, PointerType)):
            if isinstance(value, TensorVar):
                raise self.error(f"`{name}` is annotated {ann} but the value is a tile", node)
            if isinstance(ann, PointerType) and not (
                isinstance(value, Expr) and isinstance(value.dtype, PointerType)
            ):
                raise self.error(
                    f"`{name}` is annotated {ann} but the value is not a pointer", node
                )
            return b.declare(
                name,
                ann,
                b.expect_scalar(
                    value, f"the value of `{name}`", ann if isinstance(ann, DataType) else None
                ),
            )
        if ann in HOST_ANNOTATIONS:
            v = host_value(value)
            if isinstance(v, (Expr, TensorVar)):
                raise self.error(
                    f"`{name}` is annotated {ann.__name__} (a compile-time value) "
                    "but the value is only known at run time",
                    node,
                )
            return ann(v)
        if isinstance(value, Expr):
            return b.declare(name, value.dtype, value)
        return value

    def assign_name(self, name, value, ann, node):
        if name == "_":
            return
        f = self.frame
        hit = f.lookup(name)
        if ann is not None or hit is None:
            self.bind_name(name, self.new_binding(name, value, ann, node))
            return
        idx, cur = hit
        if isinstance(cur, Var) and cur.kind == VarKind.LOCAL:
            if isinstance(value, TensorVar):
                raise self.error(f"`{name}` is a scalar variable; it cannot hold a tile", node)
            self.builder.assign(cur, self.builder.expect_scalar(value, f"`{name}`"))
            return
        if (
            isinstance(cur, TensorVar)
            and cur.kind == TensorKind.REGISTER
            and value is not cur
            and isinstance(value, TensorVar)
            and value.kind == TensorKind.REGISTER
            and f.runtime_between(idx)
        ):
            # a tile bound outside this loop/if: copy, so the value survives the block
            if value.shape == cur.shape and value.dtype == cur.dtype:
                aliases = [
                    n for sc in f.scopes for n, v in sc.names.items() if v is cur and n != name
                ]
                if aliases:
                    raise self.error(
                        f"`{name}` is the same tile as `{aliases[0]}`; assigning to it inside "
                        f"this runtime loop/if would change `{aliases[0]}` too. Make a separate "
                        f"tile first (self.register_tensor(...) and self.assign)",
                        node,
                    )
                self.builder.inst(I.AssignTensor(cur, value))
                return
        if value is cur:
            return
        if f.runtime_between(idx):
            raise self.error(
                f"`{name}` was bound outside this runtime loop/if to a compile-time value or "
                f"tile; it cannot be rebound here. Declare it as a variable first "
                f"(e.g. `{name}: int32 = ...`)",
                node,
            )
        f.scopes[idx].names[name] = self.new_binding(name, value, None, node)

    def assign_attr(self, obj, attr, value, ann, node):
        from tilus.lang.klass import Class

        if isinstance(obj, Class):
            cur = obj.__dict__.get(attr)
            depths = obj.__dict__.setdefault("_tilus_depths", {})
            bound_at = depths.get(attr)
            is_var = isinstance(cur, Var) and cur.kind == VarKind.LOCAL
            is_tile = isinstance(cur, TensorVar) and cur.kind == TensorKind.REGISTER
            if (
                ann is None
                and bound_at is not None
                and not is_var
                and not is_tile
                and self.builder.runtime_depth > bound_at
                and value is not cur
            ):
                raise self.error(
                    f"attribute `{attr}` holds a compile-time value bound outside this runtime "
                    f"loop/if; it cannot be rebound here. Annotate it where it is first set "
                    f"(e.g. `self.{attr}: int32 = ...`) to make it a kernel variable",
                    node,
                )
            if ann is not None or bound_at is None:
                depths[attr] = self.builder.runtime_depth
            hint = f"{getattr(obj, '_tilus_name', type(obj).__name__.lower())}.{attr}"
            if ann is None and isinstance(cur, Var) and cur.kind == VarKind.LOCAL:
                self.builder.assign(cur, self.builder.expect_scalar(value, hint))
                return
            if (
                ann is None
                and isinstance(cur, TensorVar)
                and isinstance(value, TensorVar)
                and cur.kind == TensorKind.REGISTER
                and value is not cur
            ):
                self.builder.inst(I.AssignTensor(cur, value))
                return
            object.__setattr__(obj, attr, self.new_binding(hint, value, ann, node))
            return
        if isinstance(value, Expr) and ann is not None:
            value = self.new_binding(attr, value, ann, node)
        try:
            setattr(obj, attr, value)
        except AttributeError as e:
            raise self.error(str(e), node) from None

    # --- control flow --------------------------------------------------------------------------
    def stmt_If(self, node):
        cond = host_value(self.eval(node.test))
        if not isinstance(cond, Expr):
            if isinstance(cond, TensorVar):
                raise self.error("a tile cannot be used as an if condition", node.test)
            self.visit_block(node.body if cond else node.orelse)
            return
        b = self.builder
        loc = self.loc(node)
        b.push_block()
        self.visit_block(node.body, Scope(runtime=True, kind="if"))
        then = b.pop_block()
        other = None
        if node.orelse:
            b.push_block()
            self.visit_block(node.orelse, Scope(runtime=True, kind="if"))
            other = b.pop_block()
        b.emit(IfStmt(loc, to_bool(cond), then, other))

    def stmt_For(self, node):
        if node.orelse:
            raise self.error("for ... else is not supported", node)
        it = self.eval(node.iter)
        if not isinstance(it, (RangeSpec, Expr, TensorVar)) and hasattr(it, "__iter__"):
            for item in list(it):  # a host sequence (list, enumerate, zip...): unrolled
                self.assign(node.target, item, None, node)
                self.visit_block(node.body)
            return
        if not isinstance(it, RangeSpec):
            raise self.error(
                "a kernel loop must iterate over range(...) or self.range(...) "
                "(or a Python list, which is unrolled)",
                node.iter,
            )
        if not isinstance(node.target, ast.Name):
            raise self.error("the loop variable must be a single name", node.target)
        b = self.builder
        loc = self.loc(node)
        start = b.expect_scalar(it.start, "range start", int32)
        stop = b.expect_scalar(it.stop, "range stop", int32)
        var = Var(b.fresh(node.target.id if node.target.id != "_" else "i"), int32)
        b.push_block()
        self.frame.loop_depth += 1
        try:
            self.visit_block(node.body, Scope({node.target.id: var}, runtime=True, kind="loop"))
        finally:
            self.frame.loop_depth -= 1
        body = b.pop_block()
        b.emit(ForStmt(loc, var, start, stop, it.step, body, it.unroll))

    def stmt_While(self, node):
        if node.orelse:
            raise self.error("while ... else is not supported", node)
        cond = host_value(self.eval(node.test))
        if not isinstance(cond, Expr) and not cond:
            return
        b = self.builder
        loc = self.loc(node)
        b.push_block()
        self.frame.loop_depth += 1
        try:
            self.visit_block(node.body, Scope(runtime=True, kind="loop"))
        finally:
            self.frame.loop_depth -= 1
        b.emit(WhileStmt(loc, to_bool(cond), b.pop_block()))

    def stmt_Break(self, node):
        if self.frame.loop_depth == 0:
            raise self.error("break outside a runtime loop", node)
        if self._group_inside_loop():
            raise self.error("break cannot leave a thread group", node)
        self.builder.emit(BreakStmt(self.loc(node)))

    def _group_inside_loop(self) -> bool:
        for s in reversed(self.frame.scopes):
            if s.kind == "loop":
                return False
            if s.kind == "group":
                return True
        return False

    def stmt_Continue(self, node):
        raise self.error(
            "continue is not supported in tilus kernels; guard the rest of the "
            "loop body with an if instead",
            node,
        )

    def stmt_Return(self, node):
        if not self.frame.is_kernel:
            raise self.error("return must be the last statement of a helper", node)
        if node.value is not None:
            raise self.error("a kernel cannot return a value; write results to global memory", node)
        if self.builder.in_thread_group():
            raise self.error("return inside a thread group is not supported", node)
        self.builder.emit(ReturnStmt(self.loc(node)))

    def stmt_With(self, node):
        if len(node.items) != 1:
            raise self.error("use one context manager per `with`", node)
        item = node.items[0]
        if item.optional_vars is not None:
            raise self.error("`with ... as` is not supported for thread groups", node)
        spec = self.eval(item.context_expr)
        if not isinstance(spec, ThreadGroupSpec):
            raise self.error(
                "only self.thread_group(...), self.single_thread(), "
                "self.single_warp() and self.warp_group() can be used with `with`",
                node,
            )
        b = self.builder
        parent = b.group
        if spec.begin < 0:
            g = Group(-1, 1, parent.abs_begin, self.loc(node))
        else:
            g = Group(spec.begin, spec.num_threads, parent.abs_begin + spec.begin, self.loc(node))
        b.groups.append(g)
        b.push_block()
        try:
            self.visit_block(node.body, Scope(runtime=True, kind="group"))
        finally:
            b.groups.pop()
        body = b.pop_block()
        b.emit(ThreadGroupStmt(self.loc(node), spec.begin, spec.num_threads, body))

    def stmt_Assert(self, node):
        cond = host_value(self.eval(node.test))
        if isinstance(cond, (Expr, TensorVar)):
            raise self.error("assert needs a compile-time condition", node)
        if not cond:
            msg = self.eval(node.msg) if node.msg is not None else ""
            raise self.error(f"assertion failed{': ' + str(msg) if msg else ''}", node)


def _strip_docstring(body):
    if (
        body
        and isinstance(body[0], ast.Expr)
        and isinstance(body[0].value, ast.Constant)
        and isinstance(body[0].value.value, str)
    ):
        return body[1:]
    return body


def _defining_class(fn, obj):
    for klass in type(obj).__mro__:
        if fn in klass.__dict__.values():
            return klass
    return type(obj)


def _resolve_annotation(ann, fn):
    if isinstance(ann, str):
        try:
            return eval(ann, fn.__globals__)  # noqa: S307 - user's own annotation text
        except Exception:
            return None
    return ann


def _reads_any(e, values) -> bool:
    from tilus.passes.uniformity import _reads

    found: list = []
    _reads(e, found)
    return any(x in values for x in found)
