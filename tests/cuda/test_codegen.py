"""CUDA backend, compile only (CPU): seed kernels and small kernels through NVRTC to sm_90a SASS."""

from __future__ import annotations

import pytest

import tilus
from tests.conftest import load_seed
from tests.cuda.conftest import needs_nvrtc
from tilus import bfloat16, float16, float32, int32, uint32
from tilus.utils import cdiv

SMEM_LIMIT = 232448
MAX_ACC_REGS = 192  # tilus.backends.cuda.layout.MAX_TILE_REGISTERS


@pytest.fixture(scope="module", autouse=True)
def _fresh_cache(tmp_path_factory):
    # Compile for real (no hits from an earlier run's cache).
    mp = pytest.MonkeyPatch()
    mp.setenv("TILUS_CACHE_DIR", str(tmp_path_factory.mktemp("tilus-cache")))
    yield
    mp.undo()


def seed(module: str):
    """A seed kernel module (../shared/seed_kernels or $TILUS_SEED_KERNELS), loaded by path under
    a name of its own: the examples folder has modules with the same names."""
    return load_seed(module)


def opcodes(ck):
    from tilus.runtime.sass import sass_opcodes

    return sass_opcodes(ck.sass())


def assert_clean(ck):
    ops = opcodes(ck)
    assert not ops.get("LDL") and not ops.get("STL"), ck.config
    assert ck.resources.get("local_bytes", 0) == 0, ck.resources
    assert ck.resources.get("spill_store_bytes", 0) == 0, ck.resources
    assert "C7515" not in ck.log, ck.log  # no serialized wgmma pipeline
    return ops


def _v2_expected(cfg) -> str | None:
    smem = cfg["num_stages"] * (cfg["block_m"] + cfg["block_n"]) * cfg["block_k"] * 2
    if smem > SMEM_LIMIT:
        return "232448"
    if cfg["block_m"] * cfg["block_n"] // 128 > MAX_ACC_REGS:
        return "registers per thread"
    return None


@needs_nvrtc
def test_seed_v2_every_config_compiles_to_hgmma_and_tma():
    V2 = seed("matmul_v2").MatmulWGMMAV2
    space = V2().configs
    compiled = 0
    for cfg in space:
        kernel = V2(**cfg)
        why = _v2_expected(cfg)
        if why is not None:
            with pytest.raises(tilus.TilusCompileError, match=why):
                tilus.compile(kernel, 4096, 4096, 4096, float16, float16, float16, config=cfg)
            continue
        ck = tilus.compile(kernel, 4096, 4096, 4096, float16, float16, float16, config=cfg)
        ops = assert_clean(ck)
        assert ops["HGMMA"] > 0 and ops["UTMALDG"] > 0, (cfg, sorted(ops))
        assert ck.compile_seconds > 0
        compiled += 1
    assert compiled == 18


@needs_nvrtc
def test_seed_v2_register_limit_error_names_the_line():
    V2 = seed("matmul_v2").MatmulWGMMAV2
    cfg = dict(num_stages=2, block_m=128, block_n=256, block_k=64)
    with pytest.raises(tilus.TilusCompileError) as e:
        tilus.compile(V2(**cfg), 4096, 4096, 4096, float16, float16, float16, config=cfg)
    msg = str(e.value)
    assert "matmul_v2.py:55" in msg and "acc" in msg and "256 registers" in msg


