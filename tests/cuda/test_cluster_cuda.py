"""Thread-block clusters on the CUDA backend: generated code and SASS (compile-only), and on a
Hopper GPU the results of the interpreter on random inputs (NaN-poisoned outputs)."""

from __future__ import annotations

import re
from collections import Counter

import pytest

import tilus
from tests.cluster_kernels import (
    ClusterGrid,
    ClusterMatmul,
    ClusterMatmulWgmma,
    MulticastCopy,
    RemoteArrive,
)
from tests.cuda.conftest import needs_gpu, needs_nvrtc
from tests.helpers_errors import err_line
from tilus import float16, float32, int32


def _ops(sass: str) -> Counter:
    """Full SASS opcodes with their modifiers (``UTMALDG.2D.MULTICAST``), by count."""
    return Counter(
        re.findall(r"\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*(?:\.[A-Za-z0-9_]+)*)", sass)
    )


def _build(kernel, *args, target="sm_90a"):
    ck = tilus.compile(kernel, *args, target=target)
    return ck[0] if isinstance(ck, list) else ck


@needs_nvrtc
def test_multicast_copy_lowers_to_cluster_barriers_and_multicast_tma():
    ck = _build(MulticastCopy(), 100, float16, float16)
    assert "__cluster_dims__(2, 1, 1)" in ck.source
    ops = _ops(ck.sass())
    assert ops["UCGABAR_ARV"] >= 2 and ops["UCGABAR_WAIT"] >= 2, ops  # entry + two syncs
    assert ops["UTMALDG.2D.MULTICAST"] >= 1, ops


@needs_nvrtc
@pytest.mark.parametrize("form", ["mapa", "mapa_scalar", "remote"])
def test_remote_arrives_lower_to_mapa_and_cluster_arrives(form):
    ck = _build(RemoteArrive(form), 3, int32)
    assert "tl_mapa(" in ck.source and "mapa.shared::cluster.u32" in ck.source
    assert ".cluster.shared::cluster.b64" in ck.source
    ops = _ops(ck.sass())
    # an arrive on a barrier of another block is the remote (RED) form of the arrive
    assert any(op.startswith("SYNCS.ARRIVE.TRANS64.RED") for op in ops), ops
    assert ops["UCGABAR_ARV"] >= 2, ops


@needs_nvrtc
def test_cluster_matmul_builds_for_sm90_without_spills():
    ck = _build(ClusterMatmul(), 200, 96, 80, float16, float16, float32, target="sm_90")
    ops = _ops(ck.sass())
    assert ops["UTMALDG.2D.MULTICAST"] >= 1 and ops["UTMALDG.2D"] >= 1, ops
    assert not any(op.startswith(("LDL", "STL")) for op in ops), ops


# two epilogue stores make ptxas serialize the wgmmas (a performance note, not this test's topic)
@pytest.mark.filterwarnings("ignore::tilus.errors.TilusPerformanceWarning")
@needs_nvrtc
def test_wgmma_cluster_matmul_multicasts_b():
    ck = _build(ClusterMatmulWgmma(), 200, 256, 136, float16, float16, float32)
    ops = _ops(ck.sass())
    assert ops["UTMALDG.2D.MULTICAST"] >= 1 and ops["UTMALDG.2D"] >= 1, ops
    assert any(op.startswith("HGMMA.64x64x16") for op in ops), ops
    assert ops["UCGABAR_WAIT"] >= 2, ops
    assert not any(op.startswith(("LDL", "STL")) for op in ops), ops


def test_clusters_on_an_older_target_are_refused_at_the_attribute():
    with pytest.raises(tilus.TilusCompileError) as info:
        tilus.compile(ClusterGrid(), 4, int32, target="sm_80")
    assert "thread-block clusters" in str(info.value) and "sm_90" in str(info.value)
    assert info.value.loc.line == err_line(ClusterGrid)


# --- on a Hopper GPU: the interpreter's results ----------------------------------------------


def _interp(kernel, *args):
    host = [a.cpu().clone() if hasattr(a, "cpu") else a for a in args]
    with tilus.option.scoped(interpret=True):
        kernel(*host)
    return host


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("rows", [100, 64 * 33 + 5])
def test_gpu_multicast_copy_matches_the_interpreter(rows):
    import torch

    x = torch.randn(rows, 64, device="cuda", dtype=torch.float16)
    nb = 2 * -(-rows // 64)
    y = torch.full((nb * 64, 64), float("nan"), device="cuda", dtype=torch.float16)
    want = _interp(MulticastCopy(), rows, x, y)[2]
    MulticastCopy()(rows, x, y)
    torch.cuda.synchronize()
    assert torch.equal(y.cpu(), want)


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("form", ["mapa", "mapa_scalar", "remote"])
def test_gpu_remote_arrives_match_the_interpreter(form):
    import torch

    out = torch.full((5, 2, 3), -1, device="cuda", dtype=torch.int32)
    want = _interp(RemoteArrive(form), 5, out)[1]
    RemoteArrive(form)(5, out)
    torch.cuda.synchronize()
    assert torch.equal(out.cpu(), want)


@pytest.mark.gpu
@needs_gpu
@pytest.mark.filterwarnings("ignore::tilus.errors.TilusPerformanceWarning")
@pytest.mark.parametrize("kernel", [ClusterMatmul, ClusterMatmulWgmma])
@pytest.mark.parametrize("m, n, k", [(200, 256, 80), (1000, 512, 264)])
def test_gpu_cluster_matmul_matches_the_interpreter_and_torch(kernel, m, n, k):
    import torch

    a = torch.randn(m, k, device="cuda", dtype=torch.float16)
    b = torch.randn(n, k, device="cuda", dtype=torch.float16)
    c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float32)
    want = _interp(kernel(), m, n, k, a, b, c)[5]
    kernel()(m, n, k, a, b, c)
    torch.cuda.synchronize()
    got = c.cpu()
    assert not torch.isnan(got).any()
    torch.testing.assert_close(got, want, rtol=1e-3, atol=1e-3)
    ref = (a.float() @ b.float().T).cpu()
    torch.testing.assert_close(got, ref, rtol=1e-3, atol=1e-3)


@pytest.mark.gpu
@needs_gpu
def test_gpu_grid_of_partial_clusters_is_refused_naming_the_argument():
    import torch

    out = torch.zeros(5, device="cuda", dtype=torch.int32)
    with pytest.raises(tilus.TilusArgumentError, match=r"\(from n=5\) is not a multiple"):
        ClusterGrid()(5, out)
    out = torch.full((6,), -1, device="cuda", dtype=torch.int32)
    ClusterGrid()(6, out)
    torch.cuda.synchronize()
    assert out.cpu().tolist() == [0, 1] * 3
