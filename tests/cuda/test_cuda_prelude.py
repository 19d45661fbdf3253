"""Every prelude family compiles under NVRTC for sm_90a and lowers to the expected SASS."""

from __future__ import annotations

import re

import pytest

from tests.cuda.conftest import compile_sm90a, needs_nvrtc
from tilus.backends.cuda.prelude import BASE, prelude, prelude_for
from tilus.backends.cuda.ptx import registry, wgmma

# One kernel per family that calls every helper of the family (unused inline functions would
# never reach ptxas), and SASS opcodes each must produce.
_HEAD = """
extern "C" __global__ void __launch_bounds__(128, 1)
use_{fam}(const __grid_constant__ CUtensorMap_t map, float* out, uint32_t* out2) {{
  __shared__ alignas(1024) uint8_t buf[8192];
  __shared__ alignas(8) uint64_t bars[2];
  const uint32_t s = tl_smem_addr(buf), b = tl_smem_addr(bars);
  (void)s; (void)b;
"""
USES = {
    "mbarrier": (
        """
  if (threadIdx.x == 0) { tl_mbar_init(b, 1); tl_mbar_init(b + 8, 2); tl_fence_mbarrier_init(); }
  __syncthreads();
  tl_mbar_arrive_expect_tx(b, 64);
  tl_mbar_expect_tx(b, 0);
  tl_mbar_arrive(b + 8);
  tl_mbar_arrive_count(b + 8, 1);
  tl_mbar_arrive_cluster(b + 8);
  tl_mbar_arrive_cluster_release(b + 8);
  tl_mbar_wait_parity(b, 0);
  tl_mbar_wait_parity_relaxed(b + 8, 0);
  out[threadIdx.x] = tl_mbar_try_wait_parity_acquire(b, 1) + tl_mbar_try_wait_parity_relaxed(b, 1);
  tl_fence_proxy_async();
  tl_fence_proxy_async_global();
""",
        {"SYNCS"},
    ),
    "tma": (
        """
  if (threadIdx.x == 0) {
    tl_tma_prefetch_map(&map);
    tl_tma_load_1d(s, &map, b, 0);
    tl_tma_load_2d(s, &map, b, 0, 1);
    tl_tma_load_3d(s, &map, b, 0, 1, 2);
    tl_tma_load_4d(s, &map, b, 0, 1, 2, 3);
    tl_tma_load_5d(s, &map, b, 0, 1, 2, 3, 4);
    tl_tma_load_1d_multicast(s, &map, b, 3, 0);
    tl_tma_load_2d_multicast(s, &map, b, 3, 0, 1);
    tl_tma_load_3d_multicast(s, &map, b, 3, 0, 1, 2);
    tl_tma_load_4d_multicast(s, &map, b, 3, 0, 1, 2, 3);
    tl_tma_load_5d_multicast(s, &map, b, 3, 0, 1, 2, 3, 4);
    tl_tma_store_1d(&map, s, 0);
    tl_tma_store_2d(&map, s, 0, 1);
    tl_tma_store_3d(&map, s, 0, 1, 2);
    tl_tma_store_4d(&map, s, 0, 1, 2, 3);
    tl_tma_store_5d(&map, s, 0, 1, 2, 3, 4);
    tl_tma_store_commit();
    tl_tma_store_wait_read<1>();
    tl_tma_store_wait<0>();
    tl_tma_prefetch_1d(&map, 0);
    tl_tma_prefetch_2d(&map, 0, 1);
    tl_tma_prefetch_3d(&map, 0, 1, 2);
    tl_tma_prefetch_4d(&map, 0, 1, 2, 3);
    tl_tma_prefetch_5d(&map, 0, 1, 2, 3, 4);
  }
""",
        {"UTMALDG", "UTMASTG", "UTMAPF"},
    ),
    "wgmma": (
        """
  float d[64];
  uint64_t da = tl_wgmma_make_desc(s, 16, 1024, 1, 0);
  uint64_t db = tl_wgmma_desc_with_addr(0x4000004000010000ull, s + 32);
  db = tl_wgmma_desc_join((uint32_t)(db >> 32), (uint32_t)db + 2u);
  tl_wgmma_fence();
  tl_wgmma_m64n128k16_f32_f16_ss(d, da, db, 0);
  tl_wgmma_commit_group();
  tl_wgmma_wait_group<0>();
  float acc = 0.f;
  for (int i = 0; i < 64; ++i) acc += d[i];
  out[threadIdx.x] = acc;
""",
        {"HGMMA", "WARPGROUP"},
    ),
    "mma": (
        """
  uint32_t a4[4], t4[4], r2[2], t2[2], r1[1], t1[1];
  tl_ldmatrix_x4(a4, s); tl_ldmatrix_x4_trans(t4, s + 512);
  tl_ldmatrix_x2(r2, s); tl_ldmatrix_x2_trans(t2, s + 256);
  tl_ldmatrix_x1(r1, s); tl_ldmatrix_x1_trans(t1, s + 128);
  float d[4] = {0.f, 0.f, 0.f, 0.f};
  tl_mma_m16n8k16_f32_f16(d, a4, r2);
  tl_mma_m16n8k16_f32_bf16(d, t4, t2);
  out[threadIdx.x] = d[0] + d[1] + d[2] + d[3] + r1[0] + t1[0];
""",
        {"HMMA", "LDSM"},
    ),
    "sync": (
        """
  tl_syncthreads();
  tl_bar_sync(1, 128);
  tl_bar_arrive(2, 64);
  tl_syncwarp();
  tl_cluster_sync();
  tl_cluster_arrive();
  tl_cluster_wait();
  uint32_t remote = tl_mapa(s, tl_cluster_ctarank());
  if (blockIdx.x & 1) tl_setmaxnreg_dec<40>(); else tl_setmaxnreg_inc<232>();
  out[threadIdx.x] = tl_elect_one() + remote;
""",
        {"BAR", "ELECT", "USETMAXREG", "UCGABAR_ARV"},
    ),
    "ldst": (
        """
  uint32_t q[4];
  tl_ld_global_v4_b32(out2, q);
  tl_st_global_b32(out2, tl_pack_f16x2(out[0], out[1]));
  tl_st_global_v2_b32(out2 + 2, tl_pack_bf16x2(out[2], out[3]), q[0]);
  tl_st_global_v4_b32(out2 + 4, q[0], q[1], q[2], q[3]);
  tl_st_shared_b32(s, q[1]);
  tl_st_shared_v4_b32(s + 16, q[0], q[1], q[2], q[3]);
  const uint32_t ok = threadIdx.x < 100;
  uint8_t* o8 = (uint8_t*)(out2 + 8);
  tl_st_global_if_i8((int8_t*)o8, (int8_t)q[0], ok);
  tl_st_global_or_i8((int8_t*)o8, (int8_t)q[0], ok);
  tl_st_global_if_u8(o8 + 1, (uint8_t)q[1], ok);
  tl_st_global_or_u8(o8 + 1, (uint8_t)q[1], ok);
  tl_st_global_if_bool((bool*)o8 + 2, q[2] != 0, ok);
  tl_st_global_or_bool((bool*)o8 + 2, q[2] != 0, ok);
  uint16_t* o16 = (uint16_t*)(out2 + 16);
  tl_st_global_if_i16((int16_t*)o16, (int16_t)q[0], ok);
  tl_st_global_or_i16((int16_t*)o16, (int16_t)q[0], ok);
  tl_st_global_if_u16(o16 + 1, (uint16_t)q[1], ok);
  tl_st_global_or_u16(o16 + 1, (uint16_t)q[1], ok);
  tl_st_global_if_pair(o16 + 2, q[2], ok, !ok, ok);
  tl_st_global_or_pair(o16 + 2, q[2], ok, !ok, ok);
  tl_st_global_or_v2_b32(out2 + 32, q[0], q[1], ok);
  tl_st_global_or_v4_b32(out2 + 36, q[0], q[1], q[2], q[3], ok);
  tl_st_global_if_i32((int32_t*)out2 + 24, (int32_t)q[3], ok);
  tl_st_global_or_i32((int32_t*)out2 + 24, (int32_t)q[3], ok);
  tl_st_global_if_u32(out2 + 25, q[0], ok);
  tl_st_global_or_u32(out2 + 25, q[0], ok);
  tl_st_global_if_i64((int64_t*)(out2 + 26), (int64_t)q[1], ok);
  tl_st_global_or_i64((int64_t*)(out2 + 26), (int64_t)q[1], ok);
  tl_st_global_if_u64((uint64_t*)(out2 + 28), (uint64_t)q[2], ok);
  tl_st_global_or_u64((uint64_t*)(out2 + 28), (uint64_t)q[2], ok);
  tl_st_global_if_f32(out + 8, out[0], ok);
  tl_st_global_or_f32(out + 8, out[0], ok);
  tl_st_global_if_f64((double*)(out + 10), (double)out[1], ok);
  tl_st_global_or_f64((double*)(out + 10), (double)out[1], ok);
""",
        {"F2FP", "STG", "LDG", "STS"},
    ),
    "atomic": (
        """
  int* const sem = (int*)out2;
  if (threadIdx.x == 0) { tl_sem_wait_eq(sem, 1); tl_sem_store(sem, 2); }
""",
        {"LDG", "STG", "MEMBAR"},
    ),
    "cp_async": (
        """
  const uint64_t pol = tl_policy_evict_first();
  tl_cp_async_4(s, out2 + threadIdx.x, 4u);
  tl_cp_async_4_hint(s + 512, out2 + threadIdx.x, 2u, pol);
  tl_cp_async_8(s + 1024, out2 + 2 * threadIdx.x, 8u);
  tl_cp_async_8_hint(s + 2048, out2 + 2 * threadIdx.x, 0u, pol);
  tl_cp_async_commit();
  tl_cp_async_16(s + 4096, out2 + 4 * threadIdx.x, 16u);
  tl_cp_async_16_hint(s + 6144, out2 + 4 * threadIdx.x, 12u, pol);
  tl_cp_async_wait<1>();
  tl_cp_async_wait_all();
  out[threadIdx.x] = buf[threadIdx.x];
""",
        {"LDGSTS", "LDGDEPBAR", "DEPBAR"},
    ),
    "cluster": (
        """
  tl_mbar_arrive_cluster_count_release(b, 1);
  tl_mbar_arrive_cluster_count_relaxed(b + 8, 2);
  tl_mbar_arrive_expect_tx_cluster_release(b, 16);
  tl_mbar_arrive_expect_tx_cluster_relaxed(b + 8, 32);
  tl_mbar_wait_parity_cluster_acquire(b, 0);
  tl_mbar_wait_parity_cluster_relaxed(b + 8, 1);
""",
        {"SYNCS"},
    ),
    "random": (
        """
  uint32_t w[4];
  tl_philox((uint64_t)out2[0] << 32 | out2[1], threadIdx.x, 10, w);
  out[threadIdx.x] = tl_uniform24(w[0]) + (float)(w[1] ^ w[2] ^ w[3]);
""",
        {"IMAD"},
    ),
    "cache_hint": (
        """
  const uint64_t first = tl_policy_evict_first_l2(), last = tl_policy_evict_last_l2();
  const uint4* const src = (const uint4*)out2 + threadIdx.x;
  uint4* const dst = (uint4*)out + threadIdx.x;
  const uint4 v0 = tl_ld_evict_first_v4(src, first), v1 = tl_ld_evict_last_v4(src + 128, last);
  const uint4 v2 = tl_ld_no_allocate_v4(src + 256, 0ull);
  const uint2 w0 = tl_ld_evict_first_v2(src + 384, first), w1 = tl_ld_evict_last_v2(src + 512, last);
  const uint2 w2 = tl_ld_no_allocate_v2(src + 640, 0ull);
  tl_st_evict_first_v4(dst, v0, first);
  tl_st_evict_last_v4(dst + 128, v1, last);
  tl_st_stream_v4(dst + 256, v2, 0ull);
  tl_st_evict_first_v2(dst + 384, w0, first);
  tl_st_evict_last_v2(dst + 512, w1, last);
  tl_st_stream_v2(dst + 640, w2, 0ull);
""",
        {"LDG", "STG"},
    ),
    "lowbit": (
        """
  const float x = out[threadIdx.x];
  const uint32_t c = tl_enc_sf<2, 1, false>(x) | tl_enc_sf<5, 1, true>(x);
  tl_st_bits((uint8_t*)out2, 3 * (int64_t)threadIdx.x, c, 3);
  tl_or_bits32(out2 + 64, 0xffu, threadIdx.x);
  out[threadIdx.x] = tl_dec_sf<3, 2, false>(out2[threadIdx.x]) + (float)tl_hsub2(out2[1], out2[2]);
  out2[threadIdx.x + 32] = tl_enc_sfn<2, 1>(x) | tl_hmul2(out2[3], out2[4]) |
      tl_enc_h2sf<3, 2>(out2[threadIdx.x + 96]) | tl_hmin2(out2[5], out2[6]) |
      tl_hadd2(out2[7], out2[8]) | tl_lanes_of_bit15(out2[9]) |
      tl_prmt(out2[10], out2[11], out2[12]) | tl_hfma2(out2[13], out2[14], out2[15]) |
      tl_enc_h2e2<1>(out2[threadIdx.x + 128]);
""",
        {"ATOM", "HFMA2", "HMNMX2", "PRMT"},  # f16x2 subtraction: an HFMA2 (x * 1 - y) here
    ),
}


