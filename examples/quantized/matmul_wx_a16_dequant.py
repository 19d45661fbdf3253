"""Large-M WxA16 matmul: the weights dequantized to fp16 by a tilus kernel, then V7's matmul.

At prefill M (hundreds to thousands of rows of X) ``Y = X @ dequant(W)^T`` is compute-bound: the
weights are read once and every code feeds M products. A kernel that dequantizes inside the
mainloop spends issue slots and registers of the tensor-core warps on the casts; here the
weights are instead dequantized once into an fp16 workspace ``[N, K]`` by ``DequantWx``, a
memory-streaming kernel (it reads ``N * K * bits / 8`` bytes and the scales and writes ``2 * N *
K``: tens of microseconds for an LLM projection), and then V7's tuned persistent matmul
(``examples/hopper_matmul/matmul_v7.py``) computes ``X @ W16^T`` at cuBLAS speed. The
workspace is allocated per call (torch's caching allocator makes that cheap); it holds the fp16
weights, 2 bytes a code, for the length of the call.

``DequantWx`` works on runs of 32 consecutive codes of a weight row as the decode kernel does
(``matmul_wx_a16_decode.py``: ``nbits`` 32-bit words a run, unsigned codes shifted by their zero
point with one xor, the casts two codes at a time), multiplies each by its group's fp16 scale
(the product is rounded once: the code and the scale are exact in fp16 and their product in
fp32, so this is the fp32 dequantize rounded to fp16) and stores the tile through shared
memory, so that a warp writes 512 contiguous bytes at a time. Every weight type of
``WEIGHT_TYPES`` and every group of 32-1024 works; N and K need not be multiples of the tile
(K a multiple of the group, as everywhere).

Run ``python examples/quantized/matmul_wx_a16_dequant.py``: the dequantize kernel against NumPy
for several weight types and the whole path against a float32 reference, at ragged sizes, on
the interpreter (no GPU) or on CUDA.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from matmul_wx_a16_decode import RUN, WEIGHT_TYPES, SignedCodes, zero_point

import tilus
from tilus import float16, int32, uint32, void_p
from tilus.errors import TilusArgumentError
from tilus.ir.layout import local, reduce, shared_reshape, shared_row_major_swizzle
from tilus.utils import cdiv

_HOPPER = Path(__file__).resolve().parent.parent / "hopper_matmul"
if str(_HOPPER) not in sys.path:
    sys.path.insert(0, str(_HOPPER))
from matmul_v7 import MatmulV7  # noqa: E402


@tilus.autotune("rows, reps", [(1, 1), (2, 1), (4, 1), (1, 2), (2, 2)])
@tilus.autotune("warps", [4, 8])
class DequantWx(SignedCodes, tilus.Script):
    """``W16[N, K] = dequant(W)`` in fp16: packed codes (``wdtype``, uint8 bytes [N, K * bits /
    8]) less their zero point, times their group's fp16 scale (``scales`` [N, K / group]). A
    thread dequantizes ``rows x reps`` runs of 32 codes; a warp's lanes lie along K. The fp16
    tile goes out through shared memory, so that a warp's stores are 512 contiguous bytes (a
    lane holds a whole 64-byte run, whose own stores would write every 32-byte sector half at
    a time: 0.26x of a copy's bandwidth where this takes 0.88-0.92x), its 16-byte chunks
    swizzled so that neither the runs' writes nor the rows' reads conflict on banks."""

    def __init__(self, wdtype=tilus.uint4b, group: int = 128, rows: int = 2, reps: int = 1,
                 warps: int = 4):  # fmt: skip
        super().__init__()
        if wdtype not in WEIGHT_TYPES:
            raise TilusArgumentError(
                f"wdtype must be a 1-8-bit integer or sub-byte float, got {wdtype}"
            )
        if not isinstance(group, int) or group % RUN or group < RUN or 32 % (group // RUN):
            raise TilusArgumentError(f"group must be 32, 64, 128, 256, 512 or 1024, got {group}")
        for name, v in (("rows", rows), ("reps", reps), ("warps", warps)):
            if not isinstance(v, int) or v < 1:
                raise TilusArgumentError(f"{name} must be a positive int, got {v!r}")
        self.wdtype, self.group, self.rows, self.reps, self.warps = wdtype, group, rows, reps, warps
        self.words = list(range(wdtype.nbits))  # a host list: the words of a run

    def __call__(self, n_size: int32, k_size: int, w_ptr: void_p, s_ptr: ~float16,
                 o_ptr: ~float16):  # fmt: skip
        g, nb = self.group, self.wdtype.nbits
        cpg = g // RUN  # runs a group
        msg = f"K = {k_size} is not a multiple of the scale group {g}"
        self.static_assert(k_size % g == 0, msg)  # CHECK:group
        lg = 32 // cpg  # groups along a warp's lanes
        bn, bg = self.rows * self.warps, self.reps * lg  # rows and groups of a block's tile
        ng = k_size // g
        self.attrs.blocks = [cdiv(n_size, bn), cdiv(ng, bg)]
        self.attrs.warps = self.warps
        gw = self.global_view(w_ptr, dtype=uint32, shape=[n_size, ng, cpg, nb])
        gs = self.global_view(s_ptr, dtype=float16, shape=[n_size, ng, 1, 1])
        go = self.global_view(o_ptr, dtype=float16, shape=[n_size, ng, cpg, RUN])
        tile = local(self.rows, self.reps, 1, 1).spatial(self.warps, lg, cpg, 1)
        on: int32 = bn * self.blockIdx.x
        og: int32 = bg * self.blockIdx.y
        qb = self.load_global(gw, offsets=[on, og, 0, 0], shape=[bn, bg, cpg, nb])
        self.annotate_layout(qb, tile.local(1, 1, 1, nb))
        s = self.load_global(gs, offsets=[on, og, 0, 0], shape=[bn, bg, 1, 1])
        self.annotate_layout(s, reduce(tile.local(1, 1, 1, RUN), [2, 3], keepdims=True))
        w = self.cast(self.signed_codes(qb), float16) * s
        shape = [bn, bg, cpg, RUN]  # 16-byte chunks swizzled: conflict-free both ways
        rows = shared_row_major_swizzle([bn * bg * cpg, RUN], 2)
        buf = self.shared_tensor(dtype=float16, shape=shape, layout=shared_reshape(rows, shape))
        self.store_shared(buf, w)
        self.sync()  # re-read in the blocked layout that a coalesced store takes
        self.store_global(go, self.load_shared(buf), offsets=[on, og, 0, 0])


class MatmulWxA16Dequant:
    """``Y = X @ dequant(W)^T`` for large M (the arguments of the other WxA16 kernels: ``m, n,
    k, x, w_packed, scales, y``): ``DequantWx`` into an fp16 workspace, then ``MatmulV7``, each
    its default constructor tuned on first use (or the kernels given)."""

    def __init__(self, wdtype=tilus.uint4b, group: int = 128, dequant=None, matmul=None):
        self.wdtype, self.group = wdtype, group
        self.dequant = dequant if dequant is not None else DequantWx(wdtype, group)
        self.matmul = matmul if matmul is not None else MatmulV7()
        self.script_cls = type(self)  # for the benches' "which kernel ran" line

    def __call__(self, m, n, k, x, w, s, y):
        w16 = _empty_like_weights(x, n, k)
        self.dequant(n, k, w, s, w16)
        self.matmul(m, n, k, x, w16, y)
        return y


def _empty_like_weights(x, n: int, k: int):
    """An uninitialized fp16 [n, k] workspace on ``x``'s device (torch or NumPy, as ``x``)."""
    if isinstance(x, np.ndarray):
        return np.empty((n, k), np.float16)
    import torch

    return torch.empty((n, k), dtype=torch.float16, device=x.device)


