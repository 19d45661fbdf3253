"""``python -m tilus inspect FILE:Class``: a kernel's IR, CUDA source, PTX, SASS or resources,
compiled for sm_90a with no GPU (arguments the command line leaves out get defaults)."""

from __future__ import annotations

import ast
import importlib.util
import inspect
import json
import sys
from pathlib import Path

from tilus.dtypes import ALL_DTYPES
from tilus.errors import TilusArgumentError

HELP = "show a kernel's IR, CUDA C++, PTX, SASS or resource usage (no GPU needed)"

#: The size given to a compile-time ``int`` parameter that has no default.
DEFAULT_SIZE = 128


def add_arguments(p) -> None:
    """Options of ``inspect``."""
    p.add_argument("kernel", metavar="FILE:Class", help="a Python file and the Script class in it")
    p.add_argument(
        "--config",
        nargs="+",
        default=[],
        metavar="K=V",
        help="constructor (autotune) arguments that pin the config, e.g. block_m=128",
    )
    p.add_argument(
        "--args",
        nargs="+",
        default=[],
        metavar="ARG",
        help="call arguments, NAME=VALUE or positional; compile-time ints left out get "
        f"their default or {DEFAULT_SIZE}, tensors need none",
    )
    p.add_argument(
        "--target", default="sm_90a", help="sm_80, sm_86, sm_89, sm_90 or sm_90a (default sm_90a)"
    )
    p.add_argument(
        "--all-configs", action="store_true", help="every config of the space, not the first"
    )
    p.add_argument(
        "--unaligned",
        action="store_true",
        help="the build a call with a pointer off 16-byte alignment gets (no alignment assumed)",
    )
    what = p.add_mutually_exclusive_group()
    for flag, text in (
        ("--ir", "the tile IR after the passes (no NVRTC needed)"),
        ("--cuda", "the generated CUDA C++ (no NVRTC needed)"),
        ("--layouts", "register layouts and where data moves through shared memory"),
        ("--ptx", "the PTX NVRTC produces"),
        ("--sass", "the SASS of the cubin (needs cuobjdump)"),
        ("--resources", "registers, shared memory, spills (the default)"),
    ):
        what.add_argument(flag, dest="show", action="store_const", const=flag[2:], help=text)
    p.add_argument("--json", action="store_true", help="--resources as JSON")


