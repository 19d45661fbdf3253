"""Hand-parametrized Hopper matmul prototypes (TMA + wgmma + mbarriers) built from the prelude."""

from __future__ import annotations

from dataclasses import dataclass

from tilus.backends.cuda.prelude import prelude
from tilus.backends.cuda.ptx import wgmma

#: Swizzle width for a K-major fp16 tile whose rows span block_k * 2 bytes.
_SWIZZLE_FOR_ROW_BYTES = {128: 128, 64: 64, 32: 32}
_TMA_SWIZZLE_NAME = {128: "128B", 64: "64B", 32: "32B"}
GROUP_M = 8  # tiles of one column band visited together (grouped rasterization)


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

    def grid(self, m: int, n: int) -> tuple[int, int, int]:
        """The 1-D grid covering an m x n output."""
        return (-(-m // self.block_m) * -(-n // self.block_n), 1, 1)

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


def _raster() -> str:
    return f"""\
  // Grouped rasterization: consecutive blocks walk {GROUP_M} row tiles of one column band,
  // so the A and B tiles they share are still in L2.
  const int grid_m = (M + TL_BM - 1) / TL_BM;
  const int grid_n = (N + TL_BN - 1) / TL_BN;
  const int per_group = {GROUP_M} * grid_n;
  const int first_m = (int)(blockIdx.x / per_group) * {GROUP_M};
  const int group_rows = min(grid_m - first_m, {GROUP_M});
  const int in_group = (int)(blockIdx.x % per_group);
  const int tile_m = first_m + in_group % group_rows;
  const int tile_n = in_group / group_rows;
  const int k_tiles = (K + TL_BK - 1) / TL_BK;
"""


def _mma_step(m_tiles: int, block_k: int, row_base: str, mma_name: str) -> str:
    """Unrolled wgmma issue for one stage: block_k/16 K steps x m_tiles m64 tiles."""
    lines = []
    for kk in range(block_k // 16):
        koff = kk * 32  # 16 fp16 along K inside the swizzled 128B row: +32 bytes
        lines.append(f"      desc_b = tl_wgmma_desc_with_addr(TL_DESC_HIGH, b_stage + {koff}u);")
        for mt in range(m_tiles):
            aoff = f"{row_base} + {mt * 64} * TL_ROW_BYTES + {koff}u"
            # The first wgmma of the tile overwrites (scale-d 0): no zeroing instructions, which
            # would serialize the wgmma pipeline (ptxas C7515).
            scale = "kt > 0" if kk == 0 else "1"
            lines.append(
                f"      {mma_name}(acc{mt}, tl_wgmma_desc_with_addr(TL_DESC_HIGH, a_stage + {aoff}),"
                f" desc_b, {scale});"
            )
    return "\n".join(lines)


def _epilogue(m_tiles: int, row_base: str) -> str:
    """Store the fp32 accumulators as fp16 straight from registers, with bounds checks."""
    out = [
        "    // Epilogue: accumulator i of an m64nN tile sits at row warp*16 + lane/4 + 8*((i/2)%2),"
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


def make_source(block_m=128, block_n=256, block_k=64, stages=4, consumers=2) -> KernelSpec:
    """Generate the warp-specialized kernel ``tl_matmul_ws``.

    Warpgroup 0 is the producer: one elected lane of its first warp issues the TMA loads of
    each stage after waiting for the stage's empty barrier; the other lanes idle out. Warpgroups
    1..consumers each own block_m/consumers rows (64 or 128), wait on the stage's full barrier,
    issue wgmma m64n{block_n}k16 from shared memory, keep one wgmma group in flight and release
    the previous stage once ``wgmma.wait_group 1`` returns.

    Returns:
        The KernelSpec (source, threads = 128*(consumers+1), dynamic shared memory bytes).
    """
    swizzle = _common_checks(block_m, block_n, block_k, stages)
    if consumers not in (1, 2) or block_m % consumers or block_m // consumers not in (64, 128):
        raise ValueError("consumers must be 1 or 2 with block_m/consumers in (64, 128)")
    rows = block_m // consumers
    m_tiles = rows // 64
    if m_tiles * block_n // 2 > 128:
        raise ValueError(f"{m_tiles * block_n // 2} accumulators per thread is too many")
    threads = 128 * (consumers + 1)
    smem = stages * (block_m + block_n) * block_k * 2 + 16 * stages + 1024
    mma = wgmma.mma_async(block_n)
    # With 3 warpgroups the entry cap is 168 registers; move them to the consumers.
    regs = "tl_setmaxnreg_dec<40>();" if consumers == 2 else ""
    regs_c = "tl_setmaxnreg_inc<232>();" if consumers == 2 else ""
    acc_decl = "\n".join(f"    float acc{mt}[TL_BN / 2];" for mt in range(m_tiles))
    acc_zero = " ".join(f"acc{mt}[i] = 0.f;" for mt in range(m_tiles))
    header = _header(
        "warp-specialized",
        block_m,
        block_n,
        block_k,
        stages,
        swizzle,
        f"constexpr int TL_CONSUMERS = {consumers};  // warpgroups of {rows} rows each\n",
    )
    body = f"""
extern "C" __global__ void __launch_bounds__({threads}, 1)
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
{_raster()}
  if (threadIdx.x == 0) {{
    for (int s = 0; s < TL_STAGES; ++s) {{
      tl_mbar_init(full_bar + 8 * s, 1);                      // the producer's expect-tx arrive
      tl_mbar_init(empty_bar + 8 * s, TL_CONSUMERS * 4);      // lane 0 of every consumer warp
    }}
    tl_fence_mbarrier_init();
  }} else if (threadIdx.x == 32) {{
    tl_tma_prefetch_map(&tmap_a);
    tl_tma_prefetch_map(&tmap_b);
  }}
  __syncthreads();

  const int warpgroup = threadIdx.x / 128;
  const int warp = (threadIdx.x / 32) % 4;
  const int lane = threadIdx.x % 32;
  if (warpgroup == 0) {{
    // ---- producer ----
    {regs}
    if (warp == 0 && tl_elect_one()) {{
      for (int kt = 0; kt < k_tiles; ++kt) {{
        const int s = kt % TL_STAGES;
        const uint32_t phase = (kt / TL_STAGES) & 1;
        tl_mbar_wait_parity(empty_bar + 8 * s, phase ^ 1);  // fresh barriers pass at once
        tl_mbar_arrive_expect_tx(full_bar + 8 * s, TL_A_STAGE + TL_B_STAGE);
        tl_tma_load_2d(smem_a + s * TL_A_STAGE, &tmap_a, full_bar + 8 * s, kt * TL_BK,
                       tile_m * TL_BM);
        tl_tma_load_2d(smem_b + s * TL_B_STAGE, &tmap_b, full_bar + 8 * s, kt * TL_BK,
                       tile_n * TL_BN);
      }}
    }}
  }} else {{
    // ---- consumers ----
    {regs_c}
    const uint32_t row_base = (warpgroup - 1) * {rows};
{acc_decl}
    for (int kt = 0; kt < k_tiles; ++kt) {{
      const int s = kt % TL_STAGES;
      tl_mbar_wait_parity(full_bar + 8 * s, (kt / TL_STAGES) & 1);
      const uint32_t a_stage = smem_a + s * TL_A_STAGE;
      const uint32_t b_stage = smem_b + s * TL_B_STAGE;
      uint64_t desc_b;
      tl_wgmma_fence();
{_mma_step(m_tiles, block_k, "row_base * TL_ROW_BYTES", mma.name)}
      tl_wgmma_commit_group();
      // Keep this stage's group in flight; the previous one is done, so free its stage.
      tl_wgmma_wait_group<1>();
      if (kt > 0 && lane == 0) tl_mbar_arrive(empty_bar + 8 * ((kt - 1) % TL_STAGES));
    }}
    tl_wgmma_wait_group<0>();
    if (k_tiles == 0) {{  // K == 0: C = 0
#pragma unroll
      for (int i = 0; i < TL_BN / 2; ++i) {{ {acc_zero} }}
    }}
{_epilogue(m_tiles, "row_base")}
  }}
}}
"""
    src = prelude(["mbarrier", "tma", "wgmma", "sync", "ldst", mma]) + "\n" + header + body
    return KernelSpec("tl_matmul_ws", src, threads, smem, block_m, block_n, block_k, swizzle)


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
{_raster()}
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
{_mma_step(m_tiles, block_k, "0u", mma.name)}
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


def _finite(x: float) -> float | None:
    """JSON has no infinity: a NaN-poisoned (unwritten) result is reported as null."""
    return x if x == x and abs(x) != float("inf") else None


def main(argv: list[str] | None = None) -> int:
    """Check and time the prototype variants against torch.matmul (cuBLAS); write JSON to $OUT."""
    import datetime
    import json
    import os
    import subprocess
    import sys

    from bench.prototypes import harness

    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--smoke"]:
        harness.smoke(argv[1])
        return 0
    import torch

    from tilus.runtime import driver, nvrtc

    out_dir = os.environ.get("OUT", ".")
    torch.cuda.init()
    dev = torch.cuda.current_device()
    driver.ensure_context(dev)
    gpu = torch.cuda.get_device_name(dev)
    log = open(os.path.join(out_dir, "prototype.log"), "a")  # noqa: SIM115

    def say(msg: str) -> None:
        print(msg, flush=True)
        log.write(msg + "\n")
        log.flush()

    built, results, compile_info = {}, [], {}
    for name in harness.VARIANTS:
        # A deadlocked kernel would hang this process: smoke-test each variant in a child first.
        try:
            p = subprocess.run(
                [sys.executable, "-m", "bench.prototypes.matmul_ws", "--smoke", name],
                capture_output=True,
                text=True,
                timeout=90,
            )
            say(p.stdout.strip() + (f"\n{p.stderr[-2000:]}" if p.returncode else ""))
            ok = p.returncode == 0
        except subprocess.TimeoutExpired:
            say(f"smoke {name}: TIMEOUT (hang?)")
            ok = False
        if ok:
            built[name] = harness.Built(name)
            b = built[name]
            compile_info[name] = {
                "nvrtc_seconds": round(b.binary.seconds, 3),
                **b.resources,
                "threads": b.spec.threads,
                "smem_bytes": b.spec.smem_bytes,
            }
            say(f"built {name}: {compile_info[name]}")
        else:
            compile_info[name] = {"error": "smoke test failed"}
    for m, n, k in harness.CHECK_SIZES:
        for name, b in built.items():
            err = harness.check(b.launcher, m, n, k, torch)
            results.append({"variant": name, "M": m, "N": n, "K": k, "rel_err": _finite(err)})
            say(f"check {name:22s} {m}x{n}x{k}: rel_err={err:.3e} {'OK' if err < 1e-2 else 'FAIL'}")
        err = harness.check(lambda a, b_, c: lambda: torch.matmul(a, b_.T, out=c), m, n, k, torch)
        results.append({"variant": "cublas", "M": m, "N": n, "K": k, "rel_err": _finite(err)})
    flush = torch.empty(256 * 2**20, dtype=torch.uint8, device="cuda")
    timings = []
    for m, n, k in harness.TIME_SIZES:
        a = torch.randn(m, k, device="cuda", dtype=torch.float16)
        b = torch.randn(n, k, device="cuda", dtype=torch.float16)
        c = torch.empty(m, n, device="cuda", dtype=torch.float16)
        row = {"M": m, "N": n, "K": k}
        row["cublas"] = harness.time_ms(
            lambda a=a, b=b, c=c: torch.matmul(a, b.T, out=c), torch, flush
        )
        for name, bv in built.items():
            row[name] = harness.time_ms(bv.launcher(a, b, c), torch, flush)
        timings.append(row)
    # Report.
    flops = {(r["M"], r["N"], r["K"]): 2.0 * r["M"] * r["N"] * r["K"] for r in timings}
    say(f"\nGPU: {gpu}   NVRTC {nvrtc.nvrtc_version()}   torch {torch.__version__}")
    say(
        f"{'variant':22s} {'size':>16s} {'ms':>8s} {'TFLOPS':>8s} {'x cuBLAS':>8s} "
        f"{'nvrtc s':>7s} {'regs':>5s} {'spill':>5s}"
    )
    for row in timings:
        size = (row["M"], row["N"], row["K"])
        for name in ["cublas", *built]:
            ms = row[name]
            tf = flops[size] / ms / 1e9
            ci = compile_info.get(name, {})
            spill = ci.get("local_bytes", ci.get("stack_bytes", "-"))
            say(
                f"{name:22s} {'x'.join(map(str, size)):>16s} {ms:8.3f} {tf:8.1f} "
                f"{row['cublas'] / ms:8.3f} {ci.get('nvrtc_seconds', '-'):>7} "
                f"{ci.get('registers', '-'):>5} {spill:>5}"
            )
    report = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "gpu": gpu,
        "git_commit": os.environ.get("TILUS_GIT_COMMIT", "unknown"),
        "command": os.environ.get("TILUS_BENCH_COMMAND", " ".join([sys.executable, *sys.argv])),
        "nvrtc": ".".join(map(str, nvrtc.nvrtc_version())),
        "torch": torch.__version__,
        "timing": "CUDA events, median of 20 after 5 warm-ups, 256 MB L2 flush before each",
        "compile": compile_info,
        "checks": results,
        "timings_ms": timings,
        "tflops": [
            {
                k2: (v if k2 in ("M", "N", "K") else flops[(r["M"], r["N"], r["K"])] / v / 1e9)
                for k2, v in r.items()
            }
            for r in timings
        ],
    }
    day = report["date"][:10]
    for path in (
        os.path.join(out_dir, f"{day}-h200-prototype.json"),
        os.path.join(out_dir, "prototype.json"),
    ):
        with open(path, "w") as f:
            json.dump(report, f, indent=1)
    bad = [r for r in results if r["rel_err"] is None or r["rel_err"] >= 1e-2]
    say(f"checks: {len(results) - len(bad)} ok, {len(bad)} failed")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
