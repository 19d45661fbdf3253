"""Expression half of the transpiler: evaluates Python expressions to host values or IR."""

from __future__ import annotations

import ast
import builtins
import functools
import math
import operator

from tilus.dtypes import DataType, boolean, float32, int32
from tilus.errors import TilusError, TilusProgramError
from tilus.ir.enums import TensorKind
from tilus.ir.expr import Const, Expr, IRValueAsBoolError, binary, call, cast, select, unary
from tilus.ir.tensor import TensorVar
from tilus.lang.instructions.generic import (
    RangeSpec,
    permute_tensor,
    slice_tensor,
    tensor_binary,
    tensor_unary,
)

BIN_OPS = {
    ast.Add: ("+", operator.add),
    ast.Sub: ("-", operator.sub),
    ast.Mult: ("*", operator.mul),
    ast.Div: ("/", operator.truediv),
    ast.FloorDiv: ("//", operator.floordiv),
    ast.Mod: ("%", operator.mod),
    ast.BitAnd: ("&", operator.and_),
    ast.BitOr: ("|", operator.or_),
    ast.BitXor: ("^", operator.xor),
    ast.LShift: ("<<", operator.lshift),
    ast.RShift: (">>", operator.rshift),
    ast.Pow: ("**", operator.pow),
    ast.MatMult: ("@", operator.matmul),
}
CMP_OPS = {
    ast.Eq: ("==", operator.eq),
    ast.NotEq: ("!=", operator.ne),
    ast.Lt: ("<", operator.lt),
    ast.LtE: ("<=", operator.le),
    ast.Gt: (">", operator.gt),
    ast.GtE: (">=", operator.ge),
    ast.Is: ("is", operator.is_),
    ast.IsNot: ("is not", operator.is_not),
    ast.In: ("in", lambda a, b: a in b),
    ast.NotIn: ("not in", lambda a, b: a not in b),
}
MATH_FUNCS = {
    math.exp: "exp",
    math.log: "log",
    math.sqrt: "sqrt",
    math.sin: "sin",
    math.cos: "cos",
    math.tan: "tan",
    math.tanh: "tanh",
    math.floor: "floor",
    math.ceil: "ceil",
    math.trunc: "trunc",
    math.isnan: "isnan",
    math.isinf: "isinf",
    math.log2: "log2",
}
if hasattr(math, "exp2"):  # Python 3.11+
    MATH_FUNCS[math.exp2] = "exp2"
HOST_ERRORS = (
    TypeError,
    ValueError,
    IRValueAsBoolError,
    ZeroDivisionError,
    IndexError,
    KeyError,
    OverflowError,
)


def is_ir(v) -> bool:
    return isinstance(v, (Expr, TensorVar))


def host_value(v):
    """Unwrap constants so compile-time decisions can be made on them."""
    return v.value if isinstance(v, Const) else v


class TensorMethod:
    """A method of a tile, e.g. ``sb.transpose`` (called from kernel code)."""

    def __init__(self, tensor: TensorVar, name: str):
        self.tensor, self.name = tensor, name

    def __call__(self, *args, **kwargs):
        t, n = self.tensor, self.name
        if n == "transpose":
            if t.ndim != 2:
                raise TypeError(f"transpose() needs a 2-D tile, got {t.type_str()}")
            return permute_tensor(t, (1, 0))
        if n == "permute":
            dims = args[0] if len(args) == 1 and isinstance(args[0], (list, tuple)) else args
            return permute_tensor(t, tuple(dims))
        if n == "to":
            from tilus.lang.instructions.generic import GenericInstructions

            return GenericInstructions.cast(None, t, kwargs.get("dtype", args[0] if args else None))
        if n in ("squeeze", "unsqueeze"):
            from tilus.lang.instructions.generic import squeeze_tensor, unsqueeze_tensor

            dim = kwargs.get("dim", args[0] if args else None)
            return (squeeze_tensor if n == "squeeze" else unsqueeze_tensor)(t, dim)
        if n == "reshape":
            from tilus.lang.instructions.generic import reshape_tensor

            shape = args[0] if len(args) == 1 and isinstance(args[0], (list, tuple)) else args
            return reshape_tensor(t, list(shape))
        if n == "item":
            if (
                t.kind in (TensorKind.SHARED, TensorKind.GLOBAL)
                and isinstance(t.size, int)
                and t.size == 1
            ):
                t = _load_whole(t)  # a one-element view: its value through a 1-element load
            if t.kind != TensorKind.REGISTER or t.size != 1:
                raise TypeError("item() needs a one-element register, shared or global tile")
            return slice_tensor(t, tuple(0 for _ in t.shape)) if t.shape else slice_tensor(t, ())
        if n == "tolist":
            if t.kind != TensorKind.REGISTER:
                raise TypeError(f"tolist() needs a register tile, got {t.type_str()}")
            return _tolist(t, ())
        raise TypeError(f"tiles have no method {n}()")


