"""The matmul prototypes compile to TMA + HGMMA SASS without local memory; GPU checks if present."""

from __future__ import annotations

import pytest

from bench.prototypes.matmul_ws import make_source, make_source_v2
from tests.cuda.conftest import compile_sm90a, needs_gpu, needs_nvrtc

CONFIGS = {
    "ws_128x256_c2": lambda: make_source(128, 256, 64, 4, 2),
    "ws_256x128_c2_persistent": lambda: make_source(256, 128, 64, 4, 2, persistent=True),
    "ws_128x128_c1_bk32": lambda: make_source(128, 128, 32, 6, 1),
    "ws_128x256_c2_cluster2": lambda: make_source(128, 256, 64, 4, 2, cluster_m=2),
    "v2_128x128": lambda: make_source_v2(128, 128, 64, 4),
    "v2_64x64_bk16": lambda: make_source_v2(64, 64, 16, 3),
}


@needs_nvrtc
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_prototype_compiles_to_hgmma_and_tma(name):
    from tilus.runtime import sass

    spec = CONFIGS[name]()
    binary, ops = compile_sm90a(spec.source)
    assert ops["HGMMA"] > 0 and ops["UTMALDG"] > 0, sorted(ops)
    assert not ops.get("LDL") and not ops.get("STL")
    usage = sass.resource_usage(binary.cubin, spec.name)
    assert usage["local_bytes"] == 0 and usage["stack_bytes"] == 0
    # No serialized wgmma pipeline (C7515) and no ignored setmaxnreg (C7508).
    assert "C7515" not in binary.log and "C7508" not in binary.log, binary.log
    assert "warning" not in binary.log.lower(), binary.log
    assert spec.smem_bytes <= 227 * 1024


@needs_nvrtc
def test_cluster_release_has_no_gpu_membar_in_the_loop():
    # Only the three barrier.cluster.arrive.release sites (start, two ends) may fence; the
    # per-stage remote arrive must not (a MEMBAR.ALL.GPU per k step halved the throughput).
    _, ops = compile_sm90a(make_source(cluster_m=2, persistent=True).source)
    assert ops["MEMBAR"] == 2 * ops["UCGABAR_ARV"] == 6


def test_spec_geometry():
    spec = make_source(128, 256, 64, 4, 2)
    assert spec.threads == 384 and spec.grid(8000, 8192) == (63 * 32, 1, 1)
    assert make_source(persistent=True).grid(8192, 8192, 132) == (132, 1, 1)
    cl = make_source(cluster_m=2)
    assert cl.box_b_rows == 128 and cl.grid(8000, 8192) == (64 * 32, 1, 1)
    assert "__cluster_dims__(2, 1, 1)" in cl.source
    assert make_source_v2().threads == 128 and make_source_v2().tma_swizzle == "128B"
    assert make_source_v2(64, 64, 16, 3).tma_swizzle == "32B"
    src = spec.source
    assert src == make_source(128, 256, 64, 4, 2).source  # deterministic
    assert "#include" not in src and "tl_setmaxnreg_dec<40>" in src


@pytest.mark.parametrize(
    "args,kwargs",
    [
        ((128, 256, 128, 4, 2), {}),  # block_k 128: rows wider than the 128B swizzle
        ((128, 256, 64, 1, 2), {}),  # one stage
        ((128, 200, 64, 4, 2), {}),  # block_n not a multiple of 16
        ((192, 256, 64, 4, 2), {}),  # 96 rows per consumer
        ((256, 256, 64, 4, 2), {}),  # 256 accumulators per thread
        ((128, 256, 64, 4, 2), {"cluster_m": 4}),
    ],
)
def test_invalid_configs(args, kwargs):
    with pytest.raises(ValueError):
        make_source(*args, **kwargs)


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("variant", ["ws_128x256x64_s4_c2_p", "v2_128x128x64_s4"])
def test_prototype_matches_reference_on_gpu(variant):
    import torch

    from bench.prototypes import harness
    from tilus.runtime import driver

    driver.ensure_context(torch.cuda.current_device())
    built = harness.Built(variant)
    for m, n, k in [(1128, 1048, 1032), (512, 256, 64)]:
        assert harness.check(built.launcher, m, n, k, torch) < 1e-2
