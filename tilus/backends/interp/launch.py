"""Running a kernel on the interpreter: argument checks, the grid loop, config cross-checks."""

from __future__ import annotations

import collections
import itertools

import numpy as np

from tilus import option
from tilus.backends.arguments import check_assumptions, check_cluster_grid, check_view_extents
from tilus.backends.interp import (  # noqa: F401 - register rules
    rules_async,
    rules_atomic,
    rules_cluster,
    rules_hopper,
    rules_layout,
    rules_lowbit,
    rules_print,
    rules_random,
    rules_sync,
)
from tilus.backends.interp.cluster import Cluster
from tilus.backends.interp.machine import CTA
from tilus.backends.interp.rules import INTERP_RULES
from tilus.backends.interp.values import PointerValue
from tilus.dtypes import ALL_DTYPES, DataType, PointerType, from_numpy_dtype, from_torch_dtype
from tilus.errors import TilusArgumentError, TilusRuntimeError
from tilus.ir import fp8
from tilus.ir.builtins import BLOCK_IDX, GRID_DIM
from tilus.ir.evaluate import eval_scalar
from tilus.ir.fp8 import is_fp8
from tilus.tensor import Tensor

MAX_GRID = (2**31 - 1, 65535, 65535)


def _is_torch(v) -> bool:
    return type(v).__module__.startswith("torch") and hasattr(v, "device")


def wants_interpreter(runtime) -> bool:
    """Interpreter when asked to, or when every tensor argument lives on the CPU."""
    if option.get_option("interpret"):
        return True
    for _, ann, v in runtime:
        if isinstance(ann, PointerType) and _is_torch(v) and v.device.type != "cpu":
            return False
    return True


class _Buffer:
    """A pointer argument as a flat NumPy buffer, with write-back for torch dtypes NumPy lacks."""

    def __init__(self, kernel, name, ann: PointerType, v):
        want = ann.base
        packed = None
        if isinstance(v, Tensor):  # a tilus.Tensor: its bytes, typed as its dtype
            packed, v = v.dtype, v.storage
        if isinstance(v, np.ndarray):
            dt = from_numpy_dtype(v.dtype)
            if not v.flags.c_contiguous:
                raise TilusArgumentError(
                    f"{kernel}: argument {name!r} is a non-contiguous array;"
                    " pass np.ascontiguousarray(...)"
                )
            self.flat, self.torch, self.copied = v.reshape(-1), None, False
        elif _is_torch(v):
            dt = from_torch_dtype(v.dtype)
            if not v.is_contiguous():
                raise TilusArgumentError(
                    f"{kernel}: argument {name!r} is a non-contiguous tensor; pass .contiguous()"
                )
            t = v.detach()
            self.torch = t
            # the interpreter works on host copies of device tensors (TILUS_INTERPRET=1 on a GPU
            # machine), and on float32 copies of bfloat16 and fp8, which NumPy lacks (DLPack
            # does not carry fp8 either: its bytes are decoded here); all write back
            widened = dt is not None and (dt.name == "bfloat16" or is_fp8(dt))
            self.copied = t.device.type != "cpu" or widened
            host = t.cpu() if t.device.type != "cpu" else t
            if dt is not None and is_fp8(dt):
                self.flat = fp8.decode(host.reshape(-1).view(torch_uint8(t)).numpy(), dt)
            elif dt is not None and dt.name == "bfloat16":
                self.flat = host.float().reshape(-1).numpy().copy()
            else:
                self.flat = host.reshape(-1).numpy()
                if self.copied:
                    self.flat = self.flat.copy()
        else:
            raise TilusArgumentError(
                f"{kernel}: argument {name!r} ({ann!r}) needs an array or "
                f"tensor, got {type(v).__name__}"
            )
        if packed is not None:
            dt = packed
        if dt is None:
            raise TilusArgumentError(
                f"{kernel}: argument {name!r} has dtype {v.dtype}, which tilus does not support"
            )
        byte_storage = packed is None and dt is not None and dt.name in ("uint8", "int8")
        if isinstance(want, DataType) and want.nbits % 8 and byte_storage:
            dt = want  # bytes for a sub-byte pointer (``~int4b``): packed storage
        if isinstance(want, DataType) and dt != want:
            raise TilusArgumentError(
                f"{kernel}: argument {name!r} is declared {ann!r} but got an array of {dt.name}"
            )
        self.dtype = dt
        self.name = name
        # float32 copies of this buffer's bytes viewed as fp8 by `global_view` (dtype name ->
        # array); encoded back into the bytes when the kernel ends
        self.fp8_views: dict = {}

    def flush_views(self):
        """Write the fp8 views' values into the buffer's bytes."""
        for name, arr in self.fp8_views.items():
            self.flat.view(np.uint8)[...] = fp8.encode(arr, ALL_DTYPES[name])
        self.fp8_views.clear()

    def write_back(self):
        self.flush_views()
        if self.torch is not None and self.copied:
            import torch

            if is_fp8(self.dtype):
                data = torch.from_numpy(fp8.encode(self.flat, self.dtype))
                self.torch.view(torch.uint8).copy_(data.reshape(self.torch.shape))
                return
            self.torch.copy_(torch.from_numpy(self.flat).reshape(self.torch.shape))