TENSOR_METHODS = (
    "transpose", "permute", "to", "item", "tolist", "squeeze", "unsqueeze", "reshape",
)  # fmt: skip


def _tolist(t: TensorVar, index: tuple):
    """Nested lists of the tile's elements as scalars (``t[i, j]`` each)."""
    if len(index) == t.ndim:
        return slice_tensor(t, index)
    return [_tolist(t, index + (i,)) for i in range(t.shape[len(index)])]


def _load_whole(t: TensorVar) -> TensorVar:
    """A one-element shared or global tile loaded into registers."""
    from tilus.lang.instructions.generic import GenericInstructions

    if t.kind == TensorKind.SHARED:
        return GenericInstructions.load_shared(None, t)
    gi = GenericInstructions()
    return gi.load_global(t, offsets=[0] * t.ndim, shape=[1] * t.ndim)


def _range(*args, unroll=None):
    from tilus.lang.instructions.generic import GenericInstructions

    return GenericInstructions.range(None, *args, unroll=unroll)


class ExprVisitor:
    """Evaluates expressions; subclasses provide frames, the builder and statement visiting."""

    # --- plumbing ------------------------------------------------------------------------------
    def eval(self, node: ast.AST):
        method = getattr(self, "expr_" + type(node).__name__, None)
        if method is None:
            raise TilusProgramError(
                f"unsupported expression `{type(node).__name__}` in a tilus kernel",
                self.frame.parsed.loc(node),
            )
        try:
            return method(node)
        except TilusError:
            raise
        except HOST_ERRORS as e:
            raise TilusProgramError(str(e), self.frame.parsed.loc(node)) from None
        except Exception as e:  # host code the kernel calls failed: locate it, keep the cause
            raise TilusProgramError(f"{type(e).__name__}: {e}", self.frame.parsed.loc(node)) from e

    def lookup(self, name: str, node):
        f = self.frame
        hit = f.lookup(name)
        if hit is not None:
            return hit[1]
        if name in f.closure:
            return f.closure[name]
        if name in f.globals:
            return f.globals[name]
        if name == "range":
            return _range
        if hasattr(builtins, name):
            return getattr(builtins, name)
        if name in f.branch_locals:
            raise TilusProgramError(
                f"`{name}` is only defined inside the runtime block at line "
                f"{f.branch_locals[name].line}; declare it before that block "
                f"(e.g. `{name}: int32 = 0`) to use it afterwards",
                f.parsed.loc(node),
            )
        raise TilusProgramError(f"name `{name}` is not defined", f.parsed.loc(node))

    def host_eval(self, node):
        """Evaluate a node with Python itself (comprehensions, lambdas, f-strings)."""
        env = self.frame.flat_names()
        env.setdefault("__builtins__", builtins)
        code = compile(ast.Expression(body=node), self.frame.parsed.filename, "eval")
        return eval(code, env)  # noqa: S307 - the user's own kernel source

    # --- leaves --------------------------------------------------------------------------------
    def expr_Constant(self, node):
        return node.value

    def expr_Name(self, node):
        return self.lookup(node.id, node)

    def expr_Tuple(self, node):
        return tuple(self._elements(node.elts))

    def expr_List(self, node):
        return list(self._elements(node.elts))

    def expr_Set(self, node):
        return set(self._elements(node.elts))

    def expr_Dict(self, node):
        return {self.eval(k): self.eval(v) for k, v in zip(node.keys, node.values)}

    def _elements(self, elts):
        out = []
        for e in elts:
            if isinstance(e, ast.Starred):
                out.extend(self.eval(e.value))
            else:
                out.append(self.eval(e))
        return out

    def expr_ListComp(self, node):
        return self.host_eval(node)

    expr_SetComp = expr_DictComp = expr_GeneratorExp = expr_JoinedStr = expr_ListComp

    def expr_Lambda(self, node):
        """A lambda runs as Python on the host when called: it is made located, so that what
        goes wrong in its body (and the instructions it emits) points at the lambda's line."""
        fn = self.host_eval(node)
        loc = self.frame.parsed.loc(node.body)
        builder = self.builder

        @functools.wraps(fn)
        def located(*args, **kwargs):
            saved = builder.loc
            builder.loc = loc
            try:
                return fn(*args, **kwargs)
            except TilusError:
                raise
            except HOST_ERRORS as e:
                raise TilusProgramError(str(e), loc) from None
            except Exception as e:  # noqa: BLE001 - located, the cause kept
                raise TilusProgramError(f"{type(e).__name__}: {e}", loc) from e
            finally:
                builder.loc = saved

        return located

    def expr_Slice(self, node):
        parts = [
            self.eval(x) if x is not None else None for x in (node.lower, node.upper, node.step)
        ]
        return slice(*parts)

    # --- attributes and subscripts -------------------------------------------------------------
    def expr_Attribute(self, node):
        obj = self.eval(node.value)
        name = node.attr
        if isinstance(obj, TensorVar):
            if name in ("shape", "dtype", "nbytes", "size", "ndim", "storage_nbytes"):
                return getattr(obj, name)
            if name in TENSOR_METHODS:
                return TensorMethod(obj, name)
            raise TilusProgramError(
                f"a {obj.kind} tile has no attribute `{name}`", self.frame.parsed.loc(node)
            )
        if isinstance(obj, Expr):
            if name == "dtype":
                return obj.dtype
            raise TilusProgramError(
                f"a scalar has no attribute `{name}`", self.frame.parsed.loc(node)
            )
        try:
            return getattr(obj, name)
        except AttributeError:
            what = type(obj).__name__
            raise TilusProgramError(
                f"`{what}` object has no attribute `{name}`", self.frame.parsed.loc(node)
            ) from None

    def expr_Subscript(self, node):
        obj = self.eval(node.value)
        idx = self.eval(node.slice)
        if isinstance(obj, TensorVar):
            return slice_tensor(obj, idx)
        if any(
            isinstance(i, Expr) and not isinstance(i, Const)
            for i in (idx if isinstance(idx, tuple) else (idx,))
        ):
            raise TilusProgramError(
                "a Python container cannot be indexed by a runtime value",
                self.frame.parsed.loc(node),
            )
        if isinstance(idx, Const):
            idx = idx.value
        return obj[idx]

    # --- operators -----------------------------------------------------------------------------
    def expr_BinOp(self, node):
        lhs, rhs = self.eval(node.left), self.eval(node.right)
        sym, fn = BIN_OPS[type(node.op)]
        return self.binop(sym, fn, lhs, rhs)

    def binop(self, sym, fn, lhs, rhs):
        if isinstance(lhs, TensorVar) or isinstance(rhs, TensorVar):
            if sym in ("**", "@"):
                raise TypeError(f"operator {sym} is not supported on tiles; use self.dot for @")
            t = lhs if isinstance(lhs, TensorVar) else rhs
            if sym == "//":
                sym = "/" if not t.dtype.is_float() else "//"
                if sym == "//":
                    raise TypeError(
                        "// on floating-point tiles is not supported; use / then self.floor"
                    )
            return tensor_binary(sym, lhs, rhs)
        if sym in ("**", "@") and (isinstance(lhs, Expr) or isinstance(rhs, Expr)):
            raise TypeError(f"operator {sym} is not supported on runtime scalars")
        return fn(lhs, rhs)

    def expr_UnaryOp(self, node):
        v = self.eval(node.operand)
        if isinstance(v, TensorVar):
            op = {ast.USub: "neg", ast.Not: "not", ast.Invert: "bitnot", ast.UAdd: None}[
                type(node.op)
            ]
            return v if op is None else tensor_unary(op, v)
        if isinstance(node.op, ast.Not):
            return unary("!", v) if isinstance(v, Expr) else not v
        if isinstance(node.op, ast.USub):
            return -v
        if isinstance(node.op, ast.Invert):
            return ~v
        return +v

    def expr_BoolOp(self, node):
        is_and = isinstance(node.op, ast.And)
        result = self.eval(node.values[0])
        for nxt in node.values[1:]:
            if isinstance(result, TensorVar):
                raise TypeError("and/or on tiles is not supported; use & and | on boolean tiles")
            if not isinstance(result, Expr):
                if is_and and not result:
                    return result
                if not is_and and result:
                    return result
                result = self.eval(nxt)
                continue
            rhs = self.eval(nxt)
            if isinstance(rhs, TensorVar):
                raise TypeError("and/or on tiles is not supported")
            result = binary("&&" if is_and else "||", to_bool(result), to_bool(rhs))
        return result

    def expr_Compare(self, node):
        lhs = self.eval(node.left)
        result = None
        for op, comp in zip(node.ops, node.comparators):
            rhs = self.eval(comp)
            sym, fn = CMP_OPS[type(op)]
            if isinstance(lhs, TensorVar) or isinstance(rhs, TensorVar):
                if sym in ("is", "is not", "in", "not in"):
                    raise TypeError(f"`{sym}` is not supported on tiles")
                r = tensor_binary(sym, lhs, rhs)
            elif (isinstance(lhs, Expr) or isinstance(rhs, Expr)) and sym in (
                "is",
                "is not",
                "in",
                "not in",
            ):
                raise TypeError(f"`{sym}` is not supported on runtime values")
            else:
                r = fn(lhs, rhs)
            if result is None:
                result = r
            elif isinstance(result, TensorVar) or isinstance(r, TensorVar):
                if not (isinstance(result, TensorVar) and isinstance(r, TensorVar)):
                    raise TypeError("a chained comparison cannot mix tiles and scalars")
                result = tensor_binary("&", result, r)  # elementwise `and` of the links
            elif isinstance(result, Expr) or isinstance(r, Expr):
                result = binary("&&", to_bool(result), to_bool(r))
            else:
                result = result and r
            lhs = rhs
        return result

    def expr_IfExp(self, node):
        cond = host_value(self.eval(node.test))
        if not isinstance(cond, Expr):
            return self.eval(node.body if cond else node.orelse)
        a, b = self.eval(node.body), self.eval(node.orelse)
        if isinstance(a, TensorVar) or isinstance(b, TensorVar):
            raise TypeError("a conditional expression on tiles needs self.where(cond, x, y)")
        return select(to_bool(cond), a, b)

    # --- calls ---------------------------------------------------------------------------------
    def expr_Call(self, node):
        if isinstance(node.func, ast.Name) and node.func.id == "super" and not node.args:
            if self.frame.cls is None:
                raise TypeError("super() is only available inside methods")
            return super(self.frame.cls, self.frame.self_obj)
        func = self.eval(node.func)
        args = self._elements(node.args)
        kwargs = {}
        for kw in node.keywords:
            if kw.arg is None:
                kwargs.update(self.eval(kw.value))
            else:
                kwargs[kw.arg] = self.eval(kw.value)
        loc = self.frame.parsed.loc(node)
        saved = self.builder.loc
        self.builder.loc = loc
        try:
            return self.call(func, args, kwargs, node)
        finally:
            self.builder.loc = saved

    def call(self, func, args, kwargs, node):
        any_ir = any(is_ir(a) for a in args) or any(is_ir(v) for v in kwargs.values())
        if func in (builtins.min, builtins.max) and any_ir:
            vals = list(args[0]) if len(args) == 1 else list(args)
            if any(isinstance(v, TensorVar) for v in vals):
                raise TypeError(
                    f"{func.__name__}() of tiles: use self.minimum / self.maximum, "
                    "or self.min / self.max to reduce"
                )
            acc = vals[0]
            for v in vals[1:]:
                acc = call(func.__name__, acc, v)
            return acc
        if func is builtins.range:
            return _range(*args, **kwargs)
        if any_ir and func in (builtins.int, builtins.float, builtins.bool):
            (v,) = args
            return cast(
                v, {builtins.int: int32, builtins.float: float32, builtins.bool: boolean}[func]
            )
        if any_ir and func is builtins.abs:
            return call("abs", args[0])
        if any_ir and func in MATH_FUNCS:
            return call(MATH_FUNCS[func], *args)
        if isinstance(func, DataType) and any_ir:
            (v,) = args
            return cast(v, func)
        if (
            any_ir
            and getattr(func, "__module__", None) == "builtins"
            and func not in (builtins.len, builtins.isinstance, builtins.tuple, builtins.list)
        ):
            name = getattr(func, "__name__", str(func))
            hint = "; use self.printf to print runtime values" if name == "print" else ""
            raise TypeError(
                f"Python's {name}() runs at compile time and cannot take runtime values{hint}"
            )
        user = self.user_callable(func)
        if user is not None:
            return user(args, kwargs, node)
        if isinstance(func, RangeSpec):
            raise TypeError("a range is not callable")
        return func(*args, **kwargs)


def to_bool(v) -> Expr:
    """A runtime condition as a boolean expression (ints compare against zero)."""
    if isinstance(v, TensorVar):
        raise TypeError("a tile cannot be used as a condition")
    if isinstance(v, Expr):
        if v.dtype == boolean:
            return v
        return binary("!=", v, 0)
    return Const(bool(v), boolean)
