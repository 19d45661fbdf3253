"""Decode-shape WxA16 matmul (M <= 16): the packed weights streamed with 16-byte loads, no tensor cores.

``Y = X @ dequant(W)^T`` as in ``matmul_wx_a16.py`` (same arguments and packing), for few rows
of X and any weight type of ``WEIGHT_TYPES``. Each thread owns runs of 32 consecutive K codes
(``nbits`` 32-bit words) of ``rows`` weight rows; a warp reads 32 runs of a row at a time,
and ``reps`` such loads a row are in flight per thread, straight into registers
(``stages`` = 0) or through a cp.async ring of ``stages`` slots (``persist``: blocks that
stream several row tiles through one ring). An unsigned code's zero point is removed by
viewing ``c ^ z`` as the signed code of ``c - z`` (``z = 2^(nbits - 1)``: its top bit
flipped), the codes are cast to fp16 two at a time (magic numbers for integers, bit placement
for sub-byte floats), multiplied by X (``block_m`` rows of it a block) and summed over the run:
by default in fp16 pairs (HMUL2, then a pairwise HADD2 tree: about 3 instructions a code)
where a code's magnitude is at most ``FP16_RUN_BOUND``, else (``run_dtype=float32``, and
int7/int8 and the 4-5-exponent-bit floats by default) in fp32. Each run's sum is scaled by its
group's scale and accumulated per thread in fp32; only at the end are the threads of a row
reduced and Y stored.
"""

from __future__ import annotations

import tilus
from tilus import float16, float32, int32, uint32, void_p
from tilus.errors import TilusArgumentError
from tilus.ir.layout import local, reduce, shared_row_major
from tilus.utils import cdiv