def _kernel(fam: str) -> str:
    extra = [wgmma.mma_async(128)] if fam == "wgmma" else []
    return prelude([fam, *extra]) + _HEAD.format(fam=fam) + USES[fam][0] + "}\n"


def test_every_family_has_a_use_kernel():
    assert set(registry.families()) == set(USES)


@needs_nvrtc
@pytest.mark.parametrize("fam", sorted(USES))
def test_family_compiles_for_sm90a(fam):
    binary, ops = compile_sm90a(_kernel(fam))
    # Every helper of the family must be called by the use kernel.
    for frag in registry.fragments(fam):
        names = re.findall(r"__device__ __forceinline__ \w+ (tl_\w+)\(", frag.text)
        for name in names:
            assert name + "(" in USES[fam][0] or name + "<" in USES[fam][0], name
    assert "warning" not in binary.log.lower(), binary.log
    missing = {op for op in USES[fam][1] if not any(k.startswith(op) for k in ops)}
    assert not missing, f"{fam}: no {missing} in SASS ({sorted(ops)})"
    assert not ops.get("LDL") and not ops.get("STL")


@needs_nvrtc
def test_wgmma_every_n_and_type_compiles():
    frags, kernels = [], []
    for i, n in enumerate(wgmma.LEGAL_N):
        ab = "f16" if i % 2 == 0 else "bf16"
        a_from = "smem" if i % 4 < 2 else "regs"
        frag = wgmma.mma_async(n, ab, a_from=a_from)
        frags.append(frag)
        a_arg = "da" if a_from == "smem" else "a"
        kernels.append(f"""
extern "C" __global__ void __launch_bounds__(128) k{n}(float* out, uint64_t da, uint64_t db) {{
  float d[{n // 2}];
  uint32_t a[4] = {{1u, 2u, 3u, 4u}};
  tl_wgmma_fence();
  {frag.name}(d, {a_arg}, db, 0);
  tl_wgmma_commit_group();
  tl_wgmma_wait_group<0>();
  float acc = 0.f;
  for (int i = 0; i < {n // 2}; ++i) acc += d[i];
  out[threadIdx.x] = acc;
}}""")
    binary, ops = compile_sm90a(prelude(["wgmma", *frags]) + "\n".join(kernels))
    assert ops["HGMMA"] == len(wgmma.LEGAL_N)
    assert not ops.get("LDL") and not ops.get("STL")


