"""Register and shared layouts (pure Python): completeness, fragment formulas, swizzles."""

from __future__ import annotations

import pytest

import tilus
from tilus import float16, float32
from tilus.backends.cuda.codegen import generate
from tilus.backends.cuda.layout import infer_layouts
from tilus.errors import TilusCompileError
from tilus.ir.layout import SharedLayout, blocked, choose_swizzle, replicated, wgmma_acc
from tilus.ir.layout.register import mma_a, mma_b, mma_c, mma_warps, permute


@pytest.mark.parametrize("m, n", [(64, 8), (64, 128), (128, 256), (192, 64)])
def test_wgmma_accumulator(m, n):
    layout = wgmma_acc(m, n)
    assert layout.num_threads == 128 and layout.local_size == m * n // 128
    assert layout.is_complete()
    # PTX ISA wgmma D fragment: row warp*16 + lane/4 + 8*((i/2)%2), col (i/4)*8 + (lane%4)*2 + i%2
    for t in (0, 5, 37, 127):
        warp, lane = divmod(t, 32)
        for i in range(n // 2):
            assert layout.coords(t, i) == (
                warp * 16 + lane // 4 + 8 * ((i // 2) % 2),
                (i // 4) * 8 + (lane % 4) * 2 + i % 2,
            )
    # repeats over M are the outermost registers
    assert layout.coords(0, n // 2) == (64, 0) if m > 64 else True


def test_mma_fragments():
    wm, wn = mma_warps(4, 64, 64)
    assert (wm, wn) == (2, 2)
    c, a, b = mma_c(64, 64, wm, wn), mma_a(64, 32, wm, wn), mma_b(32, 64, wm, wn)
    assert c.is_complete() and a.is_complete() and b.is_complete()
    # PTX ISA m16n8k16: a0..a7 of lane l, warp 0
    for lane in (0, 6, 31):
        g, q = divmod(lane, 4)
        assert [a.coords(lane, h) for h in range(8)] == [
            (g, 2 * q), (g, 2 * q + 1), (g + 8, 2 * q), (g + 8, 2 * q + 1),
            (g, 2 * q + 8), (g, 2 * q + 9), (g + 8, 2 * q + 8), (g + 8, 2 * q + 9),
        ]  # fmt: skip
        assert [b.coords(lane, h) for h in range(4)] == [
            (2 * q, g),
            (2 * q + 1, g),
            (2 * q + 8, g),
            (2 * q + 9, g),
        ]
        assert [c.coords(lane, r) for r in range(4)] == [
            (g, 2 * q),
            (g, 2 * q + 1),
            (g + 8, 2 * q),
            (g + 8, 2 * q + 1),
        ]
    # fewer atoms than warps: the spare warps hold copies
    assert mma_warps(4, 16, 8) == (1, 1) and mma_warps(4, 8, 8) is None
    rep = mma_c(16, 8, 1, 1, 4)
    assert rep.num_threads == 128 and rep.local_size == 4 and rep.is_complete()
    assert all(rep.coords(t, 0) == rep.coords(t % 32, 0) for t in range(128))


def test_permute_and_replicated_and_blocked():
    b = mma_b(16, 64, 2, 2)
    bt = permute(b, (1, 0))
    assert bt.shape == (64, 16) and bt.is_complete()
    assert all(bt.coords(t, i) == b.coords(t, i)[::-1] for t in range(128) for i in range(4))
    r = replicated((4,), 256)
    assert r.replicated and r.local_size == 4 and r.is_complete()
    for shape, threads in (((1024,), 128), ((128, 128), 128), ((16, 16), 128), ((4, 8), 64)):
        layout = blocked(shape, threads)
        assert layout.is_complete(), (shape, threads)


def test_shared_swizzle():
    assert [choose_swizzle(b) for b in (16, 32, 64, 128, 256)] == [0, 32, 64, 128, 0]
    s = SharedLayout((3, 64, 64), 2, 128)
    assert s.row_bytes == 128 and s.nbytes == 3 * 64 * 64 * 2
    # 128B: the 16-byte chunk index is XORed with the row index within each 8-row atom
    for row in range(16):
        for chunk in range(8):
            assert s.offset((0, row, chunk * 8)) == row * 128 + ((chunk ^ (row % 8)) * 16)
    assert s.offset((1, 0, 0)) == 64 * 64 * 2
    s64 = SharedLayout((8, 32), 2, 64)
    assert s64.offset((2, 0)) == 2 * 64 + 16  # row 2: (2*64 >> 7) & 3 = 1 -> chunk ^ 1
    assert s64.offset((3, 8)) == 3 * 64 + 0  # chunk 1 ^ 1
    # every element lands on a distinct byte offset inside the tile
    offs = {s.offset((0, r, c)) for r in range(64) for c in range(64)}
    assert len(offs) == 64 * 64 and max(offs) < 64 * 64 * 2
    with pytest.raises(ValueError):
        SharedLayout((64, 32), 2, 128)
    assert s.slice(1).shape == (64, 64)


def test_shared_column_blocks():
    # rows wider than the swizzle span: 128-byte column blocks of a [64, 256] fp16 leaf, each a
    # swizzled [64, 64] leaf, one after the other (TMA moves one box per block)
    s = SharedLayout((2, 64, 256), 2, 128)
    assert s.col_blocks == 4 and s.block_cols == 64 and s.block_bytes == 64 * 128
    for r in (0, 5, 63):
        for c in (0, 9, 64, 130, 255):
            lin = (c // 64) * 8192 + r * 128 + (c % 64) * 2
            assert s.offset((1, r, c)) == 64 * 256 * 2 + s.apply_swizzle(lin)
    offs = {s.offset((0, r, c)) for r in range(64) for c in range(256)}
    assert len(offs) == 64 * 256 and max(offs) < 64 * 256 * 2
    # a warp's 32-bit writes of a wgmma accumulator row pair hit 32 distinct banks
    banks = {(s.offset((0, lane // 4, 2 * (lane % 4))) // 4) % 32 for lane in range(32)}
    assert len(banks) == 32
    # one block: the plain row-major swizzled leaf
    one = SharedLayout((64, 64), 2, 128)
    assert one.col_blocks == 1 and one.block_bytes == 64 * 128
    assert one.offset((3, 8)) == 3 * 128 + (1 ^ 3) * 16  # row 3, chunk 1 XOR row
    with pytest.raises(ValueError):
        SharedLayout((64, 96), 2, 128)  # 192-byte rows are no multiple of 128


class _Staged(tilus.Script):
    def __call__(self, p: ~float16):
        self.attrs.blocks = 1
        self.attrs.warps = 4
        g = self.global_view(p, dtype=float16, shape=[64, 128])
        s = self.shared_tensor(dtype=float16, shape=[64, 128])
        self.store_shared(s, self.load_global(g, offsets=[0, 0], shape=[64, 128]))
        self.fence.proxy_async()
        self.sync()
        with self.single_thread():
            self.tma.shared_to_global(s, g, offsets=[0, 0])
            self.tma.commit_group()
            self.tma.wait_group(0, read=True)


class _Operand(tilus.Script):
    def __call__(self, p: ~float16):
        self.attrs.blocks = 1
        self.attrs.warps = 4
        sa = self.shared_tensor(dtype=float16, shape=[64, 128])
        sb = self.shared_tensor(dtype=float16, shape=[64, 128])
        acc = self.register_tensor(dtype=float32, shape=[64, 64], init=0.0)
        t = self.load_shared(sb.transpose())  # a permuted view outside wgmma: no column blocks
        self.wgmma.mma(sa, sb.transpose(), acc)  # OPERAND LINE
        self.store_global(self.global_view(p, dtype=float16, shape=[128, 64]), t, offsets=[0, 0])


def test_only_tma_and_elementwise_tiles_get_column_blocks():
    # a shared tile with 256-byte rows used only by store_shared and TMA is stored in column
    # blocks (128B swizzle) and moved as one box per block; so is a wgmma operand (its
    # descriptors step over the blocks), but not a tile that a transposed view also reads
    # element-wise: it stays unswizzled, which wgmma refuses at the line
    k = _Staged()
    prog = k.program(k.configs[0], {})
    (layout,) = [v.layout for v in infer_layouts(prog.fn).shared.values()]
    assert layout.swizzle == 128 and layout.col_blocks == 2
    src = generate(prog).source
    assert src.count("tl_tma_store_2d(&tl_map") == 2 and "tl_tma_store_wait_read<0>" in src
    with pytest.raises(TilusCompileError) as e:
        generate(_Operand().program(_Operand().configs[0], {}))
    line = next(i for i, t in enumerate(open(__file__), 1) if "# OPERAND LINE" in t)
    assert f"test_codegen_layouts.py:{line}:" in str(e.value)