def sign_bits(nbits: int) -> list[int]:
    """Per 32-bit word of a run of 32 ``nbits``-bit codes (``nbits`` words), the mask of its
    codes' top bits: ``c ^ mask`` is the signed code of ``c - 2^(nbits - 1)``."""
    words = [0] * nbits
    for i in range(32):
        bit = i * nbits + nbits - 1
        words[bit // 32] |= 1 << (bit % 32)
    return words


RUN = 32  # codes a run: a thread's load (16 bytes of int4, nbits 32-bit words in general)

#: the weight types: 1-8-bit integers and the sub-byte floats
WEIGHT_TYPES = [
    *(getattr(tilus, f"{s}int{b}b") for s in ("", "u") for b in range(1, 8)),
    tilus.int8, tilus.uint8,
    *(getattr(tilus, n) for n in dir(tilus) if n.startswith("float") and "_e" in n[6:]
      and getattr(tilus, n).nbits < 8),
]  # fmt: skip


def code_bound(wdtype) -> float:
    """The largest magnitude of a code once its zero point is removed."""
    if wdtype.is_float():
        return float(max(wdtype.max_value(), -wdtype.min_value()))
    return float(1 << (wdtype.nbits - 1))


#: the largest code magnitude whose runs are summed in fp16 by default: a run of 32 products
#: then overflows only where X's magnitudes average above 65504 / (32 * 32) = 64 over it
FP16_RUN_BOUND = 32


#: the most weight rows a thread whose runs are summed in fp32 keeps in registers
FP32_MAX_ROWS = 4


def zero_point(wdtype) -> float:
    """The code subtracted before scaling: half the range of an unsigned type, else 0."""
    return float(1 << (wdtype.nbits - 1)) if wdtype.kind == "uint" else 0.0


#: (rows, block_m) of the autotune space: 8 weight rows a thread for one row of X (fewer
#: loads of X and the scales a code), 2 or 4 for four rows of X (registers for four sums)
ROWS_BLOCK_M = [(2, 1), (4, 1), (8, 1), (2, 4), (4, 4)]


def signed_type(wdtype):
    """The type of a code of ``wdtype`` less its zero point: the signed integer of its width
    for an unsigned type, else ``wdtype``."""
    if wdtype.kind != "uint":
        return wdtype
    return getattr(tilus, f"int{wdtype.nbits}b") if wdtype.nbits < 8 else tilus.int8


class SignedCodes:
    """Mixin of the kernels that read packed weight runs (``self.wdtype``, ``self.words`` the
    host list ``range(nbits)``): the codes of a tile of uint32 run words, less their zero
    point."""

    def signed_codes(self, qb):
        """``qb`` (uint32 words of runs of 32 codes) viewed as codes: an unsigned code ``c``
        as the signed code of ``c - z`` (``c ^ z``, ``z = 2^(nbits - 1)``: its top bit
        flipped), other codes as they are."""
        wd = self.wdtype
        if wd.kind == "uint":
            flips = sign_bits(wd.nbits)
            if len(set(flips)) == 1:  # the same mask in every word
                qb = qb ^ uint32(flips[0])
            else:  # word w of a run: flips[w] (constants once unrolled)
                w = self.register_tensor(dtype=int32, shape=[wd.nbits], init=lambda i: i)
                flip = self.register_tensor(dtype=uint32, shape=[wd.nbits], init=flips[-1])
                for k in self.words[:-1]:
                    flip = self.where(w == k, uint32(flips[k]), flip)
                qb = qb ^ flip
        return self.view(qb, dtype=signed_type(wd))


@tilus.autotune("rows, block_m", ROWS_BLOCK_M)
@tilus.autotune("reps", [1])
@tilus.autotune("stages", [0, 4, 6])
class MatmulWxA16Decode(SignedCodes, tilus.Script):
    """``Y[M, N] = X[M, K] @ dequant(W[N, K])^T`` for few M, memory-streaming (``block_m`` rows
    of X a block, each with its own accumulator over the same dequantized weights)."""

    def __init__(
        self, wdtype=tilus.uint4b, group: int = 128, rows: int = 4, reps: int = 1,
        block_m: int = 1, warps: int = 4, stages: int = 0, persist: int = 0,
        num_sms: int | None = None, run_dtype=None,
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
        if persist < 0 or (persist and not stages):
            raise TilusArgumentError(
                f"persist must be 0 or (with a ring, stages >= 2) the blocks an SM, got {persist}"
            )
        self.stages, self.prologue = stages, list(range(max(stages - 1, 0)))
        self.words = list(range(wdtype.nbits))  # a host list: the words of a run
        # the dtype a run's products are summed in: fp16 (pairs, about 2.5 instructions a
        # code) where the codes are small enough, else fp32
        if run_dtype is None:
            run_dtype = float16 if code_bound(wdtype) <= FP16_RUN_BOUND else float32
        run_dtype = {"float16": float16, "float32": float32}.get(str(run_dtype), run_dtype)
        if run_dtype not in (float16, float32):
            raise TilusArgumentError(f"run_dtype must be float16 or float32, got {run_dtype}")
        self.run_dtype = run_dtype
        if run_dtype == float32 and rows > FP32_MAX_ROWS:  # their tiles would spill
            raise TilusArgumentError(
                f"rows = {rows} with fp32 runs ({wdtype}): at most {FP32_MAX_ROWS} (see "
                "decode_kernel)"
            )
        self.persist, self.num_sms = persist, num_sms  # num_sms: the GPU's by default

    def __call__(
        self, m_size: int32, n_size: int, k_size: int,
        x_ptr: ~float16, w_ptr: void_p, s_ptr: ~float16, y_ptr: ~float16,
    ):  # fmt: skip
        g, bm, wd = self.group, self.block_m, self.wdtype
        nb = wd.nbits  # a run of 32 codes is nb 32-bit words
        cpg = g // RUN  # runs a group
        msg = f"K = {k_size} is not a multiple of the scale group {g}"
        self.static_assert(k_size % g == 0, msg)  # CHECK:group
        warps = self.warps
        # a warp's 32 lanes: (32 / cpg) groups x cpg runs along K, the warps along N
        lg = 32 // cpg
        bn = self.rows * warps
        bg = self.reps * lg  # groups a K tile
        ng = k_size // g
        n_tiles, k_tiles = cdiv(n_size, bn), cdiv(ng, bg)
        # with persist, each block owns `per` consecutive row tiles and streams them through
        # one ring (no refill gap between them): the grid fits `persist` blocks an SM
        sms = self.num_sms or self.cuda.sm_count
        per = cdiv(n_tiles, sms * self.persist) if self.persist else 1
        self.attrs.blocks = [cdiv(n_tiles, per), cdiv(m_size, bm)]
        self.attrs.warps = warps
        gx = self.global_view(x_ptr, dtype=float16, shape=[m_size, ng, cpg, RUN])
        gw = self.global_view(w_ptr, dtype=uint32, shape=[n_size, ng, cpg, nb])
        gs = self.global_view(s_ptr, dtype=float16, shape=[n_size, ng, 1])
        gy = self.global_view(y_ptr, dtype=float16, shape=[m_size, n_size])
        om: int32 = bm * self.blockIdx.y
        # the packed bytes of the weight tile, and the layouts of X and the scales that follow
        tile = local(self.rows, self.reps, 1, 1).spatial(warps, lg, cpg, 1)
        layout = tile.local(1, 1, 1, nb)
        self.x_layout = reduce(tile.local(1, 1, 1, RUN), [0])
        self.s_layout = reduce(reduce(layout, [3]), [2], keepdims=True)
        accs = []
        for _ in self.block_rows:
            accs.append(self.register_tensor(dtype=float32, shape=[bn, bg, cpg], init=0.0))
        ns = self.stages
        if ns:
            self.ring(gw, gx, gs, gy, accs, layout, om, per, n_size, n_tiles, k_tiles)
        else:  # each thread's loads straight into registers
            on: int32 = bn * self.blockIdx.x
            for it in self.range(k_tiles):
                qb = self.load_global(gw, offsets=[on, it * bg, 0, 0], shape=[bn, bg, cpg, nb])
                self.annotate_layout(qb, layout)
                s = self.load_global(gs, offsets=[on, it * bg, 0], shape=[bn, bg, 1])
                self.annotate_layout(s, self.s_layout)
                xs = []
                for mi in self.block_rows:
                    xs.append(self.load_global(gx, offsets=[om + mi, it * bg, 0, 0],
                                               shape=[bg, cpg, RUN], dims=[1, 2, 3]))  # fmt: skip
                self.accumulate(accs, qb, xs, self.cast(s, float32))
            self.store_rows(gy, accs, om, on)

    def ring(self, gw, gx, gs, gy, accs, layout, om: int32, per: int, n_size: int, n_tiles: int,
             k_tiles: int):  # fmt: skip
        """The main loop through a cp.async ring of the weight and X tiles."""
        ns, bm, g = self.stages, self.block_m, self.group
        cpg, nb = g // RUN, self.wdtype.nbits
        bn, bg = self.rows * self.warps, self.reps * (32 // cpg)
        # a cp.async ring of the weight and X tiles, ns - 1 steps ahead; a step is one K tile
        # of one of the block's row tiles (step t: row tile t // k_tiles, K tile t % k_tiles)
        first: int32 = per * self.blockIdx.x
        steps: int32 = self.minimum_int(per, n_tiles - first) * k_tiles
        sw = self.shared_tensor(dtype=uint32, shape=[ns, bn, bg, cpg, nb])
        sx = self.shared_tensor(dtype=float16, shape=[ns, bm, bg, cpg, RUN])
        self.annotate_layout(sw, shared_row_major(ns, bn, bg, cpg, nb))
        self.annotate_layout(sx, shared_row_major(ns, bm, bg, cpg, RUN))
        # the scales (1/32 of the bytes) one step ahead in registers, not in the ring: a
        # shared tile of them would need a layout exchange (two barriers) a step
        s_buf = self.load_global(gs, offsets=[first * bn, 0, 0], shape=[bn, bg, 1])
        self.annotate_layout(s_buf, self.s_layout)
        for i in self.prologue:
            self.fill(gw, gx, sw, sx, i, i, first, steps, om, n_size, k_tiles)
        for t in self.range(steps):
            self.copy_async_wait_group(ns - 2)  # this thread's copies of step t landed
            self.sync()  # everyone's did, and everyone is done with the slot refilled next
            self.fill(gw, gx, sw, sx, t + ns - 1, (t + ns - 1) % ns, first, steps, om, n_size,
                      k_tiles)  # fmt: skip
            qb = self.load_shared(sw[t % ns])
            self.annotate_layout(qb, layout)
            sf = self.cast(s_buf, float32)
            nt: int32 = t + 1  # the next step's scales
            nxt = self.load_global(gs, offsets=[(first + nt // k_tiles) * bn, nt % k_tiles * bg, 0],
                                   shape=[bn, bg, 1])  # fmt: skip
            self.annotate_layout(nxt, self.s_layout)
            self.assign(s_buf, nxt)
            xs = []
            for mi in self.block_rows:
                xs.append(self.load_shared(sx[t % ns, mi]))
            self.accumulate(accs, qb, xs, sf)
            if t % k_tiles == k_tiles - 1:  # the last K tile of a row tile: its Y
                self.store_rows(gy, accs, om, (first + t // k_tiles) * bn)
                for acc in accs:
                    self.assign(acc, self.register_tensor(dtype=float32, shape=[bn, bg, cpg],
                                                          init=0.0))  # fmt: skip
        self.copy_async_wait_all()  # the zero-filled copies past the end

    def minimum_int(self, a, b):
        """The smaller of two int32 scalars."""
        out: int32 = a
        if b < a:
            out = b
        return out

    def accumulate(self, accs, qb, xs, sf):
        """Add to each ``accs[mi]`` the run sums of the packed weight tile ``qb`` times X
        row ``xs[mi]`` (both in registers), scaled by the fp32 group scales ``sf``."""
        codes = self.signed_codes(qb)
        wd = signed_type(self.wdtype)
        if self.run_dtype == float16:
            # every code is exact in fp16: cast two at a time, the products fp16 pairs (HMUL2)
            # and a run's 32 of them summed in fp16 pairs (HADD2), then widened once a run
            wh = self.cast(codes, float16)
            for mi in self.block_rows:
                x = xs[mi]
                self.annotate_layout(x, self.x_layout)
                part = self.sum(wh * x, dim=3, acc_dtype=float16)
                self.add(accs[mi], self.cast(part, float32) * sf, out=accs[mi])
        else:
            # fp32 products and sums; a code with no inf/NaN code passes through fp16, where
            # the casts take two at a time
            via_f16 = wd.nbits < 8 and (not wd.is_float() or wd.exponent_bits < 5)
            if via_f16:
                wf = self.cast(self.cast(codes, float16), float32)
            else:
                wf = self.cast(codes, float32)
            for mi in self.block_rows:
                x = xs[mi]
                self.annotate_layout(x, self.x_layout)
                part = self.sum(wf * self.cast(x, float32), dim=3)
                self.add(accs[mi], part * sf, out=accs[mi])

    def store_rows(self, gy, accs, om: int32, on: int32):
        """Reduce each accumulator over the threads of a row and store Y[om + mi, on:]."""
        for mi in self.block_rows:
            y = self.sum(self.sum(accs[mi], dim=2), dim=1)
            self.store_global(gy, self.cast(y, float16), offsets=[om + mi, on], dims=[1])

    def fill(self, gw, gx, sw, sx, step: int32, slot: int32, first: int32, steps: int32,
             om: int32, n_size: int, k_tiles: int):  # fmt: skip
        """Start the copies of step ``step`` (the weight tile and the X rows) into ring slot
        ``slot``, as one commit group; a step past the block's last reads nothing (its rows
        are past N: zero-filled)."""
        bg = self.reps * (32 // (self.group // RUN))
        bn = self.rows * self.warps
        on: int32 = (first + step // k_tiles) * bn
        if step >= steps:
            on = n_size
        kt: int32 = step % k_tiles
        self.copy_async(gw, sw[slot], offsets=[on, kt * bg, 0, 0])
        self.copy_async(gx, sx[slot], offsets=[om, kt * bg, 0, 0])
        self.copy_async_commit_group()


@tilus.autotune("rows, block_m", [(2, 1), (FP32_MAX_ROWS, 1), (2, 4)])
class MatmulWxA16DecodeF32(MatmulWxA16Decode):
    """``MatmulWxA16Decode`` for weights whose runs are summed in fp32 (int7/int8 and the
    floats with 4-5 exponent bits by default): its widest row tile is ``FP32_MAX_ROWS``, and
    2 for four rows of X (6 and, for four rows of X, 4 spill with the ring)."""


def decode_kernel(wdtype=tilus.uint4b, group: int = 128, **kwargs):
    """The decode kernel for a weight type: ``MatmulWxA16Decode``, or
    ``MatmulWxA16DecodeF32`` where the runs are summed in fp32 (``run_dtype``, by default
    from the codes' magnitude)."""
    run = kwargs.get("run_dtype")
    fp32 = str(run) == "float32" if run is not None else code_bound(wdtype) > FP16_RUN_BOUND
    return (MatmulWxA16DecodeF32 if fp32 else MatmulWxA16Decode)(wdtype, group, **kwargs)