def torch_uint8(t):
    """torch.uint8 (torch is imported only when a torch tensor is passed)."""
    import torch

    return torch.uint8


def _scalar(kernel, name, ann: DataType, v):
    if _is_torch(v) or isinstance(v, np.ndarray):
        if getattr(v, "ndim", 1) == 0:
            v = v.item()
        else:
            raise TilusArgumentError(
                f"{kernel}: argument {name!r} is a scalar ({ann}) but got an array"
            )
    if isinstance(v, np.generic):
        v = v.item()
    if ann.is_integer():
        if isinstance(v, bool) or not isinstance(v, int):
            raise TilusArgumentError(
                f"{kernel}: argument {name!r} is {ann} but got {type(v).__name__} {v!r}"
            )
        if not ann.min_value() <= v <= ann.max_value():
            raise TilusArgumentError(f"{kernel}: argument {name!r}={v} does not fit {ann}")
        return v
    if ann.kind == "bool":
        if not isinstance(v, (bool, int)):
            raise TilusArgumentError(
                f"{kernel}: argument {name!r} is boolean but got {type(v).__name__} {v!r}"
            )
        return bool(v)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise TilusArgumentError(f"{kernel}: argument {name!r} is {ann} but got {type(v).__name__}")
    try:
        return float(v)
    except OverflowError:
        raise TilusArgumentError(f"{kernel}: argument {name!r}={v} does not fit {ann}") from None


def prepare(kernel: str, runtime):
    """Checked runtime values: pointer buffers and scalars."""
    values, buffers = [], []
    for name, ann, v in runtime:
        if isinstance(ann, PointerType):
            b = _Buffer(kernel, name, ann, v)
            buffers.append(b)
            values.append(b)
        else:
            values.append(_scalar(kernel, name, ann, v))
    return values, buffers


