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