@needs_nvrtc
def test_seed_v4_compiles_warp_specialized():
    V4 = seed("matmul_v4").MatmulWGMMAV4
    ck = tilus.compile(V4(), 8192, 8192, 8192, float16, float16, float16)
    ops = assert_clean(ck)
    assert ops["HGMMA"] > 0 and ops["UTMALDG"] > 0
    src = ck.source
    # groups branch on the warp index made warp-uniform by a shuffle, so the consumers'
    # WGMMA descriptors stay in uniform registers (no R2UR move before each HGMMA)
    assert "const int tl_warp = __shfl_sync(0xffffffffu, (int)(threadIdx.x / 32u), 0);" in src
    assert "if (tl_warp == 8) {  // threads [256, 288)" in src  # producer warp
    assert "if (tl_warp >= 4 && tl_warp < 8) {  // threads [128, 256)" in src  # consumer group 1
    assert "__builtin_assume(threadIdx.x >= 128u && threadIdx.x < 256u);" in src
    assert ops.get("R2UR", 0) < ops["HGMMA"], ops
    assert "tl_elect_one()" in src
    assert "__launch_bounds__(288, 1)" in src
    assert ck.kernel.smem_bytes <= SMEM_LIMIT


@needs_nvrtc
def test_source_is_stable_and_commented():
    V2 = seed("matmul_v2").MatmulWGMMAV2
    from tilus.backends.cuda.codegen import generate

    cfg = dict(num_stages=3, block_m=128, block_n=128, block_k=64)
    prog = V2(**cfg).program(cfg, {"n_size": 512, "k_size": 512})
    a, b = generate(prog).source, generate(prog).source
    assert a == b
    assert "// matmul_v2.py:89  self.wgmma.mma(sa[stage], sb[stage].transpose(), acc)" in a
    assert "#include" not in a
    assert "const __grid_constant__ CUtensorMap_t tl_map0" in a


class VectorAdd(tilus.Script):
    def __call__(self, n: int32, x_ptr: ~float32, y_ptr: ~float32, z_ptr: ~float32):
        self.attrs.blocks = cdiv(n, 512)
        self.attrs.warps = 4
        gx = self.global_view(x_ptr, dtype=float32, shape=[n])
        gy = self.global_view(y_ptr, dtype=float32, shape=[n])
        gz = self.global_view(z_ptr, dtype=float32, shape=[n])
        offset: int32 = self.blockIdx.x * 512
        x = self.load_global(gx, offsets=[offset], shape=[512])
        y = self.load_global(gy, offsets=[offset], shape=[512])
        self.store_global(gz, self.exp(x) + y * 2.0, offsets=[offset])


@needs_nvrtc
def test_vector_add_compiles():
    ck = tilus.compile(VectorAdd(), 1000, float32, float32, float32)
    ops = assert_clean(ck)
    assert ops.get("LDG", 0) >= 8 and ops.get("STG", 0) >= 4, sorted(ops)


class TiledMatmul(tilus.Script):
    def __init__(self, bm=64, bn=64, bk=16):
        super().__init__()
        self.bm, self.bn, self.bk = bm, bn, bk

    def __call__(self, m: int32, n: int, k: int, a_ptr: ~float16, b_ptr: ~float16, c_ptr: ~float32):
        self.attrs.blocks = [cdiv(m, self.bm), cdiv(n, self.bn)]
        self.attrs.warps = 4
        om: int32 = self.bm * self.blockIdx.x
        on: int32 = self.bn * self.blockIdx.y
        ga = self.global_view(a_ptr, dtype=float16, shape=[m, k])
        gb = self.global_view(b_ptr, dtype=float16, shape=[k, n])
        gc = self.global_view(c_ptr, dtype=float32, shape=[m, n])
        acc = self.register_tensor(dtype=float32, shape=[self.bm, self.bn], init=0.0)
        for ok in range(0, k, self.bk):
            a = self.load_global(ga, offsets=[om, ok], shape=[self.bm, self.bk])
            b = self.load_global(gb, offsets=[ok, on], shape=[self.bk, self.bn])
            self.dot(a, b, acc, out=acc)
        self.store_global(gc, acc, offsets=[om, on])


@needs_nvrtc
def test_tiled_matmul_with_dot():
    ck = tilus.compile(TiledMatmul(), 256, 256, 256, float16, float16, float32)
    ops = assert_clean(ck)
    assert ops["HMMA"] > 0


