"""CUDA graphs on a Hopper GPU: tuned tilus kernels (and a tilus torch operator) captured with
``torch.cuda.CUDAGraph`` and replayed on new data; a first call inside a capture is refused."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import tilus  # noqa: E402
import tilus.torch  # noqa: E402
from tests.cuda.conftest import needs_gpu  # noqa: E402
from tilus import float32, int32  # noqa: E402
from tilus.utils import cdiv  # noqa: E402

pytestmark = [pytest.mark.gpu, needs_gpu]

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "hopper_matmul"


@tilus.autotune("block", [256, 512, 1024])
class GraphAxpy(tilus.Script):
    """``z = alpha * x + y`` over ``n`` elements."""

    def __init__(self, block):
        super().__init__()
        self.block = block

    def __call__(self, n: int32, alpha: float32, x_ptr: ~float32, y_ptr: ~float32, z_ptr: ~float32):
        self.attrs.blocks = cdiv(n, self.block)
        self.attrs.warps = 4
        off: int32 = self.blockIdx.x * self.block
        gx = self.global_view(x_ptr, dtype=float32, shape=[n])
        gy = self.global_view(y_ptr, dtype=float32, shape=[n])
        gz = self.global_view(z_ptr, dtype=float32, shape=[n])
        x = self.load_global(gx, offsets=[off], shape=[self.block])
        y = self.load_global(gy, offsets=[off], shape=[self.block])
        self.store_global(gz, x * alpha + y, offsets=[off])


axpy = tilus.torch.custom_op("tilus_gpu_tests::axpy", GraphAxpy(), outputs={"z_ptr": "x_ptr"})


def _capture(fn):
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up: compiles and tunes outside the capture
        fn()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph


def test_tuned_kernel_captured_and_replayed():
    n = 1_000_003
    x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    z = torch.full_like(x, float("nan"))
    kernel = GraphAxpy()
    graph = _capture(lambda: kernel(n, 0.5, x, y, z))
    assert len(kernel.configs) == 3
    for _ in range(3):  # new inputs in the same buffers, then one replay each
        x.copy_(torch.randn(n, device="cuda"))
        y.copy_(torch.randn(n, device="cuda"))
        z.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        torch.testing.assert_close(z, 0.5 * x + y)


def test_tma_matmul_captured_and_replayed():
    """The V4 example (TMA tensor maps as kernel parameters), tuned over two configs."""
    if str(EXAMPLES) not in sys.path:
        sys.path.insert(0, str(EXAMPLES))
    v4 = importlib.import_module("matmul_v4")
    kernel = v4.MatmulWGMMAV4(num_stages=3, block_k=64, swizzle=8)  # block_m, block_n tuned
    m, n, k = 1000, 1024, 512
    a = torch.randn(m, k, device="cuda", dtype=torch.float16)
    b = torch.randn(n, k, device="cuda", dtype=torch.float16)
    c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float16)
    graph = _capture(lambda: kernel(m, n, k, a, b, c))
    for _ in range(2):
        a.copy_(torch.randn(m, k, device="cuda", dtype=torch.float16))
        b.copy_(torch.randn(n, k, device="cuda", dtype=torch.float16))
        c.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        ref = a.float() @ b.float().T
        err = float((c.float() - ref).abs().max() / ref.abs().max())
        assert err < 1e-2, err


def test_torch_operator_in_a_captured_graph():
    n = 4097
    x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    out = {}

    def step():
        out["z"] = axpy(n, 2.0, x, y) + 1  # the output comes from the graph's memory pool

    graph = _capture(step)
    x.copy_(torch.randn(n, device="cuda"))
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(out["z"], 2.0 * x + y + 1)


def test_torch_compile_on_cuda_tensors():
    n = 10_000
    x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    f = torch.compile(lambda x, y: axpy(x.numel(), -1.0, x.cos(), y) * 2, backend="aot_eager")
    got = f(x, y)
    torch.testing.assert_close(got, (y - x.cos()) * 2)


def test_first_call_inside_a_capture_is_refused():
    n = 777
    x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    z = torch.empty_like(x)
    graph = torch.cuda.CUDAGraph()
    with pytest.raises(tilus.TilusRuntimeError, match="call it once with these arguments"):
        with torch.cuda.graph(graph):
            GraphAxpy()(n, 1.0, x, y, z)  # never called with n=777: it would tune here
