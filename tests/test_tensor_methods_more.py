"""``.tolist()`` of register tiles and ``.item()`` of one-element shared and global tiles."""

from __future__ import annotations

import numpy as np
import pytest

import tilus
from tests.cuda.conftest import needs_nvrtc
from tests.helpers_cpu_cuda import available, emulate
from tilus import float32, int32

needs_gxx = pytest.mark.skipif(not available(), reason="needs g++ for the CPU emulator")


class Items(tilus.Script):
    """out[0] = sum of x[0, :3] via tolist; out[1] = x[1, 2] via a shared element; out[2] =
    x[i, j] via a global element at a runtime position."""

    def __call__(self, x_ptr: ~float32, o_ptr: ~float32, i: int32, j: int32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        gx = self.global_view(x_ptr, dtype=float32, shape=[4, 5])
        x = self.load_global(gx, offsets=[0, 0], shape=[1, 3])
        a, b, c = x.tolist()[0]
        s = self.shared_tensor(dtype=float32, shape=[4, 8])
        self.store_shared(s, self.load_global(gx, offsets=[0, 0], shape=[4, 8]))
        self.sync()
        v = s[1, 2].item()
        w = gx[i, j].item()
        out = self.register_tensor(dtype=float32, shape=[3], init=lambda k: 0.0)
        out[0] = a + b + c
        out[1] = v
        out[2] = w
        self.store_global(self.global_view(o_ptr, dtype=float32, shape=[3]), out, offsets=[0])


def _check(run):
    x = np.random.default_rng().standard_normal((4, 5)).astype(np.float32)
    o = np.full(3, np.nan, np.float32)
    run(x, o, 3, 4)
    np.testing.assert_allclose(o, [x[0, :3].sum(), x[1, 2], x[3, 4]], rtol=1e-6)


def test_interpreter():
    with tilus.option.scoped(interpret=True):
        _check(Items())


@needs_nvrtc
@needs_gxx
def test_cuda_emulator():
    _check(lambda *a: emulate(Items(), list(a), [1]))
