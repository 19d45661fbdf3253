"""The kernel: signature, shared-memory base, mbarrier init, body; the full source text."""

from __future__ import annotations

import re
from dataclasses import dataclass
from types import SimpleNamespace

from tilus.backends.cuda.codegen.context import Context
from tilus.backends.cuda.codegen.lowbit import check_program
from tilus.backends.cuda.codegen.reduce import reduce_parity
from tilus.backends.cuda.codegen.scalar import FASTDIV_HELPERS, HELPERS, UnsupportedDtype, ctype
from tilus.backends.cuda.codegen.stmts import StmtEmitter
from tilus.backends.cuda.layout import LayoutPlan, infer_layouts
from tilus.backends.cuda.prelude import prelude_for
from tilus.backends.cuda.workspace import workspace_layout
from tilus.dtypes import PointerType
from tilus.errors import TilusCompileError
from tilus.ir.stmt import ThreadGroupStmt
from tilus.ir.visit import walk
from tilus.passes.shared_memory import SM90_SMEM_LIMIT

#: Bumped whenever generated code changes meaning; part of the compile-cache key.
CODEGEN_VERSION = "cuda-codegen-1"
#: Slack so the dynamic shared-memory base can be rounded up to 1024 bytes (swizzle atoms).
SMEM_ALIGN_SLACK = 1024


@dataclass(frozen=True)
class KernelSource:
    """Generated CUDA C++ and what launching it needs."""

    name: str
    source: str
    num_threads: int
    smem_bytes: int
    program: object  # tilus.passes.pipeline.Program
    plan: LayoutPlan

    @property
    def tmaps(self):
        """The TMA tensor maps, passed after the parameters in this order."""
        return self.plan.tmaps

    @property
    def divisors(self):
        """The hidden ``fast_divmod`` divisors (``HostDivisor``), passed after the tensor maps
        in this order, each as ``{d, magic, shift}`` (three uint32)."""
        return _hidden_divisors(self.program)

    @property
    def workspace_bytes(self) -> int:
        """Bytes of the launch workspace (``global_tensor``), passed last as a pointer; 0:
        none and no parameter."""
        return workspace_layout(self.program.fn)[1]


def kernel_name(fn) -> str:
    """The ``extern "C"`` name of a function's kernel."""
    return "tl_" + re.sub(r"[^A-Za-z0-9_]", "_", fn.name)


