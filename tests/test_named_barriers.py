"""Named barriers (``sync_named`` / ``arrive_named``): ping-pong order, misuse, CUDA code."""

from __future__ import annotations

import numpy as np
import pytest
from named_barrier_kernels import BadUse, PingPong

import tilus
from tests.cuda.conftest import needs_gpu
from tilus.testing import marker_line


def _run(kernel, turns=3):
    out = np.full((2 * turns, 128), -1, dtype=np.int32)
    kernel(out)
    return out


@pytest.mark.parametrize("seed", [None, 0, 1, 2, 3])
def test_ping_pong_alternates_under_every_schedule(seed):
    with tilus.option.scoped(schedule_seed=seed):
        out = _run(PingPong("none", 3))
    assert (out == np.arange(6)[:, None]).all(), out[:, 0]


def _raises(kernel, cls, fragment, marker):
    with pytest.raises(cls) as info:
        _run(kernel)
    err = info.value
    assert fragment in str(err), str(err)
    assert err.loc is not None and err.loc.line == marker_line(PingPong, marker)
    return err


@pytest.mark.parametrize(
    "bug, fragment",
    [
        ("wrong_count", "every use of one round must give the same count"),
        ("overshoot", "more threads arrive than the barrier's count"),
    ],
)
def test_misuse_is_reported_at_its_line(bug, fragment):
    _raises(PingPong(bug), tilus.TilusRuntimeError, fragment, f"BUG:{bug}")


def test_a_missing_arrival_is_a_deadlock_naming_the_barrier():
    with pytest.raises(tilus.TilusRuntimeError) as info:
        _run(PingPong("no_arrive"))
    text = str(info.value)
    assert "deadlock" in text and "named barrier 1" in text, text
    assert "128 of 256 threads arrived" in text, text


@pytest.mark.parametrize(
    "bug, fragment",
    [
        ("id0", "in [1, 15]"),
        ("odd_count", "multiple of 32"),
        ("too_many", "exceeds the block's 256 threads"),
        ("fewer_than_group", "fewer than the 256 threads"),
        ("single", "whole warps"),
    ],
)
def test_bad_use_is_refused_at_its_line(bug, fragment):
    with pytest.raises(tilus.TilusProgramError) as info:
        _run(BadUse(bug))
    assert fragment in str(info.value), str(info.value)
    assert info.value.loc.line == marker_line(BadUse, f"BUG:{bug}")


def test_cuda_code_uses_the_ids_and_sync_avoids_them():
    from tilus.backends.cuda.codegen import generate

    kernel = PingPong("none", 3)
    src = generate(kernel.program(kernel.configs[0], {})).source
    assert "tl_bar_sync(1, 256);" in src and "tl_bar_arrive(2, 256);" in src
    assert "tl_bar_sync(2, 256);" in src and "tl_bar_arrive(1, 256);" in src
    # sync() inside a warp group takes a free id, not 1 or 2
    assert "tl_bar_sync(3, 128);" in src, src


@needs_gpu
@pytest.mark.gpu
def test_gpu_ping_pong_alternates():
    import torch

    out = torch.full((2 * 5, 128), -1, dtype=torch.int32, device="cuda")
    PingPong("none", 5)(out)
    torch.cuda.synchronize()
    assert (out.cpu().numpy() == np.arange(10)[:, None]).all(), out[:, 0]