def run_program(program, values, seed=None):
    """Run every block of the grid of ``program`` with the given argument values."""
    fn = program.fn
    check_view_extents(fn.name, program, {p.name: v for p, v in zip(fn.params, values)})
    env = {}
    for p, v in zip(fn.params, values):
        if hasattr(v, "flat"):
            env[p] = PointerValue(v.flat, 0, p.name, v.dtype, v.fp8_views)
        else:
            env[p] = v
    check_assumptions(fn, env)
    grid = [int(eval_scalar(b, env)) for b in fn.blocks]
    for g, lim, axis in zip(grid, MAX_GRID, "xyz"):
        if g < 0 or g > lim:
            raise TilusRuntimeError(f"grid dim {axis} = {g} is outside [0, {lim}]", fn.body.loc)
    check_cluster_grid(fn, grid, env)
    for v, g in zip(GRID_DIM, grid):
        env[v] = g
    cx, cy, cz = fn.cluster
    clusters = itertools.product(range(grid[2] // cz), range(grid[1] // cy), range(grid[0] // cx))

    def start():
        # blocks run one after another; one spinning on a semaphore steps aside for the next
        # (and for those already started), as co-resident blocks would. The blocks of a
        # cluster start together and take turns whenever one cannot move (interp/cluster.py).
        for z0, y0, x0 in clusters:
            cl = Cluster(fn.cluster, fn.num_threads) if fn.cluster_size > 1 else None
            for dz, dy, dx in itertools.product(range(cz), range(cy), range(cx)):
                x, y, z = x0 * cx + dx, y0 * cy + dy, z0 * cz + dz
                benv = dict(env)
                benv[BLOCK_IDX.x], benv[BLOCK_IDX.y], benv[BLOCK_IDX.z] = x, y, z
                cta = CTA(program, benv, INTERP_RULES.rules, seed, (x, y, z), workspace, cl)
                active.append((cta, cta.run_steps()))
            return True
        return False

    workspace: dict = {}
    active: collections.deque = collections.deque()
    while active or start():
        progressed = False
        for _ in range(len(active)):
            cta, gen = active.popleft()
            try:
                progressed |= next(gen)
            except StopIteration:
                progressed = True
                continue
            active.append((cta, gen))
        if active and not progressed and not start():
            active[0][0]._deadlock()  # every block left spins on a semaphore: none can move
    check_workspace(workspace)


def check_workspace(workspace: dict) -> None:
    """A ``requires_clean`` global_tensor must be all zero again when the kernel ends."""
    for inst, (arr, loc) in workspace.items():
        if inst.requires_clean and np.any(arr != 0):
            bad = int(np.count_nonzero(arr))
            raise TilusRuntimeError(
                f"global_tensor `{inst.out.name}` (requires_clean=True) ends the kernel with "
                f"{bad} nonzero element(s) of {arr.size}: the kernel must zero it again",
                loc,
            )


def _close(a: np.ndarray, b: np.ndarray) -> tuple[bool, float]:
    if a.dtype.kind in "fc":
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        nan_a, nan_b = np.isnan(a64), np.isnan(b64)
        if np.any(nan_a != nan_b):
            return False, float("nan")
        same = nan_a | (a64 == b64)  # equal infinities (an empty row's -inf LSE) agree
        if np.any(np.isinf(a64) & ~same) or np.any(np.isinf(b64) & ~same):
            return False, float("inf")
        with np.errstate(invalid="ignore"):
            diff = np.abs(np.where(same, 0, a64 - b64))
        scale = max(
            float(np.max(np.abs(np.where(same & ~np.isfinite(a64), 0, a64)), initial=0.0)), 1e-30
        )
        err = float(np.max(diff, initial=0.0)) / scale
        return err <= 1e-2, err
    same = np.array_equal(a, b)
    return same, 0.0 if same else 1.0


def run_interpreted(instantiated, const_args, runtime):
    """Run a kernel call on the interpreter (all configs, cross-checked, when asked)."""
    kernel = instantiated.script_cls.__name__
    values, buffers = prepare(kernel, runtime)
    all_configs = bool(option.get_option("interpret_all_configs"))
    progs = instantiated.runnable_programs(const_args, all_configs)
    seed = option.get_option("schedule_seed")
    if len(progs) == 1:
        run_program(progs[0][1], values, seed)
    else:
        originals = [b.flat.copy() for b in buffers]
        results = []
        for cfg, prog in progs:
            for b, o in zip(buffers, originals):
                b.flat[...] = o
            run_program(prog, values, seed)
            for b in buffers:
                b.flush_views()
            results.append((cfg, [b.flat.copy() for b in buffers]))
        ref_cfg, ref = results[0]
        for cfg, outs in results[1:]:
            for b, x, y in zip(buffers, ref, outs):
                ok, err = _close(x, y)
                if not ok:
                    raise TilusRuntimeError(
                        f"{kernel}: config {cfg} disagrees with config {ref_cfg} on argument "
                        f"{b.name!r} (relative error {err:.3g})"
                    )
        for b, x in zip(buffers, ref):
            b.flat[...] = x
    for b in buffers:
        b.write_back()


class InterpreterBackend:
    """The interpreter as a ``tilus.backends.base.Backend``: no per-kernel state of its own (the
    lowered programs are the front end's), no fast path."""

    name = "interp"

    def new_state(self, kernel):
        return None

    def fast_path(self, state):
        return None

    def run(self, kernel, state, const_args: dict, runtime: list, raw_args=None):
        return run_interpreted(kernel, const_args, runtime)


INTERPRETER = InterpreterBackend()
