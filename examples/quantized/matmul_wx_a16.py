"""W4A16 matmul: ``Y = X @ dequant(W)^T`` with fp16 X [M, K] and int4 weights W [N, K].

How to call it: make the weights object once per weight, then call the entry with any M; it
runs the fastest kernel for that M (``pick_kernel``), each its default constructor tuned on
first use::

    weights = prepare_weights(w_packed, scales, wdtype=tilus.uint4b, group=128)
    y = matmul_wx_a16(x, weights)  # x fp16 [M, K] -> y fp16 [M, N]

Up to ``MMA_MAX_M`` rows of X (the boundary measured on an H200) prepared weights of the mma
types (``mma_codecs.MMA_TYPES``: the 1-4-bit integers, fp4 e2m1 and fp3 e1m1) run the mma.sync
kernel of ``matmul_wx_a16_mma.py`` on the copy ``prepare_weights`` packed in fragment order; more rows the pipelined WGMMA kernel of ``matmul_wx_a16_pipe.py`` (and from
``PREFILL_MIN_M`` rows, when set, the persistent one of ``matmul_wx_a16_prefill.py``: off, as
it measured slower); other bit widths (1-8-bit integers, fp4/fp6 floats) and groups that are
not whole 128-K chunks the memory-streaming kernel of ``matmul_wx_a16_decode.py`` at decode
M. From ``DEQUANT_MIN_M`` rows (``DEQUANT_MIN_M_OTHER`` for the other types) the weights are
dequantized to an fp16 workspace and V7 multiplies (``matmul_wx_a16_dequant.py``): at prefill
M the matmul is compute-bound and the dequantize costs one pass over the weights.
``matmul_wx_a16(x, w_packed, scales, wdtype=, group=)`` on the plain bytes still works
(without the mma kernel).
The rest of this file is the simple one-warp-group WGMMA kernel ``MatmulWxA16`` and the
shared checks, reference and random problems.

The weights are 4-bit codes packed two to a byte along K (``int4b``, or ``uint4b`` with a zero
point of 8), with one fp16 scale per ``group`` consecutive K of each row (``scales`` is
[N, K / group]); ``dequant(W)[n, k] = (code - zero) * scales[n, k // group]``. Y is fp16.

The kernel computes ``Y^T = dequant(W) @ X^T`` so that the weights are the A operand of WGMMA
(M = 64 rows of W per warp group) and X, the small operand at decode, is B (the WGMMA N is the
M tile of X, 16 to 128). Per K tile the warp group loads its packed weight tile straight from
global memory into registers, casts it to fp16 (the magic-number cast of packed codes),
subtracts the zero point and multiplies by the broadcast group scale. With ``reg_a`` (an
autotune choice) that tile is the register A operand of ``wgmma.mma``: layout inference gives
the packed load the A fragment's layout, so the cast moves no data. Without it the fp16 tile
is stored into shared memory and WGMMA reads it from there. X tiles go through shared memory
(the B operand). The accumulator is Y^T; it is stored through a transposed global view of Y.

Run ``python examples/quantized/matmul_wx_a16.py`` (interpreter self-check at ragged sizes,
the entry at both M regimes among them).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import matmul_wx_a16_mma as mma
import numpy as np
from matmul_wx_a16_decode import WEIGHT_TYPES, MatmulWxA16Decode, decode_kernel, zero_point
from matmul_wx_a16_dequant import MatmulWxA16Dequant
from matmul_wx_a16_pipe import MatmulWxA16Pipe
from matmul_wx_a16_prefill import MatmulWxA16Prefill
from split_k import SplitKParts

import tilus
from tilus import float16, float32, int32, void_p
from tilus.errors import TilusArgumentError
from tilus.utils import cdiv

BLOCK_N = 64  # rows of W per block: the WGMMA M of one warp group
DECODE_M = 2  # up to this many rows of X (4-bit weights), matmul_wx_a16() runs the decode kernel
#: up to this many rows of X, prepared 4-bit weights run the mma.sync kernel, more the pipelined
#: WGMMA one: each tuned, on an H200 (2026-12-01, ms, mma / pipe) at N = K = 8192: M = 16
#: 0.027 / 0.034, 32 0.059 / 0.082, 48 0.076 / 0.090, 64 0.077 / 0.090; at N = 28672,
#: K = 4096: M = 16 0.042 / 0.057, 64 0.133 / 0.097 (the mma kernel re-reads the weights
#: for each 16-row tile of X past 16 rows, so it loses as M grows; 32 is below both crossings)
MMA_MAX_M = 32
#: from this many rows of X, 4-bit weights with a group that is a multiple of 128 would run
#: the persistent prefill kernel of ``matmul_wx_a16_prefill.py``; None: never. Its space
#: measured slower than the pipelined kernel at M = 4096 on an H200 (2026-12-02, ratio to fp16
#: cuBLAS at N = K = 8192 / N = 28672, K = 4096: tuned prefill 0.73 / 0.71, the pipelined
#: kernel's best 0.78 / 0.75), so the pipelined one stays the default
PREFILL_MIN_M = None
#: from this many rows of X, 4-bit weights (other types: ``DEQUANT_MIN_M_OTHER``) are
#: dequantized to an fp16 workspace and multiplied by V7 (``matmul_wx_a16_dequant.py``);
#: None: never. Measured on an H200 (2026-12-03), ratios to fp16 cuBLAS at N = K = 8192 (N =
#: 28672, K = 4096 in brackets), dequantize+V7 / the pipelined kernel: uint4b at M = 512 0.66
#: / 0.81 (0.63 / 0.68), at 768 0.71 / 0.63 (0.70 / 0.70), at 1024 0.79 / 0.79 (0.79 / 0.75),
#: at 4096 0.94 (0.94) against r48's 0.78 (0.75) (r70, r71); the other types, dequantize+V7 /
#: decode at M = 16: 0.41 / 0.39 (uint3b), 0.39 / 0.25 (int8), 0.40 / 0.42 (fp4), at 32 the
#: dequantize wins by 2-3x (r69)
DEQUANT_MIN_M = 768
DEQUANT_MIN_M_OTHER = 16


@tilus.autotune("block_m", [16, 64, 128])
@tilus.autotune("block_k", [64])
@tilus.autotune("reg_a", [True, False])
@tilus.autotune("split_k", [1, 4])
class MatmulWxA16(SplitKParts, tilus.Script):
    """``Y[M, N] = X[M, K] @ dequant(W[N, K])^T`` with 4-bit weights and per-group scales
    (N and K, the weight's shape, are compile-time; M is not)."""

    def __init__(
        self, wdtype=tilus.uint4b, group: int = 128, block_m: int = 16, block_k=64, reg_a=True,
        split_k: int = 1,
    ):  # fmt: skip
        super().__init__()
        if wdtype not in (tilus.uint4b, tilus.int4b):
            raise TilusArgumentError(f"wdtype must be uint4b or int4b, got {wdtype}")
        self.wdtype, self.group, self.block_m, self.block_k = wdtype, group, block_m, block_k
        self.reg_a, self.split_k = reg_a, split_k
        self.zero = 8.0 if wdtype == tilus.uint4b else 0.0

    def __call__(
        self, m_size: int32, n_size: int, k_size: int,
        x_ptr: ~float16, w_ptr: void_p, s_ptr: ~float16, y_ptr: ~float16,
    ):  # fmt: skip
        num_n = cdiv(n_size, BLOCK_N)
        self.attrs.blocks = [num_n, cdiv(m_size, self.block_m), self.split_k]
        self.attrs.warps = 4
        self.static_assert(self.group % self.block_k == 0, "group must be whole K tiles")
        msg = f"K = {k_size} is not a multiple of the scale group {self.group}"
        self.static_assert(k_size % self.group == 0, msg)  # CHECK:group
        bm, bk, g = self.block_m, self.block_k, self.group
        on: int32 = BLOCK_N * self.blockIdx.x
        om: int32 = bm * self.blockIdx.y
        gx = self.global_view(x_ptr, dtype=float16, shape=[m_size, k_size])
        gw = self.global_view(w_ptr, dtype=self.wdtype, shape=[n_size, k_size])
        gs = self.global_view(s_ptr, dtype=float16, shape=[n_size, k_size // g])
        # Y^T [N, M] over Y's storage
        gyt = self.global_view(y_ptr, dtype=float16, shape=[n_size, m_size], strides=[1, n_size])
        # split-K only when X is one M tile (decode): there are few N tiles' worth of blocks
        # then; with more M tiles the blocks of parts 1.. have nothing to do
        split: int32 = 1
        if m_size <= bm:
            split = self.split_k
        part: int32 = self.blockIdx.z
        k_tiles = k_size // bk
        k_lo: int32 = part * k_tiles // split
        k_hi: int32 = (part + 1) * k_tiles // split
        ws, cnt = None, None
        if self.split_k > 1:  # the parts' fp32 sums, and per N tile the parts done
            ws = self.global_tensor(float32, [num_n * self.split_k * BLOCK_N, bm],
                                    requires_clean=False)  # fmt: skip
            cnt = self.global_tensor(int32, [num_n], requires_clean=True)
        if part < split:
            acc = self.mainloop(gx, gw, gs, om, on, k_lo * bk, k_hi * bk)
            self.finish_parts(acc, ws, cnt, part, split, gyt, on, om)

    def mainloop(self, gx, gw, gs, om, on, k_begin, k_end):
        """The fp32 tile ``dequant(W)[on:, k_begin:k_end] @ X[om:, k_begin:k_end]^T``."""
        bm, bk, g = self.block_m, self.block_k, self.group
        sx = self.shared_tensor(dtype=float16, shape=[bm, bk])
        sw = None if self.reg_a else self.shared_tensor(dtype=float16, shape=[BLOCK_N, bk])
        acc = self.register_tensor(dtype=float32, shape=[BLOCK_N, bm], init=0.0)
        for k0 in self.range(k_begin, k_end, bk):
            self.store_shared(sx, self.load_global(gx, offsets=[om, k0], shape=[bm, bk]))
            q = self.load_global(gw, offsets=[on, k0], shape=[BLOCK_N, bk])
            s = self.load_global(gs, offsets=[on, k0 // g], shape=[BLOCK_N, 1])
            w = (self.cast(q, float16) - self.zero) * s
            if not self.reg_a:
                self.store_shared(sw, w)
            self.fence.proxy_async()  # the generic writes of sx, sw become visible to wgmma
            self.sync()
            self.wgmma.fence()
            self.wgmma.mma(w if self.reg_a else sw, sx.transpose(), acc)
            self.wgmma.commit_group()
            self.wgmma.wait_group(0)
            self.sync()  # every warp has read sx before the next tile overwrites it
        return acc


def check_args(x_shape, w_shape, s_shape, group: int) -> tuple[int, int, int]:
    """(M, N, K) of a call with X [M, K], W [N, K] (codes) and scales [N, K / group]; a
    :class:`TilusArgumentError` naming the argument if the shapes do not fit."""
    if len(x_shape) != 2 or len(w_shape) != 2:
        raise TilusArgumentError(f"x and w must be 2-d, got x {list(x_shape)}, w {list(w_shape)}")
    m, k = x_shape
    n, kw = w_shape
    if kw != k:
        raise TilusArgumentError(f"w: shape {list(w_shape)} has K = {kw}, x has K = {k}")
    if k % group:
        raise TilusArgumentError(f"x: K = {k} is not a multiple of the scale group {group}")
    if tuple(s_shape) != (n, k // group):
        raise TilusArgumentError(
            f"scales: shape {list(s_shape)}, expected [N, K / group] = [{n}, {k // group}]"
        )
    return m, n, k


def _weight_shape(w_packed, wdtype) -> tuple[int, int]:
    """(N, K) of packed weight bytes uint8 [N, K * bits / 8]; a :class:`TilusArgumentError`
    naming ``w_packed`` otherwise."""
    nbits = wdtype.nbits
    shape = list(w_packed.shape)
    if len(shape) != 2 or shape[1] * 8 % nbits or str(w_packed.dtype) != "torch.uint8":
        raise TilusArgumentError(
            f"w_packed: {str(w_packed.dtype).replace('torch.', '')} {shape} is not uint8 "
            f"[N, K * {nbits} / 8] bytes of {wdtype}"
        )
    return shape[0], shape[1] * 8 // nbits


@dataclass(frozen=True)
class WxA16Weights:
    """X-bit weights made ready once for :func:`matmul_wx_a16` by :func:`prepare_weights`.

    Attributes:
        wdtype: the weight type (``uint4b``, ``int4b``, ... any of ``WEIGHT_TYPES``).
        group: K of one scale.
        n, k: the weight's shape [N, K].
        w_packed: the plain packed bytes uint8 [N, K * bits / 8] (the decode and the
            pipelined kernels read these).
        scales: fp16 [N, K / group].
        w_prepacked: the bytes in mma fragment order (``matmul_wx_a16_mma.prepack_torch``,
            [N padded to 16, K * bits / 8]) for weights of ``mma_codecs.MMA_TYPES`` with a
            group that is a multiple of 128, else None.
    """

    wdtype: object
    group: int
    n: int
    k: int
    w_packed: object
    scales: object
    w_prepacked: object = None


def prepare_weights(w_packed, scales, *, wdtype=tilus.uint4b, group: int = 128) -> WxA16Weights:
    """The weights object of plain packed weights ``w_packed`` (uint8 [N, K * bits / 8], code
    k of a row at bit ``k * bits``) and their fp16 ``scales`` [N, K / group], made once per
    weight (on the weights' device, with torch): it checks the shapes (a
    :class:`TilusArgumentError` naming the argument) and, for the mma kernel's types
    (``mma_codecs.MMA_TYPES``) with a group that is a multiple of 128, adds the mma
    fragment-order copy the decode-M kernel reads (so it holds those weights twice: the plain
    bytes serve the large-M kernels)."""
    import torch

    if wdtype not in WEIGHT_TYPES:
        raise TilusArgumentError(
            f"wdtype must be a 1-8-bit integer or sub-byte float, got {wdtype}"
        )
    if not isinstance(group, int) or group <= 0:
        raise TilusArgumentError(f"group must be a positive int, got {group!r}")
    n, k = _weight_shape(w_packed, wdtype)
    if k % group:
        raise TilusArgumentError(f"w_packed: K = {k} is not a multiple of the scale group {group}")
    if list(scales.shape) != [n, k // group] or scales.dtype != torch.float16:
        raise TilusArgumentError(
            f"scales: {str(scales.dtype).replace('torch.', '')} {list(scales.shape)}, expected "
            f"float16 [N, K / group] = [{n}, {k // group}]"
        )
    pre = None
    if wdtype in mma.MMA_TYPES and group % mma.CHUNK == 0:
        pre = mma.prepack_torch(torch, w_packed, wdtype)
    return WxA16Weights(wdtype, group, n, k, w_packed, scales, pre)


def pick_kernel(m: int, weights: WxA16Weights):
    """(the kernel, the weight bytes it reads) for ``m`` rows of X: weights prepared with the
    mma copy (``w_prepacked``) up to ``MMA_MAX_M`` rows run the mma.sync kernel (``matmul_wx_a16_mma.py``); otherwise up to
    ``DECODE_M`` rows (and every M for types other than int4b/uint4b) the memory-streaming
    decode kernel (``matmul_wx_a16_decode.py``), more rows the pipelined WGMMA one
    (``matmul_wx_a16_pipe.py``), from ``PREFILL_MIN_M`` rows if set (groups that are
    multiples of 128) the persistent prefill one (``matmul_wx_a16_prefill.py``); from
    ``DEQUANT_MIN_M`` rows (``DEQUANT_MIN_M_OTHER`` for types other than int4b/uint4b) the
    weights dequantized to fp16, then V7 (``matmul_wx_a16_dequant.py``). Each is its default
    constructor, tuned on first use."""
    wd, g = weights.wdtype, weights.group
    four = wd in (tilus.uint4b, tilus.int4b)
    if weights.w_prepacked is not None and m <= MMA_MAX_M:
        return mma.MatmulWxA16Mma(wd, g), weights.w_prepacked
    from_m = DEQUANT_MIN_M if four else DEQUANT_MIN_M_OTHER
    if from_m is not None and m >= from_m:
        return MatmulWxA16Dequant(wd, g), weights.w_packed
    if m <= DECODE_M or not four:
        return decode_kernel(wd, g), weights.w_packed
    if PREFILL_MIN_M is not None and m >= PREFILL_MIN_M and g % 128 == 0:
        return MatmulWxA16Prefill(wd, g), weights.w_packed
    return MatmulWxA16Pipe(wd, g), weights.w_packed


def matmul_wx_a16(x, w, scales=None, *, wdtype=None, group: int | None = None, out=None):
    """``x @ dequant(w)^T`` on torch tensors (CUDA; CPU ones run on the interpreter): x fp16
    [M, K]; ``w`` either a :class:`WxA16Weights` from :func:`prepare_weights` (the fastest
    kernel for every M; ``scales``, ``wdtype`` and ``group`` then come from it: passing other
    ones is refused) or plain packed bytes uint8 [N, K * bits / 8] with ``scales`` fp16
    [N, K / group] (``wdtype`` uint4b and ``group`` 128 by default; the mma.sync kernel needs
    the prepared copy, so decode M runs the decode kernel). Returns (or fills ``out``) fp16
    [M, N]. Every shape is checked before anything runs (a :class:`TilusArgumentError` naming
    the argument); :func:`pick_kernel` says which kernel runs."""
    import torch

    if isinstance(w, WxA16Weights):
        if scales is not None:
            raise TilusArgumentError("scales: the weights object holds its scales; pass none")
        if wdtype is not None and wdtype != w.wdtype:
            raise TilusArgumentError(f"wdtype: {wdtype} given, the weights are {w.wdtype}")
        if group is not None and group != w.group:
            raise TilusArgumentError(f"group: {group} given, the weights have group {w.group}")
        weights = w
    else:
        if scales is None:
            raise TilusArgumentError("scales: required with plain packed weights")
        wdtype = tilus.uint4b if wdtype is None else wdtype
        if wdtype not in WEIGHT_TYPES:
            raise TilusArgumentError(
                f"wdtype must be a 1-8-bit integer or sub-byte float, got {wdtype}"
            )
        group = 128 if group is None else group
        n, k = _weight_shape(w, wdtype)
        if len(x.shape) == 2:
            check_args(x.shape, (n, k), scales.shape, group)
        weights = WxA16Weights(wdtype, group, n, k, w, scales)
    if len(x.shape) != 2 or x.shape[1] != weights.k:
        raise TilusArgumentError(f"x: shape {list(x.shape)}, expected [M, K = {weights.k}]")
    m, n = x.shape[0], weights.n
    if out is None:
        out = torch.empty((m, n), dtype=torch.float16, device=x.device)
    elif list(out.shape) != [m, n]:
        raise TilusArgumentError(f"out: shape {list(out.shape)}, expected [M, N] = [{m}, {n}]")
    kernel, wbytes = pick_kernel(m, weights)
    kernel(m, n, weights.k, x, wbytes, weights.scales, out)
    return out


def reference(x: np.ndarray, codes: np.ndarray, scales: np.ndarray, wdtype, group: int):
    """float32 ``x @ dequant(codes)^T``: the codes (unsigned integers) decoded as ``wdtype``
    (integers sign-extended, floats by their format), less the zero point of an unsigned type."""
    from tilus.packing import decode

    v = decode(codes, wdtype).astype(np.float32) - zero_point(wdtype)
    w = v * np.repeat(scales.astype(np.float32), group, axis=1)
    return x.astype(np.float32) @ w.T


def random_problem(rng, m: int, n: int, k: int, group: int, wdtype=tilus.uint4b):
    """X, the weight codes (uint64) and scales of a random problem; the packed weight bytes."""
    from tilus.packing import decode
    from tilus.tensor import pack

    nbits = wdtype.nbits
    x = rng.standard_normal((m, k)).astype(np.float16)
    finite = np.flatnonzero(np.isfinite(decode(np.arange(1 << nbits), wdtype)))
    codes = rng.choice(finite, (n, k)).astype(np.uint64)  # no inf/nan codes
    scales = (rng.random((n, k // group)) * 0.1 + 0.01).astype(np.float16)
    return x, codes, scales, pack(codes, nbits)


def torch_problem(torch, m: int, n: int, k: int, group: int, wdtype=tilus.uint4b, device="cuda"):
    """A random problem on ``device``: x fp16, the packed weight bytes (random bytes: every
    code appears; float types keep only finite codes), scales and the fp16 dequantized
    weights for the reference ``x @ w16.T``."""
    from tilus.packing import decode

    nb = wdtype.nbits
    table = torch.tensor(decode(np.arange(1 << nb), wdtype).astype(np.float32), device=device)
    table -= zero_point(wdtype)
    x = torch.randn(m, k, dtype=torch.float16, device=device)
    w = torch.randint(0, 256, (n, k * nb // 8), dtype=torch.uint8, device=device)
    bits = (w[:, :, None] >> torch.arange(8, device=device, dtype=torch.uint8)) & 1
    bits = bits.reshape(n, k, nb).to(torch.int64)
    codes = (bits << torch.arange(nb, device=device)).sum(-1)
    del bits
    vals = table[codes]
    if not torch.isfinite(table).all():  # replace inf/nan codes by 0 (code 0 decodes to 0)
        bad = ~torch.isfinite(vals)
        vals[bad] = 0.0 - zero_point(wdtype)
        codes[bad] = 0
        codes = codes.reshape(n, k, 1) >> torch.arange(nb, device=device)  # back to bytes
        bits = (codes & 1).reshape(n, k * nb // 8, 8).to(torch.uint8)
        w = (bits << torch.arange(8, device=device, dtype=torch.uint8)).sum(-1).to(torch.uint8)
    s = (torch.rand(n, k // group, device=device) * 0.02 + 0.002).half()
    w16 = (vals * s.float().repeat_interleave(group, dim=1)).half()
    return x, w.contiguous(), s, w16


def run_interp(wdtype, group: int, m: int, n: int, k: int, kernel=None, **cfg) -> float:
    """Run one config of ``kernel`` (a Script class, ``MatmulWxA16`` by default) on the
    interpreter; returns the max relative error to the reference."""
    rng = np.random.default_rng()
    x, codes, scales, packed = random_problem(rng, m, n, k, group, wdtype)
    check_args(x.shape, codes.shape, scales.shape, group)
    y = np.full((m, n), np.nan, np.float16)
    (kernel or MatmulWxA16)(wdtype, group, **cfg)(m, n, k, x, packed, scales, y)
    ref = reference(x, codes, scales, wdtype, group)
    err = np.abs(y.astype(np.float32) - ref).max() / (np.abs(ref).max() + 1e-6)
    return float(err)


def run_entry(wdtype, group: int, m: int, n: int, k: int) -> tuple[float, str]:
    """:func:`matmul_wx_a16` on prepared weights (CPU torch tensors: the interpreter) into a
    NaN-poisoned output; (the max relative error to torch float32, the kernel's name)."""
    import torch

    x, w, s, w16 = torch_problem(torch, m, n, k, group, wdtype, device="cpu")
    weights = prepare_weights(w, s, wdtype=wdtype, group=group)
    y = torch.full((m, n), float("nan"), dtype=torch.float16)
    with tilus.option.scoped(interpret=True):
        matmul_wx_a16(x, weights, out=y)
    ref = x.float() @ w16.float().T
    err = (y.float() - ref).abs().max() / ref.abs().max()
    return float(err), pick_kernel(m, weights)[0].script_cls.__name__


def main() -> int:
    """Interpreter self-check at ragged sizes; returns the exit status."""
    ok = True
    for wdtype, group in [(tilus.uint4b, 128), (tilus.int4b, 64)]:
        err = run_interp(wdtype, group, 19, 100, 256, block_m=16, block_k=64, reg_a=True, split_k=1)
        good = err < 1e-2
        ok &= good
        print(f"{wdtype} group {group}: max rel err {err:.2e}  {'ok' if good else 'FAIL'}")
        cfg = dict(rows=2, reps=1, block_m=4, stages=4)
        err = run_interp(wdtype, group, 6, 37, 1280, kernel=MatmulWxA16Decode, **cfg)
        good = err < 1e-2
        ok &= good
        print(f"{wdtype} group {group} decode: max rel err {err:.2e}  {'ok' if good else 'FAIL'}")
    for m in (3, MMA_MAX_M + 5):  # the entry on prepared weights: the mma kernel, the pipe one
        err, name = run_entry(tilus.uint4b, 128, m, 70, 384)
        good = err < 1e-2
        ok &= good
        print(f"matmul_wx_a16 M={m} ({name}): max rel err {err:.2e}  {'ok' if good else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
