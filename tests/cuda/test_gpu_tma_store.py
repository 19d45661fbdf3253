"""CUDA backend on a Hopper GPU: TMA stores waited for in a later single_thread block."""

from __future__ import annotations

import pytest

from tests.cuda.conftest import needs_gpu
from tests.test_interp_bulk_groups import TileStores

pytestmark = [pytest.mark.gpu, needs_gpu]


@pytest.mark.parametrize("rows", [64, 200, 4096 + 8])
def test_tile_stores_with_deferred_waits(rows):
    import torch

    x = torch.randn(rows, 64, device="cuda", dtype=torch.float16)
    y = torch.full_like(x, float("nan"))
    TileStores()(rows, x, y)
    torch.cuda.synchronize()
    assert torch.equal(x, y)
