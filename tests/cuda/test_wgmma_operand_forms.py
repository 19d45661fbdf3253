"""wgmma shared operands beyond one 128-byte row: K rows in column blocks and MN-major B."""

from __future__ import annotations

import numpy as np
import pytest

import tilus
from tests.cuda.conftest import needs_gpu, needs_nvrtc
from tilus import float16, float32, int32
from tilus.backends.cuda.ptx.wgmma import MNMajorTile, SmemDescriptor


class WideK(tilus.Script):
    """``C = A @ B`` for one [64, n] tile: A [64, k] K-major (k * 2 bytes per row, in 128-byte
    column blocks when k > 64), B [k, n] with N contiguous (an MN-major operand)."""

    def __init__(self, k=128, n=128):
        super().__init__()
        self.k = k
        self.n = n

    def __call__(self, m: int32, a_ptr: ~float16, b_ptr: ~float16, c_ptr: ~float32):
        self.attrs.blocks = 1
        self.attrs.warps = 4
        k, n = self.k, self.n
        ga = self.global_view(a_ptr, dtype=float16, shape=[m, k])
        gb = self.global_view(b_ptr, dtype=float16, shape=[k, n])
        gc = self.global_view(c_ptr, dtype=float32, shape=[m, n])
        sa = self.shared_tensor(dtype=float16, shape=[64, k])
        sb = self.shared_tensor(dtype=float16, shape=[k, n])
        bar = self.mbarrier.alloc([1])
        with self.single_thread():
            self.mbarrier.arrive_and_expect_tx(bar[0], transaction_bytes=sa.nbytes + sb.nbytes)
            self.tma.global_to_shared(src=ga, dst=sa, offsets=[0, 0], mbarrier=bar[0])
            self.tma.global_to_shared(src=gb, dst=sb, offsets=[0, 0], mbarrier=bar[0])
        self.mbarrier.wait(bar[0], phase=0)
        acc = self.register_tensor(dtype=float32, shape=[64, n], init=0.0)
        self.wgmma.fence()
        self.wgmma.mma(sa, sb, acc)
        self.wgmma.commit_group()
        self.wgmma.wait_group(0)
        self.store_global(gc, acc, offsets=[0, 0])


def _inputs(m, k, n):
    rng = np.random.default_rng()
    a = rng.uniform(-1, 1, (m, k)).astype(np.float16)
    b = rng.uniform(-1, 1, (k, n)).astype(np.float16)
    return a, b, a.astype(np.float64) @ b.astype(np.float64)


def test_mn_major_descriptor_fields():
    t = MNMajorTile(rows=128, cols=128)  # two 64-wide N blocks of 128 K rows
    d = SmemDescriptor.decode(t.high_bits())
    assert (d.lbo, d.sbo, d.swizzle) == (128 * 128, 1024, 128)
    assert t.k_offset(16) == 2048
    with pytest.raises(ValueError):
        MNMajorTile(rows=12, cols=64)


@pytest.mark.parametrize("k, n", [(128, 128), (64, 64), (256, 64)])
def test_interpreter(k, n):
    a, b, ref = _inputs(50, k, n)
    c = np.full((50, n), np.nan, dtype=np.float32)
    with tilus.option.scoped(interpret=True):
        WideK(k, n)(50, a, b, c)
    assert np.max(np.abs(c - ref)) < 1e-2


@needs_nvrtc
def test_codegen_steps_over_column_blocks_and_transposes_b():
    ck = tilus.compile(WideK(128, 128), 50, float16, float16, float32)
    ck = ck[0] if isinstance(ck, list) else ck
    src = ck.source
    assert "_ss_t01(" in src  # imm-trans-b = 1: B is MN-major
    # A: the K steps 0..3 in the first column block, 4..7 in the second (64 rows x 128 bytes
    # on); a step's descriptor is the tile's plus its offset in 16-byte units
    assert "+ 6u)" in src and "+ 512u)" in src  # 96 and 8192 bytes
    # B: one 16-row K step is 2048 bytes; LBO = the second N block, 128 rows x 128 bytes on
    assert "+ 128u)" in src and f"{MNMajorTile(128, 128).high_bits():#x}ull" in src
    assert ck.resources["spill_store_bytes"] == 0


@needs_gpu
@pytest.mark.gpu
@pytest.mark.parametrize("k, n", [(128, 128), (64, 64), (256, 64), (64, 256)])
def test_gpu_matches_numpy(k, n):
    import torch

    a, b, ref = _inputs(50, k, n)
    c = torch.full((50, n), float("nan"), device="cuda")
    WideK(k, n)(50, torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda(), c)
    assert np.max(np.abs(c.cpu().numpy() - ref)) < 1e-2