#: a small pinned V7 config for the interpreter checks
SMALL_V7 = dict(block_m=64, block_n=64, block_k=64, num_stages=2, split_k=1, swizzle=1,
                cluster_n=1, coop=0, epilogue="tma", stream_k=0)  # fmt: skip


def dequant_reference(codes: np.ndarray, scales: np.ndarray, wdtype, group: int) -> np.ndarray:
    """fp16 ``dequant(codes)``: decoded codes less the zero point, times the scales, in
    float64, rounded once to fp16."""
    from tilus.packing import decode

    v = decode(codes, wdtype).astype(np.float64) - zero_point(wdtype)
    return (v * np.repeat(scales.astype(np.float64), group, axis=1)).astype(np.float16)


def run_dequant(wdtype, group: int, n: int, k: int, **cfg) -> int:
    """``DequantWx`` (``cfg`` pinned, else tuned) on fresh random codes into a NaN-poisoned
    workspace (NumPy: the interpreter); returns how many elements differ from the reference."""
    from matmul_wx_a16 import random_problem

    rng = np.random.default_rng()
    _, codes, scales, packed = random_problem(rng, 1, n, k, group, wdtype)
    out = np.full((n, k), np.nan, np.float16)
    DequantWx(wdtype, group, **cfg)(n, k, packed, scales, out)
    ref = dequant_reference(codes, scales, wdtype, group)
    return int((out.view(np.uint16) != ref.view(np.uint16)).sum())


def main() -> int:
    """Interpreter (or CUDA) self-check at ragged sizes; returns the exit status."""
    from matmul_wx_a16 import run_interp

    ok = True
    cases = [(tilus.uint4b, 128), (tilus.int3b, 64), (tilus.float6_e3m2, 32), (tilus.uint8, 256)]
    for wdtype, group in cases:
        bad = run_dequant(wdtype, group, 37, 3 * group, rows=2, reps=1, warps=4)
        ok &= bad == 0
        print(f"DequantWx {wdtype} group {group} 37x{3 * group}: {bad} elements differ "
              f"{'ok' if bad == 0 else 'FAIL'}")  # fmt: skip
    v7 = MatmulV7(num_sms=3, **SMALL_V7)
    path = MatmulWxA16Dequant(
        tilus.uint4b, 128, DequantWx(tilus.uint4b, 128, rows=1, reps=1, warps=4), v7
    )
    err = run_interp(tilus.uint4b, 128, 70, 100, 384, kernel=lambda *a: path)
    good = err < 1e-2
    ok &= good
    print(f"MatmulWxA16Dequant 70x100x384: max rel err {err:.2e}  {'ok' if good else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
