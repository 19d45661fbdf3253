"""The user-facing layout functions against hand-worked examples and the mma atoms."""

import pytest

from tilus.errors import LayoutOperationError
from tilus.ir.layout import (
    Swizzle,
    auto_local_spatial,
    column_local,
    column_spatial,
    compose,
    concat,
    divide,
    flatten,
    local,
    permute,
    reduce,
    register_layout,
    replicated,
    reshape,
    same_layout,
    shared_column_major,
    shared_compose,
    shared_permute,
    shared_row_major,
    shared_row_major_swizzle,
    shared_slice,
    spatial,
    squeeze,
    swizzle_of,
    unsqueeze,
)
from tilus.ir.layout.register import mma_a, mma_b, mma_c


def table(layout):
    """{(thread, register): element} of a layout, by enumeration."""
    return {
        (t, i): layout.coords(t, i)
        for t in range(layout.num_threads)
        for i in range(layout.local_size)
    }


def test_primitives_by_hand():
    s = spatial(2, 3)  # thread = row-major over (i, j)
    assert [s.get_global(t, 0) for t in range(6)] == [
        (0, 0),
        (0, 1),
        (0, 2),
        (1, 0),
        (1, 1),
        (1, 2),
    ]
    c = column_spatial(2, 3)  # thread = i + 2 j
    assert [c.get_global(t, 0) for t in range(6)] == [
        (0, 0),
        (1, 0),
        (0, 1),
        (1, 1),
        (0, 2),
        (1, 2),
    ]
    assert same_layout(c, spatial(2, 3, ranks=[1, 0]))
    lc = column_local(2, 3)
    assert [lc.get_global(0, i) for i in range(3)] == [(0, 0), (1, 0), (0, 1)]
    assert local(2, 3).num_threads == 1 and local(2, 3).local_size == 6
    r = replicated(2, 2, num_workers=4)
    assert all(r.get_spatial((1, 1)) == [0, 1, 2, 3] for _ in range(1))
    assert (r.spatial_size, r.local_size, r.size) == (4, 4, 4)


def test_compose_and_chaining():
    lay = local(2, 1).spatial(2, 4)  # each thread: rows i and i+2 of a [4, 4] tile
    assert lay.shape == (4, 4) and lay.num_threads == 8 and lay.local_size == 2
    assert lay.get_global(5, 0) == (1, 1) and lay.get_global(5, 1) == (3, 1)
    assert lay == compose(local(2, 1), spatial(2, 4)) == local(2, 1) * spatial(2, 4)
    a, b, c = spatial(2, 1), local(1, 2), spatial(2, 2)
    assert (a * b) * c == a * (b * c)  # associative
    assert local(2) * spatial(4) != spatial(4) * local(2)  # not commutative
    # ranks are unified by prepending size-1 dims
    assert compose(local(3), spatial(2, 4)).shape == (2, 12)


