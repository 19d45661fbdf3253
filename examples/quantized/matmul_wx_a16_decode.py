"""Decode-shape W4A16 matmul (M <= 16): the packed weights streamed with 16-byte loads, no tensor cores.

``Y = X @ dequant(W)^T`` as in ``matmul_wx_a16.py`` (same arguments and packing), for few rows
of X. Each thread owns runs of 32 consecutive K codes (16 bytes) of ``rows`` weight rows; a
warp reads 512 contiguous bytes of a row at a time, and ``reps`` such loads a row are in flight
per thread. The codes are cast to fp16 (the magic-number cast), the zero point subtracted,
multiplied by X (read from global, L1-resident: X is at most 16 x K fp16) and summed over the
run in fp32; each run's sum is scaled by its group's scale and accumulated per thread. Only
at the end are the threads of a row reduced. ``split`` blocks share a row's K range when N
alone gives too few blocks; they add their sums into an fp32 workspace and the last one to
arrive writes Y (as in ``matmul_wx_a16.py``).
"""

from __future__ import annotations

import tilus
from tilus import float16, float32, int32, uint32, void_p
from tilus.errors import TilusArgumentError
from tilus.ir.layout import local, reduce, shared_row_major
from tilus.utils import cdiv

RUN = 32  # codes a run: a thread's load (16 bytes of int4, nbits 32-bit words in general)

#: the weight types: 1-8-bit integers and the sub-byte floats
WEIGHT_TYPES = [
    *(getattr(tilus, f"{s}int{b}b") for s in ("", "u") for b in range(1, 8)),
    tilus.int8, tilus.uint8,
    *(getattr(tilus, n) for n in dir(tilus) if n.startswith("float") and "_e" in n[6:]
      and getattr(tilus, n).nbits < 8),
]  # fmt: skip


def zero_point(wdtype) -> float:
    """The code subtracted before scaling: half the range of an unsigned type, else 0."""
    return float(1 << (wdtype.nbits - 1)) if wdtype.kind == "uint" else 0.0


