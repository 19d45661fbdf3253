"""Hand-parametrized Hopper matmul prototypes (TMA + wgmma + mbarriers) built from the prelude."""

from __future__ import annotations

from dataclasses import dataclass

from tilus.backends.cuda.prelude import prelude
from tilus.backends.cuda.ptx import wgmma

#: Swizzle width for a K-major fp16 tile whose rows span block_k * 2 bytes.
_SWIZZLE_FOR_ROW_BYTES = {128: 128, 64: 64, 32: 32}
_TMA_SWIZZLE_NAME = {128: "128B", 64: "64B", 32: "32B"}
GROUP_M = 8  # default: row tiles of one column band visited together (grouped rasterization)


@dataclass(frozen=True)
class KernelSpec:
    """A generated kernel and what launching it needs."""

    name: str
    source: str
    threads: int
    smem_bytes: int
    block_m: int
    block_n: int
    block_k: int
    swizzle: int  # bytes, for the tensor maps
    box_b_rows: int = 0  # rows of one B TMA box (block_n / cluster_m); 0 means block_n
    cluster_m: int = 1  # CTAs per cluster along M (they share B through TMA multicast)
    persistent: bool = False  # grid of at most one CTA per SM, looping over tiles

    def grid(self, m: int, n: int, num_sms: int = 132) -> tuple[int, int, int]:
        """The 1-D grid for an m x n output (one CTA per tile, or per SM when persistent)."""
        c = self.cluster_m
        tiles = -(-m // (self.block_m * c)) * -(-n // self.block_n)  # cluster tiles
        if self.persistent:
            tiles = min(tiles, num_sms // c)
        return (tiles * c, 1, 1)

    @property
    def tma_swizzle(self) -> str:
        """The swizzle name tilus.runtime.tensormap.encode_tiled expects."""
        return _TMA_SWIZZLE_NAME[self.swizzle]


def _common_checks(block_m: int, block_n: int, block_k: int, stages: int) -> int:
    if block_k * 2 not in _SWIZZLE_FOR_ROW_BYTES:
        raise ValueError(f"block_k must be 16, 32 or 64 for fp16, got {block_k}")
    if block_n not in wgmma.LEGAL_N or block_n % 16:
        raise ValueError(f"block_n must be a multiple of 16 in 16..256, got {block_n}")
    if block_m > 256 or block_n > 256:
        raise ValueError("TMA boxes are at most 256 rows")
    if stages < 2:
        raise ValueError("at least 2 stages")
    return _SWIZZLE_FOR_ROW_BYTES[block_k * 2]


def _raster(group_m: int = GROUP_M, tile: str = "blockIdx.x", rows: str = "grid_m") -> str:
    return f"""\
  // Grouped rasterization: consecutive tiles walk {group_m} row tiles of one column band,
  // so the A and B tiles they share are still in L2.
  const int per_group = {group_m} * grid_n;
  const int first_m = (int)({tile} / per_group) * {group_m};
  const int group_rows = min({rows} - first_m, {group_m});
  const int in_group = (int)({tile} % per_group);
  int tile_m = first_m + in_group % group_rows;
  const int tile_n = in_group / group_rows;"""


def _grid_dims() -> str:
    return """\
  const int grid_m = (M + TL_BM - 1) / TL_BM;
  const int grid_n = (N + TL_BN - 1) / TL_BN;
  const int k_tiles = (K + TL_BK - 1) / TL_BK;
"""


def _mma_step(m_tiles: int, block_k: int, row_base: str, mma_name: str, indent: str) -> str:
    """Unrolled wgmma issue for one stage: block_k/16 K steps x m_tiles m64 tiles."""
    tile = wgmma.KMajorTile(rows=64, cols=block_k, dtype_bytes=2, swizzle=block_k * 2)
    lines = []
    for kk in range(block_k // 16):
        koff = tile.k_offset(16 * kk)  # 16 fp16 along K inside the swizzled row: +32 bytes
        lines.append(f"{indent}desc_b = tl_wgmma_desc_with_addr(TL_DESC_HIGH, b_stage + {koff}u);")
        for mt in range(m_tiles):
            aoff = f"{row_base} + {mt * 64} * TL_ROW_BYTES + {koff}u"
            # The first wgmma of the tile overwrites (scale-d 0): no zeroing instructions, which
            # would serialize the wgmma pipeline (ptxas C7515).
            scale = "kt > 0" if kk == 0 else "1"
            lines.append(
                f"{indent}{mma_name}(acc{mt},\n{indent}    "
                f"tl_wgmma_desc_with_addr(TL_DESC_HIGH, a_stage + {aoff}), desc_b, {scale});"
            )
    return "\n".join(lines)


def _epilogue(m_tiles: int, row_base: str) -> str:
    """Store the fp32 accumulators as fp16 straight from registers, with bounds checks."""
    out = [
        "    // Epilogue: accumulator i of an m64nN tile sits at row"
        " warp*16 + lane/4 + 8*((i/2)%2),"
    ]
    out.append("    // column (i/4)*8 + (lane%4)*2 + i%2; pairs (i, i+1) become one f16x2 store.")
    for mt in range(m_tiles):
        out.append(f"""\
    {{
      const int row = tile_m * TL_BM + {row_base} + {mt * 64} + warp * 16 + lane / 4;
#pragma unroll
      for (int j = 0; j < TL_BN / 8; ++j) {{
        const int col = tile_n * TL_BN + j * 8 + (lane % 4) * 2;
        if (col < N) {{
          if (row < M)
            tl_st_global_b32(c + (int64_t)row * N + col,
                             tl_pack_f16x2(acc{mt}[4 * j], acc{mt}[4 * j + 1]));
          if (row + 8 < M)
            tl_st_global_b32(c + (int64_t)(row + 8) * N + col,
                             tl_pack_f16x2(acc{mt}[4 * j + 2], acc{mt}[4 * j + 3]));
        }}
      }}
    }}""")
    return "\n".join(out)


def _header(kind: str, block_m, block_n, block_k, stages, swizzle, extra: str) -> str:
    tile = wgmma.KMajorTile(rows=8, cols=block_k, dtype_bytes=2, swizzle=swizzle)
    return f"""\
// tilus prototype ({kind}): C[M,N] = A[M,K] @ B[N,K]^T, fp16 in, fp32 accumulate, fp16 out.
constexpr int TL_BM = {block_m};
constexpr int TL_BN = {block_n};
constexpr int TL_BK = {block_k};
constexpr int TL_STAGES = {stages};
constexpr uint32_t TL_ROW_BYTES = {block_k * 2};  // one K-major tile row, = the swizzle width
constexpr uint32_t TL_A_STAGE = {block_m * block_k * 2};
constexpr uint32_t TL_B_STAGE = {block_n * block_k * 2};
// Descriptor upper fields: {swizzle}B swizzle, LBO {tile.lbo} B, SBO {tile.sbo} B, base offset 0.
constexpr uint64_t TL_DESC_HIGH = {tile.high_bits():#x}ull;
{extra}"""


def _indent(text: str, by: int) -> str:
    return "\n".join(
        (" " * by + line) if line and not line.startswith("#") else line
        for line in text.split("\n")
    )


def make_source(
    block_m=128,
    block_n=256,
    block_k=64,
    stages=4,
    consumers=2,
    *,
    persistent=False,
    cluster_m=1,
    group_m=GROUP_M,
) -> KernelSpec:
    """Generate the warp-specialized kernel ``tl_matmul_ws``.

    Warpgroup 0 is the producer: one elected lane of its first warp issues the TMA loads of
    each stage after waiting for the stage's empty barrier; the other lanes idle. Warpgroups
    1..consumers each own block_m/consumers rows (64 or 128), wait on the stage's full barrier,
    issue wgmma m64n{block_n}k16 from shared memory, keep one wgmma group in flight and release
    the previous stage once ``wgmma.wait_group 1`` returns; then they store their rows.

    Args:
        block_m, block_n, block_k: The CTA tile; block_k 64 gives 128B-swizzled fp16 rows.
        stages: Depth of the shared-memory ring.
        consumers: Consumer warpgroups, 1 or 2.
        persistent: Launch at most one CTA per SM and loop over tiles; the producer then
            prefetches the next tile while the consumers run the epilogue.
        cluster_m: 1, or 2 for clusters of two CTAs on vertically adjacent tiles that load
            one half of the shared B tile each and multicast it to both.
        group_m: Row tiles per band of the grouped rasterization.

    Returns:
        The KernelSpec (source, threads = 128*(consumers+1), dynamic shared memory bytes).
    """
    swizzle = _common_checks(block_m, block_n, block_k, stages)
    if consumers not in (1, 2) or block_m % consumers or block_m // consumers not in (64, 128):
        raise ValueError("consumers must be 1 or 2 with block_m/consumers in (64, 128)")
    if cluster_m not in (1, 2):
        raise ValueError("cluster_m must be 1 or 2")
    rows = block_m // consumers
    m_tiles = rows // 64
    if m_tiles * block_n // 2 > 128:
        raise ValueError(f"{m_tiles * block_n // 2} accumulators per thread is too many")
    threads = 128 * (consumers + 1)
    smem = stages * (block_m + block_n) * block_k * 2 + 16 * stages + 1024
    mma = wgmma.mma_async(block_n)
    cl = cluster_m > 1
    # With 3 warpgroups the entry cap is 168 registers; move them to the consumers.
    regs_p = "tl_setmaxnreg_dec<40>();" if consumers == 2 else ""
    regs_c = "tl_setmaxnreg_inc<232>();" if consumers == 2 else ""
    acc_decl = "\n".join(f"    float acc{mt}[TL_BN / 2];" for mt in range(m_tiles))
    acc_zero = " ".join(f"acc{mt}[i] = 0.f;" for mt in range(m_tiles))
    extra = f"constexpr int TL_CONSUMERS = {consumers};  // warpgroups of {rows} rows each\n"
    extra += f"constexpr int TL_CLUSTER_M = {cluster_m};  // CTAs sharing one B tile\n"
    if cluster_m > 1:
        extra += f"constexpr uint32_t TL_B_BOX = {block_n // cluster_m * block_k * 2};"
        extra += "  // bytes of B this CTA loads per stage\n"
    header = _header("warp-specialized", block_m, block_n, block_k, stages, swizzle, extra)
    attrs = " __cluster_dims__(2, 1, 1)" if cl else ""
    rank = "tl_cluster_ctarank()" if cl else "0u"
    if cl:
        load_b = """\
          // This CTA's half of the B tile, multicast into both CTAs of the cluster.
          tl_tma_load_2d_multicast(smem_b + s * TL_B_STAGE + rank * TL_B_BOX, &tmap_b,
                                   full_bar + 8 * s, (uint16_t)0x3, kt * TL_BK,
                                   tile_n * TL_BN + rank * (TL_BN / 2));"""
        release = """\
  // Stage `s` is free once the consumers of both CTAs (the peer multicasts into it) let go.
  // The wgmma reads are complete (wait_group), so the remote arrive needs no release fence.
  tl_mbar_arrive(bar);
  tl_mbar_arrive_cluster(tl_mapa(bar, rank ^ 1u));"""
        sync_all, end_sync = (
            "tl_cluster_sync();",
            "    tl_cluster_sync();  // no CTA leaves while its peer may still signal it\n",
        )
    else:
        load_b = """\
          tl_tma_load_2d(smem_b + s * TL_B_STAGE, &tmap_b, full_bar + 8 * s, kt * TL_BK,
                         tile_n * TL_BN);"""
        release = "  (void)rank;\n  tl_mbar_arrive(bar);"
        sync_all, end_sync = "__syncthreads();", ""
    tile_loop = f"""\
    const int tile_step = gridDim.x / TL_CLUSTER_M;  // 1 iteration unless persistent
    for (int tile = blockIdx.x / TL_CLUSTER_M; tile < num_tiles; tile += tile_step) {{
{_indent(_raster(group_m, "tile", "grid_mc"), 4)}
      tile_m = tile_m * TL_CLUSTER_M + (int)rank;"""
    body = f"""
// Lane 0 of each consumer warp: release ring stage `bar` (an empty-barrier address).
__device__ __forceinline__ void tl_release_stage(uint32_t bar, uint32_t rank) {{
{release}
}}

extern "C" __global__ void __launch_bounds__({threads}, 1){attrs}
tl_matmul_ws(const __grid_constant__ CUtensorMap_t tmap_a,
             const __grid_constant__ CUtensorMap_t tmap_b,
             uint16_t* __restrict__ c, int M, int N, int K) {{
  extern __shared__ __align__(1024) uint8_t tl_smem[];
  // Swizzled tiles need 1024-byte alignment; the launch reserves 1 KB of slack for this.
  const uint32_t smem = (tl_smem_addr(tl_smem) + 1023u) & ~1023u;
  const uint32_t smem_a = smem;                               // [stages][BM x BK] fp16
  const uint32_t smem_b = smem_a + TL_STAGES * TL_A_STAGE;    // [stages][BN x BK] fp16
  const uint32_t full_bar = smem_b + TL_STAGES * TL_B_STAGE;  // [stages] TMA bytes landed
  const uint32_t empty_bar = full_bar + 8 * TL_STAGES;        // [stages] consumers done
{_grid_dims()}\
  const int grid_mc = (grid_m + TL_CLUSTER_M - 1) / TL_CLUSTER_M;  // rows of cluster tiles
  const int num_tiles = grid_mc * grid_n;
  const uint32_t rank = {rank};  // this CTA's rank in its cluster

  if (threadIdx.x == 0) {{
    for (int s = 0; s < TL_STAGES; ++s) {{
      tl_mbar_init(full_bar + 8 * s, 1);  // the producer's expect-tx arrive
      tl_mbar_init(empty_bar + 8 * s, TL_CLUSTER_M * TL_CONSUMERS * 4);  // consumer warps
    }}
    tl_fence_mbarrier_init();
  }} else if (threadIdx.x == 32) {{
    tl_tma_prefetch_map(&tmap_a);
    tl_tma_prefetch_map(&tmap_b);
  }}
  {sync_all}

  const int warpgroup = threadIdx.x / 128;
  const int warp = (threadIdx.x / 32) % 4;
  const int lane = threadIdx.x % 32;
  if (warpgroup == 0) {{
    // ---- producer ----
    {regs_p}
    if (warp == 0 && tl_elect_one()) {{
      int it = 0;  // ring position, continuous across tiles
{_indent(tile_loop, 2)}
        for (int kt = 0; kt < k_tiles; ++kt, ++it) {{
          const int s = it % TL_STAGES;
          tl_mbar_wait_parity(empty_bar + 8 * s, ((it / TL_STAGES) & 1) ^ 1);  // fresh: pass
          tl_mbar_arrive_expect_tx(full_bar + 8 * s, TL_A_STAGE + TL_B_STAGE);
          tl_tma_load_2d(smem_a + s * TL_A_STAGE, &tmap_a, full_bar + 8 * s, kt * TL_BK,
                         tile_m * TL_BM);
{load_b}
        }}
      }}
    }}
{end_sync}\
  }} else {{
    // ---- consumers ----
    {regs_c}
    const uint32_t row_base = (warpgroup - 1) * {rows};
{acc_decl}
    int it = 0;
{tile_loop}
      for (int kt = 0; kt < k_tiles; ++kt, ++it) {{
        const int s = it % TL_STAGES;
        tl_mbar_wait_parity(full_bar + 8 * s, (it / TL_STAGES) & 1);
        const uint32_t a_stage = smem_a + s * TL_A_STAGE;
        const uint32_t b_stage = smem_b + s * TL_B_STAGE;
        uint64_t desc_b;
        tl_wgmma_fence();
{_mma_step(m_tiles, block_k, "row_base * TL_ROW_BYTES", mma.name, " " * 8)}
        tl_wgmma_commit_group();
        // Keep this stage's group in flight; the previous one is done, so free its stage.
        tl_wgmma_wait_group<1>();
        if (kt > 0 && lane == 0) tl_release_stage(empty_bar + 8 * ((it - 1) % TL_STAGES), rank);
      }}
      tl_wgmma_wait_group<0>();
      if (lane == 0 && k_tiles > 0) tl_release_stage(empty_bar + 8 * ((it - 1) % TL_STAGES), rank);
      if (k_tiles == 0) {{  // K == 0: C = 0
#pragma unroll
        for (int i = 0; i < TL_BN / 2; ++i) {{ {acc_zero} }}
      }}
{_indent(_epilogue(m_tiles, "row_base"), 2)}
    }}
{end_sync}\
  }}
}}
"""
    fams = ["mbarrier", "tma", "wgmma", "sync", "ldst", mma]
    src = prelude(fams) + "\n" + header + body
    return KernelSpec(
        "tl_matmul_ws",
        src,
        threads,
        smem,
        block_m,
        block_n,
        block_k,
        swizzle,
        box_b_rows=block_n // cluster_m,
        cluster_m=cluster_m,
        persistent=persistent,
    )


def make_source_v2(block_m=128, block_n=128, block_k=64, stages=4) -> KernelSpec:
    """Generate the non-specialized kernel ``tl_matmul_v2`` (one warpgroup, 128 threads).

    Thread 0 keeps ``stages`` TMA loads in flight; every k-step all threads wait on the
    stage's full barrier, issue the wgmmas, keep one group in flight, ``__syncthreads`` and
    thread 0 refills the stage the finished group read.

    Returns:
        The KernelSpec (128 threads).
    """
    swizzle = _common_checks(block_m, block_n, block_k, stages)
    if block_m not in (64, 128):
        raise ValueError("block_m must be 64 or 128 for one warpgroup")
    m_tiles = block_m // 64
    if m_tiles * block_n // 2 > 128:
        raise ValueError(f"{m_tiles * block_n // 2} accumulators per thread is too many")
    smem = stages * (block_m + block_n) * block_k * 2 + 8 * stages + 1024
    mma = wgmma.mma_async(block_n)
    acc_decl = "\n".join(f"    float acc{mt}[TL_BN / 2];" for mt in range(m_tiles))
    acc_zero = " ".join(f"acc{mt}[i] = 0.f;" for mt in range(m_tiles))
    header = _header("single warpgroup", block_m, block_n, block_k, stages, swizzle, "")
    body = f"""
// Thread 0: load k tile `kt` into stage `s`, completing on full_bar[s].
__device__ __forceinline__ void tl_issue_stage(const CUtensorMap_t* tmap_a,
                                               const CUtensorMap_t* tmap_b, uint32_t smem_a,
                                               uint32_t smem_b, uint32_t full_bar, int s, int kt,
                                               int tile_m, int tile_n) {{
  tl_mbar_arrive_expect_tx(full_bar + 8 * s, TL_A_STAGE + TL_B_STAGE);
  tl_tma_load_2d(smem_a + s * TL_A_STAGE, tmap_a, full_bar + 8 * s, kt * TL_BK, tile_m * TL_BM);
  tl_tma_load_2d(smem_b + s * TL_B_STAGE, tmap_b, full_bar + 8 * s, kt * TL_BK, tile_n * TL_BN);
}}

extern "C" __global__ void __launch_bounds__(128, 1)
tl_matmul_v2(const __grid_constant__ CUtensorMap_t tmap_a,
             const __grid_constant__ CUtensorMap_t tmap_b,
             uint16_t* __restrict__ c, int M, int N, int K) {{
  extern __shared__ __align__(1024) uint8_t tl_smem[];
  const uint32_t smem = (tl_smem_addr(tl_smem) + 1023u) & ~1023u;
  const uint32_t smem_a = smem;
  const uint32_t smem_b = smem_a + TL_STAGES * TL_A_STAGE;
  const uint32_t full_bar = smem_b + TL_STAGES * TL_B_STAGE;
{_grid_dims()}{_raster()}
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (threadIdx.x == 0) {{
    for (int s = 0; s < TL_STAGES; ++s) tl_mbar_init(full_bar + 8 * s, 1);
    tl_fence_mbarrier_init();
  }}
  __syncthreads();
  if (threadIdx.x == 0) {{
    for (int s = 0; s < TL_STAGES && s < k_tiles; ++s)  // prefetch: fill the whole ring
      tl_issue_stage(&tmap_a, &tmap_b, smem_a, smem_b, full_bar, s, s, tile_m, tile_n);
  }}
  {{
{acc_decl}
    for (int kt = 0; kt < k_tiles; ++kt) {{
      const int s = kt % TL_STAGES;
      tl_mbar_wait_parity(full_bar + 8 * s, (kt / TL_STAGES) & 1);
      const uint32_t a_stage = smem_a + s * TL_A_STAGE;
      const uint32_t b_stage = smem_b + s * TL_B_STAGE;
      uint64_t desc_b;
      tl_wgmma_fence();
{_mma_step(m_tiles, block_k, "0u", mma.name, " " * 6)}
      tl_wgmma_commit_group();
      tl_wgmma_wait_group<1>();  // the group of k tile kt-1 has finished reading its stage
      __syncthreads();
      const int refill = kt - 1 + TL_STAGES;
      if (threadIdx.x == 0 && kt > 0 && refill < k_tiles)
        tl_issue_stage(&tmap_a, &tmap_b, smem_a, smem_b, full_bar, (kt - 1) % TL_STAGES,
                       refill, tile_m, tile_n);
    }}
    tl_wgmma_wait_group<0>();
    if (k_tiles == 0) {{  // K == 0: C = 0
#pragma unroll
      for (int i = 0; i < TL_BN / 2; ++i) {{ {acc_zero} }}
    }}
{_epilogue(m_tiles, "0")}
  }}
}}
"""
    src = prelude(["mbarrier", "tma", "wgmma", "sync", "ldst", mma]) + "\n" + header + body
    return KernelSpec("tl_matmul_v2", src, 128, smem, block_m, block_n, block_k, swizzle)


def main(argv: list[str] | None = None) -> int:
    """Check and time the prototype variants against torch.matmul (cuBLAS); write JSON to $OUT.

    Run on a Hopper GPU machine with torch: ``python3 -m bench.prototypes.matmul_ws``. Each
    variant is first smoke-tested in a child process (``--smoke NAME``) so that a deadlocked
    kernel cannot hang the run; the survivors are checked at every size against an fp32
    reference with NaN-poisoned outputs, then timed beside cuBLAS in this process.
    """
    import os
    import sys

    from bench.prototypes import harness

    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--smoke"]:
        harness.smoke(argv[1])
        return 0
    return harness.run_all(os.environ.get("OUT", "."))


if __name__ == "__main__":
    raise SystemExit(main())
