"""Compile-only tests of NVRTC, nvcc and SASS inspection (no GPU needed)."""

from __future__ import annotations

import pytest

pytest.importorskip("cuda.bindings")

from tilus.errors import TilusBackendError  # noqa: E402
from tilus.runtime import nvcc, sass  # noqa: E402
from tilus.runtime.nvrtc import CompiledBinary, compile_cuda, nvrtc_version  # noqa: E402


@pytest.fixture(scope="module")
def probe_binary(probe_source) -> CompiledBinary:
    return compile_cuda(probe_source, options=["--ptxas-options=-v"])


def test_nvrtc_version():
    major, minor = nvrtc_version()
    assert major >= 12 and minor >= 0


def test_probe_compiles_to_hopper_sass(probe_binary):
    print(f"\nNVRTC compile of the probe kernel: {probe_binary.seconds * 1e3:.1f} ms")
    assert probe_binary.cubin[:4] == b"\x7fELF"
    assert probe_binary.compiler.startswith("nvrtc-")
    assert "--gpu-architecture=sm_90a" in probe_binary.options
    assert probe_binary.ptx is None
    ops = sass.sass_opcodes(sass.disassemble(probe_binary.cubin))
    assert ops["HGMMA"] >= 1
    assert ops["UTMALDG"] >= 1
    usage = sass.resource_usage(probe_binary.cubin, log=probe_binary.log)
    assert usage["function"] == "probe"
    assert usage["registers"] > 0
    assert usage["shared_bytes"] >= 64 * 64 * 2
    assert usage["spill_store_bytes"] == 0
    print(f"resource usage: {usage}")


def test_grid_constant_tensormap_param_compiles():
    src = (
        "struct alignas(64) CUtensorMap_t { unsigned long long opaque[16]; };\n"
        'extern "C" __global__ void k(const __grid_constant__ CUtensorMap_t tmap, '
        "unsigned long long* out) { out[threadIdx.x] = tmap.opaque[threadIdx.x % 16]; }\n"
    )
    assert compile_cuda(src).cubin


def test_want_ptx(add_one_source):
    binary = compile_cuda(add_one_source, want_ptx=True)
    assert binary.ptx is not None and ".entry add_one" in binary.ptx
    assert ".target sm_90a" in binary.ptx


def test_syntax_error_quotes_source_line():
    src = 'extern "C" __global__ void bad(float* x) {\n  float y = x[0] +* ;\n  x[0] = y;\n}\n'
    with pytest.raises(TilusBackendError) as info:
        compile_cuda(src, name="gen.cu")
    msg = str(info.value)
    assert "gen.cu(2)" in msg  # the NVRTC log
    assert "float y = x[0] +* ;" in msg  # the offending line, quoted
    assert "gen.cu:2:" in msg


def test_virtual_arch_rejected():
    with pytest.raises(TilusBackendError):
        compile_cuda("", arch="compute_90a")


def test_sass_opcode_parser_formats():
    text = (
        "        /*0060*/              @!P0 S2R R3, SR_CgaCtaId ;   /* 0x0000000000038919 */\n"
        "        /*00a0*/                   @!UP0 UIADD3 UR4, -UR4, 0x100000, URZ ;\n"
        "        /*0100*/                   HGMMA.64x64x16.F32 R24, gdesc[UR4], RZ ;\n"
        "        /*0110*/              @P1 LDL.64 R2, [R1+0x8] ;\n"
        "        /*0120*/                   STL [R1], R0 ;\n"
        "        /*0130*/                   UTMALDG.2D [UR8], [UR4] ;\n"
        "        /*0140*/              @PT NOP ;\n"
        "  Function : probe\n"
    )
    ops = sass.sass_opcodes(text)
    assert ops == {"S2R": 1, "UIADD3": 1, "HGMMA": 1, "LDL": 1, "STL": 1, "UTMALDG": 1, "NOP": 1}


def test_parse_resource_usage_text():
    text = (
        "Resource usage:\n Common:\n  GLOBAL:0\n Function k1:\n"
        "  REG:40 STACK:16 SHARED:1024 LOCAL:8 CONSTANT[0]:900 TEXTURE:0 SURFACE:0 SAMPLER:0\n"
        " Function k2:\n  REG:8 STACK:0 SHARED:0 LOCAL:0 CONSTANT[0]:360\n"
    )
    parsed = sass.parse_resource_usage(text)
    assert parsed["k1"]["REG"] == 40 and parsed["k1"]["LOCAL"] == 8
    assert parsed["k2"]["CONSTANT[0]"] == 360
    log = "ptxas         .     8 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads\n"
    assert sass.parse_spills(log) == {
        "stack_frame_bytes": 8,
        "spill_store_bytes": 4,
        "spill_load_bytes": 4,
    }


def test_find_tools():
    for tool in ("cuobjdump", "nvdisasm"):
        assert sass.find_tool(tool).endswith(tool)
    with pytest.raises(TilusBackendError):
        sass.find_tool("definitely-not-a-cuda-tool")


@pytest.mark.skipif(nvcc.find_nvcc() is None, reason="nvcc not installed")
def test_nvcc_compiles_probe(probe_source):
    binary = nvcc.compile_cuda_nvcc(probe_source, arch="sm_90a")
    print(f"\nnvcc compile of the probe kernel: {binary.seconds * 1e3:.1f} ms ({binary.compiler})")
    ops = sass.sass_opcodes(sass.disassemble(binary.cubin))
    assert ops["HGMMA"] >= 1 and ops["UTMALDG"] >= 1


@pytest.mark.skipif(nvcc.find_nvcc() is None, reason="nvcc not installed")
def test_nvcc_error_quotes_source_line():
    with pytest.raises(TilusBackendError) as info:
        nvcc.compile_cuda_nvcc('extern "C" __global__ void f() {\n  int x = ;\n}\n')
    assert "int x = ;" in str(info.value)


def test_nvcc_missing(monkeypatch):
    monkeypatch.setattr(nvcc, "find_nvcc", lambda: None)
    with pytest.raises(TilusBackendError, match="nvcc"):
        nvcc.compile_cuda_nvcc("")


def test_gpu_test_kernels_compile(add_one_source, tma_copy_source):
    """The kernels the GPU tests launch compile here too, so CPU CI catches their typos."""
    ops = sass.sass_opcodes(sass.disassemble(compile_cuda(tma_copy_source).cubin))
    assert ops["UTMALDG"] == 1
    binary = compile_cuda(add_one_source)
    assert "echo" in sass.disassemble(binary.cubin)


def test_nvrtc_buffers_never_alias_shared_bytes():
    """An empty NVRTC log is one byte: the buffer must not be CPython's shared b" " object."""
    compile_cuda('extern "C" __global__ void empty_log() {}', arch="sm_90a")
    assert b" "[0] == 32  # the shared one-byte object still holds a space
