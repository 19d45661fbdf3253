"""Build options: PTX kept on request, beside the cubin in the inspectable cache entry."""

from __future__ import annotations

import pytest

pytest.importorskip("cuda.bindings")

import tilus  # noqa: E402
from tilus import float32, int32  # noqa: E402


class Scale(tilus.Script):
    def __call__(self, n: int32, x_ptr: ~float32, y_ptr: ~float32):
        self.attrs.blocks = (n + 127) // 128
        self.attrs.warps = 4
        gx = self.global_view(x_ptr, dtype=float32, shape=[n])
        gy = self.global_view(y_ptr, dtype=float32, shape=[n])
        x = self.load_global(gx, offsets=[self.blockIdx.x * 128], shape=[128])
        self.store_global(gy, x * 2.0, offsets=[self.blockIdx.x * 128])


def test_keep_ptx_stores_the_ptx(tmp_path):
    with tilus.option.scoped(cache_dir=str(tmp_path), keep_ptx=True):
        ck = tilus.compile(Scale(), 1000, tilus.float32, tilus.float32)
    assert ck.ptx is not None and ".entry" in ck.ptx
    files = {p.name for p in tmp_path.rglob("*") if p.is_file()}
    assert {"kernel.cu", "kernel.cubin", "kernel.ptx", "meta.json"} <= files


def test_no_ptx_by_default(tmp_path):
    with tilus.option.scoped(cache_dir=str(tmp_path)):
        ck = tilus.compile(Scale(), 1000, tilus.float32, tilus.float32)
    assert ck.ptx is None
    assert not any(p.name == "kernel.ptx" for p in tmp_path.rglob("*"))


class RowCopy(tilus.Script):
    def __call__(self, m: int32, k: int, x_ptr: ~tilus.float16):
        self.attrs.blocks = 1
        self.attrs.warps = 4
        gx = self.global_view(x_ptr, dtype=tilus.float16, shape=[m, k])
        sx = self.shared_tensor(dtype=tilus.float16, shape=[64, 64])
        bar = self.mbarrier.alloc(counts=[1])
        with self.single_thread():
            self.mbarrier.arrive_and_expect_tx(bar[0], transaction_bytes=sx.nbytes)
            self.tma.global_to_shared(src=gx, dst=sx, offsets=[0, 0], mbarrier=bar[0])  # TMA
        self.mbarrier.wait(bar[0], phase=0)


def test_misaligned_tma_stride_is_a_compile_error_at_the_line():
    from tilus.testing import marker_line

    with pytest.raises(tilus.TilusCompileError, match="multiple of 16 bytes") as info:
        tilus.compile(RowCopy(), 128, 100, tilus.float16)
    assert info.value.loc.line == marker_line(RowCopy, "# TMA")
    assert "200 bytes" in str(info.value)
    tilus.compile(RowCopy(), 128, 104, tilus.float16)  # 208-byte rows are fine
