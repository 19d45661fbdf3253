"""On a GPU: CUDA-event benchmarking with the L2 flush, fingerprints, tuning CUDA tensors."""

import pytest

from tilus.tune import TuneWarning, benchmark, cuda_available, device_fingerprint, tune

pytestmark = pytest.mark.gpu


def test_fingerprint_names_the_gpu():
    fp = device_fingerprint()
    assert fp["device"] != "cpu-interpreter" and fp["compute_capability"]
    assert device_fingerprint(interpreter=True)["device"] == "cpu-interpreter"


def test_cuda_benchmark_and_l2_flush():
    import torch

    assert cuda_available()
    x = torch.randn(4 * 1024 * 1024, device="cuda")  # 16 MB: fits in L2
    y = torch.empty_like(x)
    warm = benchmark(lambda: y.copy_(x), warmup=5, repeat=50, flush_l2=False)
    cold = benchmark(lambda: y.copy_(x), warmup=5, repeat=50, flush_l2=True)
    print(f"16 MB copy: warm L2 {warm.median * 1e3:.1f} us, cold L2 {cold.median * 1e3:.1f} us")
    assert len(cold.samples) == 50 and 0 < cold.min <= cold.median < 10
    assert cold.median > warm.median  # cold-L2 reads are slower
    big = torch.randn(4096, 4096, device="cuda")
    slow = benchmark(lambda: big @ big, warmup=2, repeat=10)
    assert slow.median > cold.median


def test_tune_cuda_tensors():
    import torch

    def make():
        torch.manual_seed(0)
        a = torch.randn(1024, 1024, device="cuda", dtype=torch.float16)
        return [a, a.clone(), torch.empty(1024, 1024, device="cuda", dtype=torch.float16)]

    def mm(a, b, out):
        torch.matmul(a, b, out=out)

    def mm_slow(a, b, out):
        for _ in range(8):
            torch.matmul(a, b, out=out)

    def mm_wrong(a, b, out):
        out.zero_()

    with pytest.warns(TuneWarning, match='"v":2'):
        res = tune(
            [({"v": 0}, mm_slow), ({"v": 1}, mm), ({"v": 2}, mm_wrong)],
            make,
            outputs=[2],
            warmup=2,
            repeat=10,
        )
    assert res.winner == {"v": 1}