def test_mma_atoms_of_the_spec():
    # spec 5.1: A = column_local(2,2).spatial(8,4).local(1,2), B and C likewise
    a = column_local(2, 2).spatial(8, 4).local(1, 2)
    b = local(2, 1).column_spatial(4, 8).local(2, 1)
    c = local(2, 1).spatial(8, 4).local(1, 2)
    assert table(a) == table(mma_a(16, 16, 1, 1))
    assert table(b) == table(mma_b(16, 8, 1, 1))
    assert table(c) == table(mma_c(16, 8, 1, 1))
    # PTX ISA m16n8k16 C fragment: c{r} of lane l at (l/4 + 8*(r/2), 2*(l%4) + r%2)
    for lane in range(32):
        for r in range(4):
            assert c.get_global(lane, r) == (lane // 4 + 8 * (r // 2), 2 * (lane % 4) + r % 2)
    # dot tiles: spatial(warps).local(reps) * atom
    tile = spatial(2, 2).local(2, 1) * c
    assert tile.shape == (64, 16) and tile.num_threads == 128
    assert table(tile) == table(mma_c(64, 16, 2, 2))


def test_modes_and_register_layout_roundtrip():
    c = local(2, 1).spatial(8, 4).local(1, 2)
    assert c.mode_shape == [2, 8, 4, 2]
    assert c.spatial_modes == [1, 2] and c.local_modes == [0, 3]
    assert register_layout([16, 8], [2, 8, 4, 2], [1, 2], [0, 3]) == c
    rep = register_layout([4, 8], [4, 8], [-2, 1], [0])  # 2 copies of spatial(8) over rows
    assert rep.num_threads == 16 and rep.get_spatial((3, 5)) == [5, 13]
    assert rep.get_local((3, 5)) == 3
    with pytest.raises(LayoutOperationError):
        register_layout([4, 8], [4, 8], [1], [])  # mode 0 unused
    with pytest.raises(LayoutOperationError):
        register_layout([4, 8], [3, 8], [1], [0])


def test_get_spatial_local_inverse_of_get_global():
    lay = column_local(2, 2).spatial(8, 4).local(1, 2)
    for t in range(lay.num_threads):
        for i in range(lay.local_size):
            g = lay.get_global(t, i)
            assert lay.get_spatial(g) == [t] and lay.get_local(g) == i


def test_divide():
    c = local(2, 1).spatial(8, 4).local(1, 2)
    assert divide(c, local(1, 2)) == local(2, 1).spatial(8, 4)
    assert c / spatial(8, 4).local(1, 2) == local(2, 1)
    merged = local(8)  # local(2) * local(4) canonicalizes to local(8)
    assert merged / local(4) == local(2)
    with pytest.raises(LayoutOperationError):
        divide(c, spatial(4, 8))
    with pytest.raises(LayoutOperationError):
        divide(spatial(4), local(4))


def test_reshape_flatten_squeeze_unsqueeze_permute():
    lay = local(2, 2).spatial(4, 8)  # [8, 16]
    r = reshape(lay, [8, 2, 8])
    for t in range(lay.num_threads):
        for i in range(lay.local_size):
            a, b = lay.get_global(t, i), r.get_global(t, i)
            assert a[0] * 16 + a[1] == (b[0] * 2 + b[1]) * 8 + b[2]
    assert flatten(lay).shape == (128,)
    assert reshape(flatten(lay), [8, 16]) == lay
    u = unsqueeze(spatial(4, 8), [0])
    assert u.shape == (1, 4, 8) and squeeze(u, [0]) == spatial(4, 8)
    with pytest.raises(LayoutOperationError):
        squeeze(spatial(4, 8), [0])
    with pytest.raises(LayoutOperationError):
        reshape(local(2).spatial(3), [3, 2])  # the local mode (stride 3) straddles rows
    assert reshape(spatial(4, 8), [8, 4]) == reshape(spatial(32), [8, 4])
    p = permute(spatial(2, 3), [1, 0])
    assert p.shape == (3, 2) and p == column_spatial(3, 2)


def test_reduce_concat_auto():
    lay = spatial(4, 8).local(1, 2)  # [4, 16]
    red = reduce(lay, [1])
    assert red.shape == (4,) and red.get_spatial((2,)) == list(range(16, 24))
    kept = reduce(lay, [1], keepdims=True)
    assert kept.shape == (4, 1) and kept.local_size == 1
    cat = concat(spatial(2), local(3))
    assert cat.shape == (2, 3) and cat == spatial(2, 1) * local(1, 3)
    a = auto_local_spatial(128, [32, 64])
    assert a.num_threads == 128 and a == local(16, 1).spatial(2, 64)
    assert auto_local_spatial(64, [4]).get_spatial((1,)) == list(range(1, 64, 4))


def test_visualize():
    text = spatial(2, 2).local(1, 2).visualize()
    lines = text.splitlines()
    assert lines[0].startswith("RegisterLayout(shape=[2, 4]")
    assert lines[1].split() == ["0:0", "0:1", "1:0", "1:1"]
    assert lines[2].split() == ["2:0", "2:1", "3:0", "3:1"]
    assert "+" in replicated(2, 2, num_workers=2).visualize()


def test_shared_layouts():
    rm = shared_row_major(4, 8, dtype_nbytes=4)
    assert rm.offset((1, 2)) == (8 + 2) * 4
    cm = shared_column_major(4, 8, dtype_nbytes=4)
    assert cm.offset((1, 2)) == (2 * 4 + 1) * 4
    assert shared_permute(rm, [1, 0]).offset((2, 1)) == rm.offset((1, 2))
    assert shared_permute(shared_permute(cm, [1, 0]), [1, 0]) == cm
    sw = shared_row_major_swizzle((16, 64), 2)  # 128-byte rows: Swizzle<3, 4, 3> on bytes
    assert swizzle_of(sw) == Swizzle(3, 3, 3)
    byte = swizzle_of(sw).to_byte_swizzle(2)
    assert byte == Swizzle(4, 3, 3)
    for r in range(16):
        for c in range(64):
            assert sw.offset((r, c)) == byte((r * 64 + c) * 2)
    assert swizzle_of(shared_row_major_swizzle((8, 16), 2)) == Swizzle(3, 1, 3)  # 32 bytes
    with pytest.raises(LayoutOperationError):
        shared_row_major_swizzle((8, 12), 2)
    stacked = shared_compose(shared_row_major(3, 1, 1), sw)
    assert stacked.shape == (3, 16, 64) and shared_slice(stacked, 1) == sw
    assert stacked.offset((1, 0, 0)) == 16 * 64 * 2
    with pytest.raises(LayoutOperationError):
        shared_compose(shared_row_major(2, 2), sw)
