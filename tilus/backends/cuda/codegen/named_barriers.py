"""Named barriers (``bar.sync`` / ``bar.arrive``) and the ids that ``sync()`` may take."""

from __future__ import annotations

from tilus.backends.cuda.tables import CODEGEN_RULES
from tilus.ir import inst_sync as SY
from tilus.passes.walk import instructions

rule = CODEGEN_RULES.rule


def user_ids(ctx) -> frozenset:
    """The barrier ids the kernel names itself (``sync()`` of a sub-group must not take them)."""
    ids = getattr(ctx, "_user_barrier_ids", None)
    if ids is None:
        ids = frozenset(
            i.barrier
            for _, i in instructions(ctx.fn.body)
            if isinstance(i, (SY.NamedBarrierSync, SY.NamedBarrierArrive))
        )
        ctx._user_barrier_ids = ids
    return ids


def _checked(ctx, inst):
    g = ctx.group
    if inst.num_threads > ctx.fn.num_threads:
        raise ctx.error(
            f"{inst.NAME}: barrier {inst.barrier} waits for {inst.num_threads} threads but the "
            f"block has {ctx.fn.num_threads}"
        )
    if g.size % 32 or g.begin % 32:
        raise ctx.error(
            f"{inst.NAME} in threads [{g.begin}, {g.begin + g.size}): only whole warps can "
            "arrive on a hardware barrier"
        )


@rule(SY.NamedBarrierSync)
def named_sync(ctx, inst, expr):
    """``bar.sync id, n``: arrive and wait for ``n`` threads."""
    _checked(ctx, inst)
    ctx.emit(f"tl_bar_sync({inst.barrier}, {inst.num_threads});")


@rule(SY.NamedBarrierArrive)
def named_arrive(ctx, inst, expr):
    """``bar.arrive id, n``: arrive without waiting."""
    _checked(ctx, inst)
    ctx.emit(f"tl_bar_arrive({inst.barrier}, {inst.num_threads});")
