"""ldmatrix for mma.sync fragments: the addresses each lane gives deliver every thread the
elements its fragment layout says (a model of ldmatrix's distribution, on CPU)."""

from __future__ import annotations

import pytest

from tilus.backends.cuda.codegen.ldmatrix import LdmatrixPlan, plan_for
from tilus.ir.layout.register import blocked, mma_a, mma_b, permute, wgmma_acc


def _lane_coords(layout, plan, tid, w0, x):
    """The tile coordinates of the row that thread ``tid`` gives to its ldmatrix (what the
    generated code computes)."""
    lane = tid & 31
    j = {1: 0, 2: (lane >> 3) & 1, 4: lane >> 3}[x]
    src, e = LdmatrixPlan.source(plan.trans, lane & 7)
    t = (tid & ~31) | src
    return layout.coords(t, (w0 + j) * plan.pack + e)


def _check(layout, elem_bits):
    plan = plan_for(layout, elem_bits)
    assert plan is not None
    p = plan.pack
    assert sum(x for _, x in plan.groups) * p == layout.local_size
    for w0, x in plan.groups:
        for warp in range(layout.num_threads // 32):
            rows = {lane: _lane_coords(layout, plan, 32 * warp + lane, w0, x) for lane in range(32)}
            for lane in range(32):
                tid = 32 * warp + lane
                for q in range(x):
                    for e in range(p):
                        want = layout.coords(tid, (w0 + q) * p + e)
                        if plan.trans:  # rows 2(l%4)+e of matrix q, column l/4
                            r0 = rows[8 * q + 2 * (lane % 4) + e]
                            got = (r0[0], r0[1] + lane // 4)
                        else:  # word l%4 of row l/4 of matrix q
                            r0 = rows[8 * q + lane // 4]
                            got = (r0[0], r0[1] + (lane % 4) * p + e)
                        assert got == want, (w0, q, lane, e)


@pytest.mark.parametrize("pack, bits", [(1, 32), (2, 16), (4, 8)])
@pytest.mark.parametrize(
    "m, k, wm, wn, nw", [(64, 64, 2, 2, 4), (32, 32, 1, 1, 1), (64, 32, 4, 1, 8)]
)
def test_a_fragments(pack, bits, m, k, wm, wn, nw):
    _check(mma_a(m, k * pack // 2, wm, wn, nw, pack), bits)


@pytest.mark.parametrize(
    "k, n, wm, wn, nw", [(32, 64, 2, 2, 4), (16, 8, 1, 1, 1), (16, 24, 1, 1, 2)]
)
def test_b_fragments_transposed(k, n, wm, wn, nw):
    _check(mma_b(k, n, wm, wn, nw, 2), 16)


def test_a_transposed_b_fragment_loads_without_trans():
    # V0's b.transpose() of an [N, K] tile: rows are N, K contiguous
    lo = permute(mma_b(32, 64, 2, 2, 4, 2), (1, 0))
    assert not plan_for(lo, 16).trans
    _check(lo, 16)


def test_a_16_bit_wgmma_accumulator_layout_is_an_a_fragment_too():
    _check(wgmma_acc(128, 64), 16)


def test_other_layouts_load_element_wise():
    assert plan_for(mma_b(32, 64, 2, 2, 4, 4), 8) is None  # .trans is b16 only
    assert plan_for(blocked((64, 64), 128, 8), 16) is None
    assert plan_for(blocked((64, 64), 128), 16) is None