@tilus.autotune("rows", [1, 2])
@tilus.autotune("reps", [1])
@tilus.autotune("block_m", [1, 4])
@tilus.autotune("stages", [0, 4, 6])
class MatmulWxA16Decode(tilus.Script):
    """``Y[M, N] = X[M, K] @ dequant(W[N, K])^T`` for few M, memory-streaming (``block_m`` rows
    of X a block, each with its own accumulator over the same dequantized weights)."""

    def __init__(
        self, wdtype=tilus.uint4b, group: int = 128, rows: int = 4, reps: int = 1,
        block_m: int = 1, warps: int = 4, stages: int = 0,
    ):  # fmt: skip
        super().__init__()
        if wdtype not in WEIGHT_TYPES:
            raise TilusArgumentError(
                f"wdtype must be a 1-8-bit integer or sub-byte float, got {wdtype}"
            )
        if group % RUN or 32 % (group // RUN):
            raise TilusArgumentError(f"group must be 32, 64, 128, 256, 512 or 1024, got {group}")
        self.wdtype, self.group, self.rows, self.reps = wdtype, group, rows, reps
        self.block_m, self.block_rows, self.warps = block_m, list(range(block_m)), warps
        if stages == 1 or stages < 0:
            raise TilusArgumentError(f"stages must be 0 (no ring) or at least 2, got {stages}")
        self.stages, self.prologue = stages, list(range(max(stages - 1, 0)))

    def __call__(
        self, m_size: int32, n_size: int, k_size: int,
        x_ptr: ~float16, w_ptr: void_p, s_ptr: ~float16, y_ptr: ~float16,
    ):  # fmt: skip
        g, bm, wd = self.group, self.block_m, self.wdtype
        nb = wd.nbits  # a run of 32 codes is nb 32-bit words
        int4 = wd in (tilus.int4b, tilus.uint4b)  # the magic-number cast to fp16
        # a sub-byte float without inf/NaN codes is exact in fp16 and casts to it by bit
        # placement and one f16x2 scaling a pair (to fp32 directly: a decode per element)
        via_f16 = wd.is_float() and wd.exponent_bits < 5
        cpg = g // RUN  # runs a group
        msg = f"K = {k_size} is not a multiple of the scale group {g}"
        self.static_assert(k_size % g == 0, msg)  # CHECK:group
        warps = self.warps
        # a warp's 32 lanes: (32 / cpg) groups x cpg runs along K, the warps along N
        lg = 32 // cpg
        bn = self.rows * warps
        bg = self.reps * lg  # groups a K tile
        self.attrs.blocks = [cdiv(n_size, bn), cdiv(m_size, bm)]
        self.attrs.warps = warps
        ng = k_size // g
        gx = self.global_view(x_ptr, dtype=float16, shape=[m_size, ng, cpg, RUN])
        gw = self.global_view(w_ptr, dtype=uint32, shape=[n_size, ng, cpg, nb])
        gs = self.global_view(s_ptr, dtype=float16, shape=[n_size, ng, 1])
        gy = self.global_view(y_ptr, dtype=float16, shape=[m_size, n_size])
        on: int32 = bn * self.blockIdx.x
        om: int32 = bm * self.blockIdx.y
        # the packed bytes of the weight tile, and the layouts of X and the scales that follow
        tile = local(self.rows, self.reps, 1, 1).spatial(warps, lg, cpg, 1)
        layout = tile.local(1, 1, 1, nb)
        x_layout = reduce(tile.local(1, 1, 1, RUN), [0])
        s_layout = reduce(reduce(layout, [3]), [2], keepdims=True)
        ms = self.block_rows
        accs = []
        for _ in ms:
            accs.append(self.register_tensor(dtype=float32, shape=[bn, bg, cpg], init=0.0))
        ns, tiles = self.stages, cdiv(ng, bg)
        if ns:  # a cp.async ring of the weight, X and scale tiles, ns - 1 tiles ahead
            sw = self.shared_tensor(dtype=uint32, shape=[ns, bn, bg, cpg, nb])
            sx = self.shared_tensor(dtype=float16, shape=[ns, bm, bg, cpg, RUN])
            self.annotate_layout(sw, shared_row_major(ns, bn, bg, cpg, nb))
            self.annotate_layout(sx, shared_row_major(ns, bm, bg, cpg, RUN))
            # the scales (1/32 of the bytes) one tile ahead in registers, not in the ring:
            # a shared tile of them would need a layout exchange (two barriers) a tile
            s_buf = self.load_global(gs, offsets=[on, 0, 0], shape=[bn, bg, 1])
            self.annotate_layout(s_buf, s_layout)
            for i in self.prologue:
                self.fill(gw, gx, sw, sx, i, i, on, om)
        for it in self.range(tiles):
            g0 = it * bg
            if ns:
                self.copy_async_wait_group(ns - 2)  # this thread's copies of tile it landed
                self.sync()  # everyone's did, and everyone is done with the slot refilled next
                self.fill(gw, gx, sw, sx, it + ns - 1, (it + ns - 1) % ns, on, om)
                qb = self.load_shared(sw[it % ns])
                sf = self.cast(s_buf, float32)
                nxt = self.load_global(gs, offsets=[on, g0 + bg, 0], shape=[bn, bg, 1])
                self.annotate_layout(nxt, s_layout)
                self.assign(s_buf, nxt)
            else:
                qb = self.load_global(gw, offsets=[on, g0, 0, 0], shape=[bn, bg, cpg, nb])
                s = self.load_global(gs, offsets=[on, g0, 0], shape=[bn, bg, 1])
                self.annotate_layout(s, s_layout)
                sf = self.cast(s, float32)
            self.annotate_layout(qb, layout)
            if wd == tilus.uint4b:  # c - 8 is int4b(c ^ 8): the magic-number cast's own bias
                qb = qb ^ 0x88888888
            if int4:
                wf = self.cast(self.cast(self.view(qb, dtype=tilus.int4b), float16), float32)
            elif via_f16:  # bits placed and scaled two codes at a time, then widened
                wf = self.cast(self.cast(self.view(qb, dtype=wd), float16), float32)
            else:
                wf = self.cast(self.view(qb, dtype=wd), float32)
            for mi in ms:
                if ns:
                    x = self.load_shared(sx[it % ns, mi])
                else:
                    x = self.load_global(gx, offsets=[om + mi, g0, 0, 0], shape=[bg, cpg, RUN],
                                         dims=[1, 2, 3])  # fmt: skip
                self.annotate_layout(x, x_layout)
                xf = self.cast(x, float32)
                part = self.sum(wf * xf, dim=3)
                if not int4 and wd.kind == "uint":  # sum (c - z) x = sum c x - z sum x
                    part = part - self.sum(xf, dim=2) * zero_point(wd)
                self.add(accs[mi], part * sf, out=accs[mi])
        if ns:
            self.copy_async_wait_all()  # the zero-filled copies past the end
        for mi in ms:
            y = self.sum(self.sum(accs[mi], dim=2), dim=1)
            self.store_global(gy, self.cast(y, float16), offsets=[om + mi, on], dims=[1])

    def fill(self, gw, gx, sw, sx, tile: int32, slot: int32, on: int32, om: int32):
        """Start the copies of K tile ``tile`` (weights, X rows) into ring slot
        ``slot``, as one commit group; a tile past the end reads nothing (zero-filled)."""
        bg = self.reps * (32 // (self.group // RUN))
        self.copy_async(gw, sw[slot], offsets=[on, tile * bg, 0, 0])
        self.copy_async(gx, sx[slot], offsets=[om, tile * bg, 0, 0])
        self.copy_async_commit_group()
