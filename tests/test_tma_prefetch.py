"""tma.prefetch (cp.async.bulk.prefetch.tensor into L2): a no-op on the interpreter, the load's box
and tensor map in CUDA (one prefetch per column block), refusals at the user's line."""

from __future__ import annotations

import numpy as np
import pytest

import tilus
from tests.cuda.conftest import needs_nvrtc
from tilus import float16, float32, int32
from tilus.testing import marker_line


class Prefetched(tilus.Script):
    """Copies [n, k] through a ring of one TMA slot, prefetching the next tile into L2 first."""

    def __init__(self, k_tile, case="ok"):
        super().__init__()
        self.k_tile = k_tile
        self.case = case

    def __call__(self, n: int32, k: int, x: ~float16, y: ~float16):
        self.attrs.blocks = 1
        self.attrs.warps = 4
        kt = self.k_tile
        gx = self.global_view(x, dtype=float16, shape=[n, k])
        gy = self.global_view(y, dtype=float16, shape=[n, k])
        s = self.shared_tensor(dtype=float16, shape=[64, kt])
        bars = self.mbarrier.alloc(counts=[1])
        phase: int32 = 0
        for r in self.range(0, n, 64):
            for c in self.range(0, k, kt):
                with self.single_thread():
                    self.tma.prefetch(src=gx, like=s, offsets=[r, c + kt])  # past the end: fine
                    self.mbarrier.arrive_and_expect_tx(bars[0], transaction_bytes=s.nbytes)
                    self.tma.global_to_shared(src=gx, dst=s, offsets=[r, c], mbarrier=bars[0])
                self.mbarrier.wait(bars[0], phase=phase)
                phase ^= 1
                self.store_global(gy, self.load_shared(s), offsets=[r, c])
                self.sync()
        if self.case == "group":
            self.tma.prefetch(src=gx, like=s, offsets=[0, 0])  # GROUP
        if self.case == "dtype":
            t = self.shared_tensor(dtype=float32, shape=[64, 32])
            with self.single_thread():
                self.tma.prefetch(src=gx, like=t, offsets=[0, 0])  # DTYPE
        if self.case == "box":
            t = self.shared_tensor(dtype=float16, shape=[512, 64])
            with self.single_thread():
                self.tma.prefetch(src=gx, like=t, offsets=[0, 0])  # BOX


def test_interpreter_treats_it_as_a_hint():
    x = np.random.default_rng(0).standard_normal((100, 136)).astype(np.float16)
    y = np.full_like(x, np.nan)
    with tilus.option.scoped(interpret=True):
        Prefetched(64)(100, 136, x, y)
    np.testing.assert_array_equal(y, x)


@pytest.mark.parametrize(
    "case, marker, text",
    [
        ("group", "# GROUP", "tma.prefetch must be issued by one thread"),
        (
            "dtype",
            "# DTYPE",
            "tma.prefetch: global tensor is float16 but the shared tile is float32",
        ),
        ("box", "# BOX", "tma.prefetch: tile dim 0 is 512 elements, over the TMA box"),
    ],
)
def test_refusals_name_the_line(case, marker, text):
    x = np.zeros((64, 64), np.float16)
    with pytest.raises(tilus.TilusProgramError) as info:
        with tilus.option.scoped(interpret=True):
            Prefetched(64, case)(64, 64, x, x.copy())
    assert text in info.value.msg
    assert info.value.loc.line == marker_line(Prefetched, marker)


@needs_nvrtc
def test_cuda_uses_the_load_map_once_per_column_block():
    # a 128-wide K tile of fp16 is two 128-byte column blocks: two loads, two prefetches
    ck = tilus.compile(Prefetched(128), 100, 256, float16, float16)
    ck = ck[0] if isinstance(ck, list) else ck
    src = ck.source
    assert "cp.async.bulk.prefetch.tensor.2d.L2.global.tile" in src
    loads = [ln for ln in src.splitlines() if "tl_tma_load_2d(tl_smem" in ln]
    pre = [ln for ln in src.splitlines() if "tl_tma_prefetch_2d(&tl_map" in ln]
    assert len(loads) == 2 and len(pre) == 2
    assert {ln.split("&tl_map")[1][0] for ln in pre} == {ln.split("&tl_map")[1][0] for ln in loads}