def test_mma_async_text():
    frag = wgmma.mma_async(256)
    assert frag.name == "tl_wgmma_m64n256k16_f32_f16_ss"
    assert frag.text.count('"+f"(d[') == 128
    assert "%127}" in frag.text and "%128, %129, p, 1, 1, 0, 0;" in frag.text
    rs = wgmma.mma_async(8, "bf16", a_from="regs")
    assert "{%4, %5, %6, %7}, %8, p, 1, 1, 0;" in rs.text
    assert wgmma.mma_async(64, trans_b=1).name.endswith("_t01")
    for bad in (dict(n=4), dict(n=264), dict(n=12), dict(n=64, ab="f32")):
        with pytest.raises(ValueError):
            wgmma.mma_async(**bad)
    with pytest.raises(ValueError):
        wgmma.mma_async(64, a_from="regs", trans_a=1)


def test_check_operands():
    assert registry.check_operands("mov.u32 %0, %1;", 2)
    with pytest.raises(AssertionError):
        registry.check_operands("mov.u32 %0, %2;", 2)
    with pytest.raises(AssertionError):
        registry.check_operands("mov.u32 %0, %1;", 3)


def test_prelude_shape():
    text = prelude(["tma", "mbarrier"])
    assert text == prelude(["mbarrier", "tma"])  # deterministic, order independent
    assert "#include" not in prelude(registry.families())
    assert "struct alignas(64) CUtensorMap_t { unsigned long long opaque[16]; };" in prelude()
    assert "typedef unsigned int uint32_t;" in prelude()
    assert "tl_mbar_init" in text and "tl_wgmma_fence" not in text
    names = re.findall(r"__forceinline__ \w+ (\w+)\(", prelude(registry.families()))
    assert all(n.startswith("tl_") for n in names)
    assert len(names) == len(set(names))
    frag = wgmma.mma_async(64)
    once = prelude([frag, frag])
    assert once.count(f"void {frag.name}(") == 1
    assert "tl_wgmma_fence" in once  # a fragment brings its family
    with pytest.raises(KeyError):
        prelude(["no_such_family"])


