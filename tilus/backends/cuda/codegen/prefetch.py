"""L2 prefetch: cp.async.bulk.prefetch.tensor of the boxes a TMA load would read."""

from __future__ import annotations

from tilus.backends.cuda.codegen.hopper import issue_once, tma_boxes
from tilus.backends.cuda.tables import CODEGEN_RULES
from tilus.ir import inst_prefetch as PF

rule = CODEGEN_RULES.rule


@rule(PF.TmaPrefetch)
def tma_prefetch(ctx, inst, expr):
    """One prefetch per TMA box of the load into ``like`` (its tensor map, its coordinates)."""
    k = ctx.plan.tmap_of[inst]
    rank = inst.src.ndim
    calls = [
        f"tl_tma_prefetch_{rank}d(&tl_map{k}, {coords});"
        for _, coords in tma_boxes(ctx, inst, inst.like, expr)
    ]
    issue_once(ctx, calls)