def generate(program, smem_limit: int = SM90_SMEM_LIMIT) -> KernelSource:
    """Generate the CUDA C++ source of a lowered program (``smem_limit``: the target's bytes of
    shared memory per block).

    Raises:
        TilusCompileError: a construct has no CUDA lowering (naming the user's line).
    """
    fn = program.fn
    check_program(fn)  # dtypes it cannot lower, at their line
    plan = infer_layouts(fn)
    ctx = Context(program, plan)
    name = kernel_name(fn)
    params = []
    for p in fn.params:
        try:
            ct = ctype(p.dtype)
        except UnsupportedDtype as e:
            raise TilusCompileError(
                f"CUDA backend: parameter {p.name!r}: {e}", fn.body.loc
            ) from None
        if isinstance(p.dtype, PointerType):
            params.append(f"{ct} __restrict__ {ctx.name(p)}")
        else:
            params.append(f"{ct} {ctx.name(p)}")
    for k in range(len(plan.tmaps)):
        params.append(f"const __grid_constant__ CUtensorMap_t tl_map{k}")
    divisors = _hidden_divisors(program)
    for d in divisors:  # after the maps; the launcher fills them (tilus/passes/fast_divmod.py)
        params.append(f"const tl_divisor_t tl_div{d.index}")
    if workspace_layout(fn)[1]:  # last; the launcher passes a zeroed buffer it keeps
        params.append("uint8_t* __restrict__ tl_workspace")
    emitter = StmtEmitter(ctx)
    total = program.smem.total_bytes
    if plan.scratch_bytes:  # the reductions' cross-warp scratch goes after everything else
        ctx.reduce_base = -(-total // 16) * 16
        total = ctx.reduce_base + plan.scratch_bytes
        if total > smem_limit:
            raise TilusCompileError(
                f"shared memory: the reductions' {plan.scratch_bytes}-byte scratch brings the "
                f"block to {total} bytes, over the target's per-block limit of {smem_limit}",
                None,
            )
    slack = SMEM_ALIGN_SLACK if total + SMEM_ALIGN_SLACK <= smem_limit else 0
    # The launch always has exactly these threads: said to the compiler, it folds the bounds
    # checks and masks that the thread index alone decides (tile coordinates in range).
    ctx.emit(f"__builtin_assume(threadIdx.x < {fn.num_threads}u);")
    if fn.num_threads % 32 == 0 and any(isinstance(n, ThreadGroupStmt) for n in walk(fn.body)):
        # Thread groups branch on the warp index read through a shuffle, which ptxas knows to
        # be the same in every lane: the branches are then warp-uniform, and the warp-level
        # values computed in them (ring stages, WGMMA descriptors) stay in uniform registers
        # instead of being moved there before every WGMMA.
        ctx.emit("const int tl_warp = __shfl_sync(0xffffffffu, (int)(threadIdx.x / 32u), 0);")
        ctx.warp_uniform = True
    ctx.emit("extern __shared__ __align__(1024) uint8_t tl_smem_raw[];")
    if slack:
        ctx.emit("// Swizzled tiles need a 1024-byte aligned base; the launch reserves the slack.")
        ctx.emit(
            "uint8_t* const tl_smem_ptr = tl_smem_raw + "
            "((1024u - (tl_smem_addr(tl_smem_raw) & 1023u)) & 1023u);"
        )
    else:
        ctx.emit("// No room for alignment slack: the base must already be 1024-byte aligned.")
        ctx.emit("if (tl_smem_addr(tl_smem_raw) & 1023u) __trap();")
        ctx.emit("uint8_t* const tl_smem_ptr = tl_smem_raw;")
    ctx.emit("const uint32_t tl_smem = tl_smem_addr(tl_smem_ptr);")
    for begin, size in plan.reduce_halves:  # which of its two reduction areas a group uses next
        ctx.emit(f"uint32_t {reduce_parity(begin, size)} = 0u;")
    if program.smem.barrier_offsets:
        ctx.open("if (threadIdx.x == 0)")
        for stmt_inst in _barrier_allocs(fn):
            off = program.smem.barrier_offsets[stmt_inst.out]
            for i, c in enumerate(stmt_inst.counts):
                ctx.emit(f"tl_mbar_init(tl_smem + {off + 8 * i}u, {emitter.expr(c)});")
        ctx.emit("tl_fence_mbarrier_init();")
        ctx.close()
        if fn.cluster_size > 1:  # peers may arrive on (or multicast into) these barriers
            ctx.emit("tl_cluster_sync();")
        else:
            ctx.emit("__syncthreads();")
    for cond, loc in fn.assumes:  # facts about the parameters (assume()) for the compiler
        ctx.source_comment(SimpleNamespace(loc=loc))
        ctx.emit(f"__builtin_assume({emitter.expr(cond)});")
    emitter.stmt(fn.body)
    body = "\n".join(ctx.lines)
    sig = ",\n    ".join(params)
    header = (
        f"// Generated by tilus ({CODEGEN_VERSION}) from {fn.name}, config {dict(fn.config)}, "
        f"const args {dict(fn.const_args)}.\n"
    )
    cluster = ""
    if fn.cluster_size > 1:  # a compile-time cluster shape: launched like any kernel
        cluster = f"__cluster_dims__({', '.join(map(str, fn.cluster))}) "
    kernel = (
        f'\nextern "C" __global__ void {cluster}__launch_bounds__({fn.num_threads}, {fn.min_blocks})\n'
        + f"{name}(\n    {sig}) {{\n{body}\n}}\n"
    )
    # only the helpers the kernel calls (and what they call), in the prelude's fixed order
    source = header + prelude_for(kernel, ctx.fragments, (HELPERS, FASTDIV_HELPERS)) + kernel
    return KernelSource(
        name=name,
        source=source,
        num_threads=fn.num_threads,
        smem_bytes=total + slack,
        program=program,
        plan=plan,
    )


def _barrier_allocs(fn):
    from tilus.ir.inst import MBarrierAlloc
    from tilus.passes.walk import instructions

    return [inst for _, inst in instructions(fn.body) if isinstance(inst, MBarrierAlloc)]


def _hidden_divisors(program) -> tuple:
    return program.fastdiv.divisors