class Unsupported(tilus.Script):
    def __call__(self, x_ptr: ~float32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        g = self.global_view(x_ptr, dtype=float32, shape=[32])
        x = self.load_global(g, offsets=[0], shape=[32])
        y = self.reshape(x, [1, 32])
        s = self.cast(self.transpose(y), float16)  # a cast of a transposed view: not lowered
        self.store_global(g, self.cast(self.sum(s, dim=0), float32), offsets=[0])


@needs_nvrtc
def test_unsupported_construct_names_the_users_line():
    with pytest.raises(tilus.TilusCompileError) as e:
        tilus.compile(Unsupported(), float32)
    msg = str(e.value)
    assert (
        "test_codegen.py:" in msg
        and "self.cast(self.transpose(y), float16)" in msg
        and "transposed register tile" in msg
    )


class NonKMajorB(tilus.Script):
    def __call__(self, a_ptr: ~float16):
        self.attrs.blocks = 1
        self.attrs.warps = 4
        sa = self.shared_tensor(dtype=float16, shape=[64, 64])
        sb = self.shared_tensor(dtype=float16, shape=[64, 8])
        acc = self.register_tensor(dtype=float32, shape=[64, 8], init=0.0)
        self.wgmma.fence()
        self.wgmma.mma(sa, sb, acc)  # N-major B of 16-byte rows: no swizzle, unsupported
        self.wgmma.commit_group()
        self.wgmma.wait_group(0)


@needs_nvrtc
def test_wgmma_b_layout_error():
    with pytest.raises(tilus.TilusCompileError, match=r"test_codegen.py:\d+.*transpose"):
        tilus.compile(NonKMajorB(), float16)


class SubgroupSync(tilus.Script):
    def __call__(self, x_ptr: ~float32):
        self.attrs.blocks = 1
        self.attrs.warps = 2
        with self.thread_group(thread_begin=16, num_threads=32):
            self.sync()  # not whole warps: no hardware barrier fits


class CrossGroupTile(tilus.Script):
    def __call__(self, x_ptr: ~float32):
        self.attrs.blocks = 1
        self.attrs.warps = 8
        g = self.global_view(x_ptr, dtype=float32, shape=[1024])
        x = self.load_global(g, offsets=[0], shape=[1024])  # spread over all 256 threads
        with self.thread_group(thread_begin=128, num_threads=128):
            self.store_global(g, x, offsets=[0])  # half of x is in other threads' registers


@needs_nvrtc
@pytest.mark.parametrize(
    "kernel, text",
    [
        (SubgroupSync, "self.sync()  # not whole warps"),
        (CrossGroupTile, "spread over threads [0, 256) but used by the group [128, 256)"),
    ],
)
def test_layout_errors_name_the_users_line(kernel, text):
    try:
        tilus.compile(kernel(), float32)
    except tilus.TilusProgramError as e:  # the front end may catch it first
        assert "test_codegen.py:" in str(e) and text in str(e), str(e)
    else:
        pytest.fail("expected an error")


@needs_nvrtc
def test_compile_accepts_arrays_dtypes_and_meta_tensors():
    import numpy as np

    x = np.zeros(1000, np.float32)
    ck = tilus.compile(VectorAdd(), 1000, x, float32, x)
    assert ck.cubin and ck.source.startswith("// Generated by tilus")
    torch = pytest.importorskip("torch")
    m = torch.empty(1000, device="meta")
    assert tilus.compile(VectorAdd(), 1000, m, m, m).cubin == ck.cubin


class Bf16Wgmma(tilus.Script):
    def __call__(
        self, m: int32, n: int, k: int, a_ptr: ~bfloat16, b_ptr: ~bfloat16, c_ptr: ~bfloat16
    ):
        self.attrs.blocks = [cdiv(m, 64), cdiv(n, 64)]
        self.attrs.warps = 4
        om: int32 = 64 * self.blockIdx.x
        on: int32 = 64 * self.blockIdx.y
        ga = self.global_view(a_ptr, dtype=bfloat16, shape=[m, k])
        gb = self.global_view(b_ptr, dtype=bfloat16, shape=[n, k])
        sa = self.shared_tensor(dtype=bfloat16, shape=[64, 32])
        sb = self.shared_tensor(dtype=bfloat16, shape=[64, 32])
        acc = self.register_tensor(dtype=float32, shape=[64, 64], init=0.0)
        bar = self.mbarrier.alloc(counts=[1])
        phase: uint32 = 0
        for ok in range(0, k, 32):
            with self.single_thread():
                self.mbarrier.arrive_and_expect_tx(bar[0], transaction_bytes=sa.nbytes + sb.nbytes)
                self.tma.global_to_shared(src=ga, dst=sa, offsets=[om, ok], mbarrier=bar[0])
                self.tma.global_to_shared(src=gb, dst=sb, offsets=[on, ok], mbarrier=bar[0])
            self.mbarrier.wait(bar[0], phase=phase)
            self.wgmma.fence()
            self.wgmma.mma(sa, sb.transpose(), acc)
            self.wgmma.commit_group()
            self.wgmma.wait_group(0)
            self.sync()
            phase ^= 1
        gc = self.global_view(c_ptr, dtype=bfloat16, shape=[m, n])
        self.store_global(gc, self.cast(acc, dtype=bfloat16), offsets=[om, on])


@needs_nvrtc
def test_bf16_wgmma_with_64b_swizzle():
    ck = tilus.compile(Bf16Wgmma(), 256, 256, 256, bfloat16, bfloat16, bfloat16)
    ops = assert_clean(ck)
    assert ops["HGMMA"] > 0 and ops["UTMALDG"] > 0
    assert "f32_bf16_ss" in ck.source and "tl_f2b(" in ck.source
    assert ck.kernel.tmaps[0].swizzle == 64  # 32 bf16 = 64-byte rows


class LoopSemantics(tilus.Script):
    def __call__(self, m: int32, out: ~int32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        g = self.global_view(out, dtype=int32, shape=[2])
        r = self.register_tensor(dtype=int32, shape=[2], init=0)
        for i in range(4):
            i = i * 10  # noqa: PLW2901 - lasts one iteration, like Python
            r[0] += i
        n: int32 = m
        for _ in range(n):  # the bound is evaluated once, like Python's range
            n = n - 1
            r[1] += 1
        self.store_global(g, r, offsets=[0])


@needs_nvrtc
def test_loops_follow_python_semantics():
    src = tilus.compile(LoopSemantics(), 3, int32).source
    assert "int i = tl_k" in src  # a hidden counter drives the rebound loop variable
    assert "const int tl_end" in src  # the runtime bound is hoisted


class OutParams(tilus.Script):
    def __call__(self, x_ptr: ~float32):
        self.attrs.blocks = 1
        self.attrs.warps = 4
        g = self.global_view(x_ptr, dtype=float32, shape=[512])
        s = self.shared_tensor(dtype=float32, shape=[512])
        acc = self.register_tensor(dtype=float32, shape=[512], init=0.0)
        buf = self.register_tensor(dtype=float32, shape=[512], init=0.0)
        for _ in range(3):
            x = self.load_global(g, offsets=[0], shape=[512])
            self.store_shared(s, x)
            self.sync()
            self.load_shared(s, out=buf)  # writes the tile declared outside the loop
            self.exp(buf, out=buf)
            self.add(acc, buf, out=acc)
            self.sync()
        self.store_global(g, acc, offsets=[0])


@needs_nvrtc
def test_out_tiles_are_not_redeclared():
    src = tilus.compile(OutParams(), float32).source
    body = src[src.index('extern "C"') :]
    assert body.count("float buf[") == 1 and body.count("float acc[") == 1
