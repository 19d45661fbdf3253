"""``left_divide``, ``reduce_to`` and ``locate_at`` of register layouts, on hand-worked cases."""

from __future__ import annotations

import pytest

from tilus.errors import LayoutOperationError
from tilus.ir.layout import (
    column_spatial,
    compose,
    left_divide,
    local,
    locate_at,
    reduce_to,
    replicated,
    same_layout,
    spatial,
)

MMA_C = local(2, 1).spatial(8, 4).local(1, 2)  # rows r, r + 8; two columns per thread


def test_left_divide_peels_the_outer_part():
    assert same_layout(left_divide(MMA_C, local(2, 1)), spatial(8, 4).local(1, 2))
    assert same_layout(left_divide(MMA_C, local(2, 1).spatial(8, 4)), local(1, 2))
    # spatial(2, 1) * spatial(2, 8): the outer row digit is the thread's top digit
    assert same_layout(left_divide(spatial(4, 8), spatial(2, 1)), spatial(2, 8))
    assert same_layout(
        left_divide(local(2, 2).spatial(4, 8), local(2, 1)), local(1, 2).spatial(4, 8)
    )


@pytest.mark.parametrize(
    "outer, inner",
    [
        (spatial(2, 2), local(2, 4).spatial(4, 8)),
        (local(3, 1), column_spatial(4, 8).local(1, 2)),
        (replicated(1, 1, num_workers=2), spatial(8, 4)),
    ],
)
def test_left_divide_undoes_compose(outer, inner):
    assert same_layout(left_divide(compose(outer, inner), outer), inner)


@pytest.mark.parametrize(
    "layout, divisor",
    [
        (spatial(4, 8), spatial(2, 2)),  # the thread digits interleave the other way
        (spatial(4, 8), spatial(2)),  # a rank-1 divisor is the column dim: not outermost
        (spatial(4, 8), local(2, 1)),  # no local part to peel
        (spatial(4, 8), spatial(3, 1)),  # does not divide the shape
    ],
)
def test_left_divide_refuses_a_non_divisor(layout, divisor):
    with pytest.raises(LayoutOperationError):
        left_divide(layout, divisor)


def test_reduce_to_keeps_what_each_thread_reads():
    cols = reduce_to(spatial(4, 8).local(2, 1), [1, 8])
    assert cols.shape == (1, 8) and cols.local_size == 1 and cols.num_threads == 32
    for j in range(8):
        assert sorted(cols.get_spatial([0, j])) == [j, 8 + j, 16 + j, 24 + j]
    flat = reduce_to(spatial(4, 8), [8])  # a missing leading dim is reduced away
    assert flat.shape == (8,)
    assert sorted(flat.get_spatial([5])) == [5, 13, 21, 29]
    rows = reduce_to(MMA_C, [16, 1])
    assert rows.shape == (16, 1) and rows.local_size == 2
    assert sorted(rows.get_spatial([3, 0])) == [12, 13, 14, 15]
    assert sorted(rows.get_spatial([11, 0])) == [12, 13, 14, 15]
    assert same_layout(reduce_to(MMA_C, [16, 8]), MMA_C)


@pytest.mark.parametrize("shape", [[4, 4], [2, 4, 8], [3, 8]])
def test_reduce_to_refuses_a_shape_that_does_not_broadcast(shape):
    with pytest.raises(LayoutOperationError, match="does not broadcast"):
        reduce_to(spatial(4, 8), shape)


def test_locate_at():
    assert locate_at(spatial(4, 8), [1, 2], 10)
    assert not locate_at(spatial(4, 8), [1, 2], 11)
    # row 9 = second local row of r = 1; column 5 = second column of c = 2: thread 1 * 4 + 2
    assert locate_at(MMA_C, [9, 5], 6)
    assert not any(locate_at(MMA_C, [9, 5], t) for t in range(32) if t != 6)
    cols = reduce_to(spatial(4, 8), [1, 8])  # every replica holds it
    assert [t for t in range(32) if locate_at(cols, [0, 3], t)] == [3, 11, 19, 27]
    with pytest.raises(LayoutOperationError):
        locate_at(spatial(4, 8), [1], 0)