def _value(text: str):
    """A command-line value: a Python literal (``128``, ``True``, ``'x'``), a tilus data type
    by name (``uint2b`` or ``tilus.uint2b``, as a constructor's ``wdtype`` takes), or else the
    text."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        name = text.strip().removeprefix("tilus.")
        return ALL_DTYPES.get(name, text)


def _pairs(items, what: str) -> dict:
    out = {}
    for item in items:
        if "=" not in item:
            raise TilusArgumentError(f"{what} takes NAME=VALUE items, got {item!r}")
        k, v = item.split("=", 1)
        out[k.strip()] = _value(v)
    return out


def load_kernel_class(spec: str):
    """The object ``Class`` of ``FILE:Class`` (the file is imported under a private name, its
    folder put first on ``sys.path`` so that it can import its neighbours)."""
    path, sep, name = spec.rpartition(":")
    if not sep or not path or not name:
        raise TilusArgumentError(f"expected FILE:Class, got {spec!r}")
    file = Path(path).expanduser().resolve()
    if not file.is_file():
        raise TilusArgumentError(f"no such file: {path}")
    if str(file.parent) not in sys.path:
        sys.path.insert(0, str(file.parent))
    mod_name = f"tilus_inspect_{file.stem}"
    mod_spec = importlib.util.spec_from_file_location(mod_name, file)
    module = importlib.util.module_from_spec(mod_spec)
    sys.modules[mod_name] = module
    mod_spec.loader.exec_module(module)
    obj = getattr(module, name, None)
    if obj is None:
        from tilus.lang.script import Script

        kernels = sorted(
            k
            for k, v in vars(module).items()
            if isinstance(v, type) and issubclass(v, Script) and v.__module__ == mod_name
        )
        raise TilusArgumentError(
            f"{path} defines no {name!r}; its kernels: {', '.join(kernels) or 'none'}"
        )
    return obj


def instantiate(obj, config: dict):
    """The ``InstantiatedScript`` of a Script class (or instance) with ``config`` pinned."""
    from tilus.lang.script import InstantiatedScript, Script

    if isinstance(obj, InstantiatedScript):
        obj = InstantiatedScript(obj.script_cls, obj.args, {**obj.kwargs, **config})
        return obj
    if isinstance(obj, type) and issubclass(obj, Script):
        return obj(**config)
    raise TilusArgumentError(f"{obj!r} is not a tilus.Script class")


def default_arguments(kernel, given: list, named: dict) -> tuple[dict, list[str]]:
    """Arguments by parameter name: the given ones, else the signature's default, else a
    stand-in (``DEFAULT_SIZE`` for ints, None for tensors, which a compile does not read).

    Returns:
        The arguments and notes on the ones made up.
    """
    names = [n for n, _ in kernel.params]
    if len(given) > len(names):
        raise TilusArgumentError(f"{len(given)} arguments given; the kernel takes {names}")
    values = dict(zip(names, given))
    for k, v in named.items():
        if k not in names:
            raise TilusArgumentError(f"the kernel has no parameter {k!r} (it has {names})")
        values[k] = v
    sig = inspect.signature(kernel.script_cls.__call__).parameters
    notes = []
    for n, ann in kernel.params:
        if n in values:
            continue
        default = sig[n].default
        if default is not inspect.Parameter.empty:
            values[n] = default
            continue
        if ann is str:
            raise TilusArgumentError(f"the compile-time str parameter {n!r} needs --args {n}=...")
        if ann is int:
            values[n] = DEFAULT_SIZE
            notes.append(f"{n}={DEFAULT_SIZE}")
        elif ann is float:
            values[n] = 1.0
            notes.append(f"{n}=1.0")
        elif ann is bool:
            values[n] = False
            notes.append(f"{n}=False")
        else:
            values[n] = None  # a tensor or a runtime scalar: not part of the compiled code
    return values, notes


def run(args) -> int:
    """Compile the kernel for the target and print what was asked for."""
    from tilus import option

    kernel = instantiate(load_kernel_class(args.kernel), _pairs(args.config, "--config"))
    positional = [_value(a) for a in args.args if "=" not in a]
    named = _pairs([a for a in args.args if "=" in a], "--args")
    values, notes = default_arguments(kernel, positional, named)
    configs = kernel.configs if args.all_configs else kernel.configs[:1]
    show = args.show or "resources"
    name = kernel.script_cls.__name__
    consts = {
        n: values[n] for n, ann in kernel.params if ann in (int, float, bool, str)
    }  # what shapes the compiled code
    header = [f"{name}: {len(kernel.configs)} config(s); compile-time arguments {consts}"]
    if notes:
        header.append(f"made-up arguments (set with --args): {', '.join(notes)}")
    out = sys.stdout if show == "resources" else sys.stderr
    for line in header:
        print(f"// {line}", file=out)
    for cfg in configs:
        print(f"// config {dict(kernel.kwargs, **cfg)}", file=out)
        if show == "ir":
            print(kernel.program(cfg, _const_args(kernel, values, args.unaligned)).text)
            continue
        if show == "layouts":
            from tilus.backends.cuda.layout import infer_layouts
            from tilus.backends.cuda.layout.report import layout_report

            fn = kernel.program(cfg, _const_args(kernel, values, args.unaligned)).fn
            print(layout_report(fn, infer_layouts(fn)))
            continue
        if show == "cuda":
            from tilus.backends.cuda.codegen.kernel import generate

            program = kernel.program(cfg, _const_args(kernel, values, args.unaligned))
            print(generate(program).source)
            continue
        with option.scoped(keep_ptx=show == "ptx"):
            ck = _build(kernel, cfg, values, args.target, args.unaligned)
        if show == "ptx":
            print(ck.ptx)
        elif show == "sass":
            print(ck.sass())
        else:
            res = {
                "kernel": ck.name,
                "threads": ck.kernel.num_threads,
                "smem_bytes": ck.kernel.smem_bytes,
                **{k: v for k, v in ck.resources.items() if k != "function"},
                "nvrtc_seconds": round(ck.compile_seconds, 3),
                "cached": ck.cached,
            }
            if args.json:
                print(json.dumps(res))
            else:
                width = max(map(len, res))
                for k, v in res.items():
                    print(f"{k:>{width}}: {v}")
    return 0


def _const_args(kernel, values: dict, unaligned: bool) -> dict:
    """The compile-time arguments of a call with ``values``; with ``unaligned`` those of a
    call whose pointers are not all 16-byte aligned (the build that assumes nothing)."""
    from tilus.ir.function import UNALIGNED_ARG

    const_args, _ = kernel.bind((), values)
    return {**const_args, UNALIGNED_ARG: True} if unaligned else const_args


def _build(kernel, cfg: dict, values: dict, target: str, unaligned: bool):
    """``tilus.compile`` of one config, or with ``unaligned`` the same for the other build."""
    if not unaligned:
        from tilus.backends.cuda.api import compile as tilus_compile

        return tilus_compile(kernel, target=target, config=cfg, **values)
    from tilus.backends.cuda.launch import CUDA
    from tilus.target import buildable, building_for

    arch = buildable(target)
    with building_for(arch):  # self.cuda answers for the target, as in tilus.compile
        return CUDA.build(
            kernel.program(dict(cfg), _const_args(kernel, values, True)), cfg, arch=arch
        )