def test_prelude_for_keeps_only_what_the_code_reaches():
    code = "tl_mbar_wait_parity(b, 0); tl_wgmma_wait_group<0>(); int tl_v1 = 0;"
    text = prelude_for(code)
    assert text.startswith(BASE)
    # the wait calls try_wait.acquire; its relaxed twins, defined beside it, are not reached
    assert "tl_mbar_try_wait_parity_acquire(" in text
    assert "tl_mbar_wait_parity_relaxed" not in text and "_relaxed(" not in text
    assert "void tl_wgmma_wait_group()" in text and "tl_wgmma_fence" not in text
    assert text.count("// ---- tilus prelude: mbarrier ----") == 1
    assert "tilus prelude: tma" not in text and "tilus prelude: ldst" not in text
    assert prelude_for("tl_wgmma_wait_group<0>(); tl_mbar_wait_parity(b, 0);") == text
    assert prelude_for("") == BASE


def test_prelude_for_every_name_is_the_whole_prelude():
    # definitions are split and filtered, never rewritten: asking for all of them gives back
    # exactly the prelude of every family (fragment comments and order included)
    full = prelude(registry.families())
    assert prelude_for(" ".join(sorted(set(re.findall(r"\btl_\w+", full))))) == full


def test_prelude_for_extra_fragments_and_helpers():
    frag = wgmma.mma_async(64, "bf16")
    helpers = "\n// ---- helpers ----\nstruct tl_pair_t { int a, b; };\n"
    helpers += "__device__ __forceinline__ int tl_sum(tl_pair_t p) { return p.a + p.b; }\n"
    text = prelude_for(f"{frag.name}(d, a, b, 1); tl_sum(p);", [frag, frag], [helpers])
    assert text.count(f"void {frag.name}(") == 1 and text.endswith(helpers)
    assert prelude_for("tl_sum(p);", [frag], [helpers]) == BASE + helpers
    assert frag.name not in prelude_for("tl_wgmma_fence();", [frag])
