"""The one check that a program's instructions exist on the target it is built for."""

from __future__ import annotations

from dataclasses import fields

from tilus.backends.cuda.tables import MIN_TARGET
from tilus.errors import TilusCompileError
from tilus.ir import inst as I
from tilus.ir import inst_memory as M
from tilus.ir.fp8 import FP8_NAMES
from tilus.ir.rules import NotLowered
from tilus.ir.stmt import ThreadGroupStmt
from tilus.ir.tensor import TensorVar
from tilus.passes.walk import instructions, walk
from tilus.target import Target, lookup

#: Constructs other than instructions that the backend lowers with a Hopper-only instruction.
SINGLE_THREAD_MIN = "sm_90"  # single_thread() elects its thread with elect.sync
CLUSTER_MIN = "sm_90"  # __cluster_dims__ and the cluster instructions
FP8_CVT_MIN = "sm_89"  # cvt.rn.satfinite.e4m3x2 / cvt.rn.f16x2.e4m3x2 and the e5m2 forms

#: Instructions that compute on their fp8 tiles (through the fp8 cvt); the others only move
#: fp8 bytes, which every target can.
_FP8_CONVERTING = (
    I.CastTensor,
    I.ElementwiseBinary,
    I.ElementwiseUnary,
    I.Where,
    I.Reduce,
    I.Scan,
    I.Dot,
    I.PrintTensor,
    I.StoreElement,
    M.Atomic,
)


def _check_fp8(fn, target: Target) -> None:
    """Refuse, at its line, the first instruction converting fp8 values below sm_89."""
    need = lookup(FP8_CVT_MIN)
    if target.supports(need):
        return
    for stmt, inst in instructions(fn.body):
        if not isinstance(inst, _FP8_CONVERTING):
            continue
        for f in fields(inst):
            t = getattr(inst, f.name)
            if isinstance(t, TensorVar) and t.dtype.name in FP8_NAMES:
                raise TilusCompileError(
                    f"{inst.NAME} converts {t.dtype} values (%{t.name}), which needs the fp8 "
                    f"cvt of target {need.arch} or newer, but the kernel is built for "
                    f"{target.arch}",
                    stmt.loc,
                )


def min_target(inst) -> Target | None:
    """The oldest target ``inst`` (an instruction or its class) builds for; None when the CUDA
    backend does not lower it at all (its code generation reports that)."""
    try:
        return lookup(MIN_TARGET.lookup(inst))
    except NotLowered:
        return None


def check_target(fn, target: Target) -> None:
    """Refuse the first instruction of ``fn`` that ``target`` does not have, at its line.

    Raises:
        TilusCompileError: names the instruction, the target and the oldest target that has it.
    """
    if fn.cluster_size > 1 and not target.supports(lookup(CLUSTER_MIN)):
        raise TilusCompileError(
            f"thread-block clusters (cluster_blocks {list(fn.cluster)}) need target "
            f"{CLUSTER_MIN} or newer, but the kernel is built for {target.arch}",
            fn.cluster_loc,
        )
    for stmt, inst in instructions(fn.body):
        need = min_target(inst)
        if need is not None and not target.supports(need):
            raise TilusCompileError(
                f"{inst.NAME} needs target {need.arch} or newer, but the kernel is built for "
                f"{target.arch}",
                stmt.loc,
            )
    _check_fp8(fn, target)
    need = lookup(SINGLE_THREAD_MIN)
    if not target.supports(need):
        for s in walk(fn.body):
            if isinstance(s, ThreadGroupStmt) and s.begin < 0:
                raise TilusCompileError(
                    f"single_thread (elect.sync) needs target {need.arch} or newer, but the "
                    f"kernel is built for {target.arch}",
                    s.loc,
                )
