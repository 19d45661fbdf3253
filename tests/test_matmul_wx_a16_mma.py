"""The mma.sync decode W4A16 kernel on the CPU: the offline packing, interpreter results at
ragged sizes, located refusals, and NVRTC builds without spills."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import tilus
from tests.cuda.conftest import needs_nvrtc
from tilus.testing import marker_line

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples" / "quantized"))
import matmul_wx_a16 as ex  # noqa: E402
import matmul_wx_a16_mma as mma  # noqa: E402
import mma_space  # noqa: E402

F16 = tilus.float16


def test_prepack_puts_each_lanes_fragment_codes_in_its_32_bytes():
    rng = np.random.default_rng()
    n, k = 21, 256
    codes = rng.integers(0, 16, (n, k))
    packed = mma.prepack(codes, tilus.int4b)
    assert packed.shape == (32, 128)  # N padded to 16
    flat = np.stack([packed & 0xF, packed >> 4], axis=-1).reshape(-1)  # the codes in order
    # chunk (R=0, G=1), lane g=3, q=2: its 64 codes are rows 3 and 11, K 128 + 16s + 8h + 4 + e;
    # word s holds fragment register j = 2h + rh's element e in nibble j + 4e, an int4b code
    # XOR 8 (c + 8)
    base = (0 * (k // 128) + 1) * 2048 + (3 * 4 + 2) * 64
    got = flat[base : base + 64].reshape(8, 2, 2, 2) ^ 8  # s, e, h, rh
    for s in range(8):
        for h in range(2):
            for rh in range(2):
                for e in range(2):
                    kk = 128 + 16 * s + 8 * h + 2 * 2 + e
                    assert got[s, e, h, rh] == codes[3 + 8 * rh, kk]
    padded = np.full((32, k), 8, codes.dtype)  # int4b 8 = -8: stored as the nibble 0
    padded[:n] = codes
    assert (mma.prepack(padded, tilus.int4b) == packed).all()  # the padding rows are zeros
    with pytest.raises(tilus.TilusArgumentError, match="multiple of 128"):
        mma.prepack(codes[:, :192])


def test_magic_numbers_dequantize_every_code_of_every_register_exactly():
    # a word's fragment register j: nibbles j and j + 4 shifted and masked under the exponent
    # of 1024, then less the bias in f16 (the kernel's ``fragment``): c, or 16 c in row half 1
    assert [mma.magic_shr(j) for j in range(4)] == list(mma.MAGIC_SHR)
    assert [mma.magic_mask(j) for j in range(4)] == list(mma.MAGIC_MASK)
    assert [mma.magic_bias(rh, 0) for rh in range(2)] == list(mma.MAGIC_BIAS)
    assert [mma.magic_row_scale(r, 0) for r in (0, 7, 8, 15, 16)] == [1, 1, 0.0625, 0.0625, 1]
    for c in [np.arange(-8, 0), np.arange(0, 8)] + [np.random.default_rng().integers(-8, 8, 8)]:
        word = int(sum(((int(v) + 8) & 0xF) << (4 * j) for j, v in enumerate(c)))  # prepack's
        for j in range(4):
            f = ((word >> mma.MAGIC_SHR[j]) & mma.MAGIC_MASK[j]) | mma.MAGIC_EXP
            halves = np.array([f & 0xFFFF, f >> 16], np.uint16).view(np.float16)
            got = halves.astype(np.float32) - mma.MAGIC_BIAS[j & 1]  # rh = j & 1
            assert (got == c[[j, j + 4]] * (16 if j & 1 else 1)).all(), (c, j, got)


@pytest.mark.parametrize(
    "wdtype, group, m, n, k, cfg",
    [(tilus.uint4b, 128, 1, 37, 640, dict(block_m=8, split_k=3, unroll=2)),  # a ragged last step
     (tilus.int4b, 256, 13, 70, 1024, dict(block_m=16, split_k=2, unroll=2)),
     (tilus.uint4b, 128, 19, 20, 384, dict(block_m=16, split_k=4, unroll=1)),  # two M tiles
     # the weights a step or two ahead in registers, X a window at a time (parts of several
     # windows, a last one cut short; two M tiles: one part of several windows)
     (tilus.uint4b, 128, 1, 37, 640, dict(block_m=8, split_k=2, unroll=1, prefetch=2, x_steps=2)),
     (tilus.int4b, 256, 13, 70, 1024, dict(block_m=16, split_k=3, unroll=2, prefetch=1)),
     (tilus.uint4b, 128, 19, 20, 640, dict(block_m=8, split_k=2, unroll=2, prefetch=2, x_steps=2)),
     # two chunks in four parts: two parts empty (their prefetch reads nothing useful)
     (tilus.uint4b, 128, 1, 45, 256,
      dict(block_m=8, split_k=4, unroll=1, prefetch=1, x_steps=16, unroll_steps=2)),
     # the weights through the cp.async ring (a ragged last step, empty parts, two M tiles),
     # the scales a step or two ahead
     (tilus.uint4b, 128, 1, 37, 640, dict(block_m=8, split_k=3, unroll=2, w_ring=True)),
     (tilus.int4b, 256, 13, 70, 1024,
      dict(block_m=16, split_k=3, unroll=1, w_ring=True, prefetch=2, stages=4)),
     (tilus.uint4b, 128, 19, 20, 640, dict(block_m=8, split_k=2, unroll=2, w_ring=True, prefetch=1)),
     (tilus.uint4b, 128, 1, 45, 256, dict(block_m=8, split_k=4, unroll=1, w_ring=True, prefetch=1)),
     # the ring's weights as TMA boxes on an mbarrier a slot
     (tilus.uint4b, 128, 1, 37, 640, dict(block_m=8, split_k=3, unroll=2, w_ring=True, w_tma=True)),
     (tilus.int4b, 256, 13, 70, 1024,
      dict(block_m=16, split_k=3, unroll=1, w_ring=True, w_tma=True, prefetch=2, stages=4)),
     (tilus.uint4b, 128, 1, 45, 256,
      dict(block_m=8, split_k=4, unroll=1, w_ring=True, w_tma=True, prefetch=1)),
     # X as TMA boxes too
     (tilus.uint4b, 128, 1, 37, 640,
      dict(block_m=8, split_k=3, unroll=2, w_ring=True, w_tma=True, x_tma=True)),
     (tilus.int4b, 256, 13, 70, 1024,
      dict(block_m=16, split_k=3, unroll=1, w_ring=True, w_tma=True, x_tma=True, prefetch=2)),
     (tilus.uint4b, 128, 19, 20, 640,
      dict(block_m=8, split_k=2, unroll=2, w_ring=True, w_tma=True, x_tma=True, prefetch=1)),
     # two or four warp groups on alternate chunks of each step (split 1, a ragged last step;
     # split 3 with empty parts; two M tiles with the scales two steps ahead)
     (tilus.uint4b, 128, 1, 37, 640, dict(block_m=8, split_k=1, unroll=2, kgroups=2,
                                          w_ring=True, w_tma=True, x_tma=True, prefetch=1)),
     (tilus.uint4b, 128, 1, 45, 256, dict(block_m=8, split_k=3, unroll=2, kgroups=2,
                                          w_ring=True, w_tma=True, x_tma=True, prefetch=1)),
     (tilus.int4b, 256, 13, 70, 1024, dict(block_m=16, split_k=2, unroll=4, kgroups=4, stages=2,
                                           w_ring=True, w_tma=True, x_tma=True)),
     (tilus.uint4b, 128, 19, 20, 640, dict(block_m=8, split_k=2, unroll=4, kgroups=2,
                                           w_ring=True, w_tma=True, x_tma=True, prefetch=2)),
     # a producer warp issues the copies (one warp group; four; split 3 with empty parts)
     (tilus.uint4b, 128, 1, 37, 640, dict(block_m=8, split_k=2, unroll=2, producer=True,
                                          w_ring=True, w_tma=True, x_tma=True, prefetch=1)),
     (tilus.int4b, 256, 13, 70, 1024, dict(block_m=16, split_k=1, unroll=4, kgroups=4, stages=2,
                                           min_blocks=1, producer=True, w_ring=True, w_tma=True,
                                           x_tma=True)),
     (tilus.uint4b, 128, 1, 45, 256, dict(block_m=8, split_k=3, unroll=2, kgroups=2,
                                          min_blocks=2, producer=True, w_ring=True, w_tma=True,
                                          x_tma=True, prefetch=1)),
     # the scales staged in shared memory (four groups with a producer; split 3; cp.async)
     (tilus.uint4b, 128, 1, 37, 1024, dict(block_m=8, split_k=1, unroll=4, kgroups=4,
                                           min_blocks=1, producer=True, s_smem=True,
                                           w_ring=True, w_tma=True, x_tma=True)),
     (tilus.int4b, 256, 13, 70, 2048, dict(block_m=16, split_k=3, unroll=2, s_smem=True,
                                           w_ring=True, w_tma=True, x_tma=True)),
     (tilus.uint4b, 128, 19, 20, 640, dict(block_m=8, split_k=2, unroll=2, s_smem=True))],
)  # fmt: skip
def test_interpreter_matches_dequantize_then_matmul(wdtype, group, m, n, k, cfg):
    assert mma.run_interp(wdtype, group, m, n, k, **cfg) < 1e-2


def test_k_not_a_multiple_of_the_group_is_reported_at_its_check():
    m, n, k = 1, 16, 384
    x, codes, _s, _packed = ex.random_problem(np.random.default_rng(), m, n, k, 128)
    y = np.full((m, n), np.nan, np.float16)
    kernel = mma.MatmulWxA16Mma(tilus.uint4b, 256, **mma.pinned(block_m=8, split_k=1, unroll=1))
    with pytest.raises(tilus.TilusProgramError, match="K = 384 is not a multiple") as info:
        kernel(m, n, k, x, mma.prepack(codes), np.ones((n, 2), np.float16), y)
    err = info.value
    assert err.loc is not None and err.loc.line == marker_line(mma.MatmulWxA16Mma, "CHECK:group")
    assert err.loc.file.endswith("matmul_wx_a16_mma.py")
    assert np.isnan(y).all()


@pytest.mark.parametrize(
    "kw, what",
    [(dict(wdtype=tilus.float7_e5m1), "wdtype"), (dict(group=64), "group"),
     (dict(block_m=4), "block_m"), (dict(warps=6), "warps"), (dict(prefetch=3), "prefetch"),
     (dict(x_steps=-1), "x_steps"), (dict(w_ring=True, x_steps=2), "w_ring needs the X ring"),
     (dict(w_tma=True), "w_tma needs w_ring"), (dict(w_ring=True, x_tma=True), "x_tma needs"),
     (dict(unroll=2, kgroups=3), "kgroups must be"), (dict(unroll=1, kgroups=2), "divide unroll"),
     (dict(unroll=2, kgroups=2, w_ring=True, w_tma=True), "kgroups > 1 needs x_tma"),
     (dict(w_ring=True, w_tma=True, producer=True), "producer needs x_tma"),
     (dict(s_smem=True, x_steps=2), "s_smem needs the X ring"),
     (dict(s_smem=True, prefetch=1), "prefetch must be 0"),
     (dict(unroll=2, w_ring=True, w_tma=True, x_mcast=True), "x_mcast needs x_tma"),
     (dict(w_ring=True, w_tma=True, x_tma=True, x_mcast=True), "an even unroll")],
)  # fmt: skip
def test_unsupported_arguments_are_refused(kw, what):
    m, n, k = 1, 16, 256
    x, codes, s, _packed = ex.random_problem(np.random.default_rng(), m, n, k, 128)
    y = np.full((m, n), np.nan, np.float16)
    cfg = dict(block_m=8, split_k=1, unroll=1)
    cfg.update(kw)
    with pytest.raises(tilus.TilusArgumentError, match=what):
        mma.MatmulWxA16Mma(**mma.pinned(**cfg))(m, n, k, x, mma.prepack(codes), s, y)


@needs_nvrtc
def test_configs_build_without_spills():
    space = mma.MatmulWxA16Mma().configs
    extra = [dict(split_k=4, prefetch=1, x_steps=16, unroll_steps=2),
             dict(split_k=5, prefetch=1, x_steps=16, min_blocks=5),
             dict(split_k=4, w_ring=True, prefetch=1, stages=4),
             dict(split_k=4, w_ring=True, w_tma=True, prefetch=1, stages=4),
             dict(split_k=4, w_ring=True, w_tma=True, x_tma=True, prefetch=1, stages=4)]  # fmt: skip
    keys = [k.strip() for k in mma.MMA_KEYS.split(",")]
    outside = [
        dict(zip(keys, c))
        for c in mma_space.MMA_PRODUCER
        + mma_space.MMA_SCALES
        + mma_space.MMA_WIDE
        + mma_space.MMA_MCAST
        + mma_space.MMA_DEEP
    ]
    # 5-17 warps a block: warp groups, 8-warp blocks
    groups = [c for c in space if c["kgroups"] > 1 or c["warps"] > 4] + outside
    for cfg in space[:2] + [dict(block_m=8, unroll=1, **e) for e in extra] + groups:
        ck = tilus.compile(mma.MatmulWxA16Mma(tilus.uint4b, 128, **mma.pinned(**cfg)), 1, 100, 1024, F16,
                           tilus.uint8, F16, F16)  # fmt: skip
        ck = ck[0] if isinstance(ck, list) else ck
        assert ck.resources["spill_store_bytes"] == 0, (cfg, ck.log)


@pytest.mark.parametrize("seed", [None, 3], ids=["in-order", "shuffled"])
def test_tma_ring_refills_wait_for_every_reader(seed):
    # 16 K steps through 2 slots (X and W by TMA): each refill waits on the slot's empty
    # barrier, which every thread arrives on after reading it (no block-wide barrier a step)
    cfg = dict(block_m=8, split_k=1, unroll=1, w_ring=True, w_tma=True, x_tma=True, stages=2)
    with tilus.option.scoped(schedule_seed=seed):
        assert mma.run_interp(tilus.uint4b, 128, 3, 37, 2048, **cfg) < 1e-2


@pytest.mark.parametrize("kgroups", [1, 2])
def test_eight_warp_blocks_hold_128_rows(kgroups):
    # 128 rows of W a block (8 warps of 16), split 2, one or two warp groups: a ragged N
    # leaves the second 64 rows of the last tile partly out of range, and the split-K
    # workspace holds 128-row parts
    cfg = dict(block_m=16, split_k=2, unroll=2, warps=8, kgroups=kgroups, w_ring=True,
               w_tma=True, x_tma=True, stages=3, prefetch=1)  # fmt: skip
    assert mma.run_interp(tilus.uint4b, 128, 13, 200, 1536, **cfg) < 1e-2


@pytest.mark.parametrize("seed", [None, 5], ids=["in-order", "shuffled"])
def test_warp_groups_meet_on_their_mbarriers(seed):
    # two warp groups on alternate chunks of 8 steps through 2 slots: both arrive on a slot's
    # empty barrier, and group 0 adds group 1's sums only after its arrival on the hand-over
    cfg = dict(block_m=8, split_k=1, unroll=2, kgroups=2, w_ring=True, w_tma=True, x_tma=True,
               stages=2, prefetch=1)  # fmt: skip
    with tilus.option.scoped(schedule_seed=seed):
        assert mma.run_interp(tilus.uint4b, 128, 3, 37, 2048, **cfg) < 1e-2


@pytest.mark.parametrize("seed", [None, 7], ids=["in-order", "shuffled"])
def test_producer_warp_refills_a_slot_only_after_its_readers(seed):
    # a producer warp runs 16 steps ahead through 2 slots: each refill waits on the slot's
    # empty barrier, which both reading warp groups arrive on
    cfg = dict(block_m=8, split_k=1, unroll=2, kgroups=2, w_ring=True, w_tma=True, x_tma=True,
               stages=2, prefetch=1, min_blocks=2, producer=True)  # fmt: skip
    with tilus.option.scoped(schedule_seed=seed):
        assert mma.run_interp(tilus.uint4b, 128, 3, 37, 4096, **cfg) < 1e-2


def test_too_many_scale_groups_for_s_smem_is_reported_at_its_check():
    m, n, k = 1, 16, 128 * 264
    x, codes, s, _packed = ex.random_problem(np.random.default_rng(), m, n, k, 128)
    y = np.full((m, n), np.nan, np.float16)
    kernel = mma.MatmulWxA16Mma(tilus.uint4b, 128, **mma.pinned(block_m=8, split_k=1, unroll=1,
                                                                 s_smem=True))  # fmt: skip
    with pytest.raises(tilus.TilusProgramError, match="264 is more than 256") as info:
        kernel(m, n, k, x, mma.prepack(codes), s, y)
    assert info.value.loc.line == marker_line(mma.MatmulWxA16Mma, "CHECK:s_smem")
    assert np.isnan(y).all()


def test_dense_prepack_puts_each_register_pair_side_by_side_in_the_lanes_run():
    from tilus.packing import unpack

    rng = np.random.default_rng()
    n, k = 21, 256
    for wdtype in (tilus.uint3b, tilus.int2b, tilus.uint1b):
        nb = wdtype.nbits
        codes = rng.integers(0, 1 << nb, (n, k))
        packed = mma.prepack(codes, wdtype)
        assert packed.shape == (32, k * nb // 8)  # N padded to 16
        flat = unpack(packed.reshape(-1), nb, 32 * k).astype(np.int64)
        # chunk (R=0, G=1), lane g=3, q=2: 64 codes in the order K step, K half, row half,
        # pair element; an unsigned code with its top bit flipped
        base = (0 * (k // 128) + 1) * 2048 + (3 * 4 + 2) * 64
        got = flat[base : base + 64].reshape(8, 2, 2, 2) ^ mma.code_flip(wdtype)  # s, h, rh, e
        flip = 1 << (nb - 1) if wdtype.kind == "uint" else 0
        assert mma.code_flip(wdtype) == flip
        for s in range(8):
            for h in range(2):
                for rh in range(2):
                    for e in range(2):
                        assert got[s, h, rh, e] == codes[3 + 8 * rh, 128 + 16 * s + 8 * h + 4 + e]


@pytest.mark.parametrize("wdtype", mma.MMA_TYPES, ids=str)
def test_prepack_with_torch_matches_the_numpy_one(wdtype):
    import torch

    n, k = 37, 384
    _x, codes, _s, packed = ex.random_problem(np.random.default_rng(), 1, n, k, 128, wdtype)
    w = torch.from_numpy(packed.reshape(n, k * wdtype.nbits // 8).copy())
    assert (mma.prepack_torch(torch, w, wdtype).numpy() == mma.prepack(codes, wdtype)).all()


#: configs of the other types: registers, the cp.async ring, the TMA ring (split 3: a ragged
#: last step and empty parts), warp groups with a producer
OTHER_CFGS = [dict(block_m=8, split_k=3, unroll=2),
              dict(block_m=16, split_k=2, unroll=2, w_ring=True, prefetch=1),
              dict(block_m=8, split_k=3, unroll=2, w_ring=True, w_tma=True, x_tma=True,
                   prefetch=1),
              dict(block_m=16, split_k=1, unroll=4, kgroups=2, w_ring=True, w_tma=True,
                   x_tma=True, producer=True, min_blocks=2)]  # fmt: skip


@pytest.mark.parametrize("wdtype", mma.MMA_TYPES[2:], ids=str)
@pytest.mark.parametrize("m, cfg", [(1, OTHER_CFGS[0]), (13, OTHER_CFGS[1]), (1, OTHER_CFGS[2]),
                                    (19, OTHER_CFGS[3])])  # fmt: skip
def test_other_types_match_dequantize_then_matmul(wdtype, m, cfg):
    assert mma.run_interp(wdtype, 128, m, 37, 640, **cfg) < 1e-2


@pytest.mark.parametrize("wdtype", mma.MMA_TYPES[2:], ids=str)
def test_the_entry_runs_the_other_types_prepared_on_the_mma_kernel(wdtype):
    err, name = ex.run_entry(wdtype, 128, 3, 70, 384)
    assert name == "MatmulWxA16Mma" and err < 1e-2


@needs_nvrtc
@pytest.mark.parametrize("wdtype", mma.MMA_TYPES[2:], ids=str)
def test_other_types_build_without_spills_or_shared_round_trips(wdtype):
    # the paired casts leave each fragment register where the mma reads it: no layout
    # conversion through shared memory (the 4-bit integer build's ld/st.shared are its rings')
    base = mma.MatmulWxA16Mma(tilus.uint4b, 128, **mma.pinned(**OTHER_CFGS[2]))
    args = (1, 100, 1024, F16, tilus.uint8, F16, F16)
    ref = tilus.compile(base, *args)
    for cfg in OTHER_CFGS:
        ck = tilus.compile(mma.MatmulWxA16Mma(wdtype, 128, **mma.pinned(**cfg)), *args)
        assert ck.resources["spill_store_bytes"] == 0, (cfg, ck.log)
    assert ck.source.count("__syncthreads") <= ref.source.count("__syncthreads")


_MCAST = dict(w_ring=True, w_tma=True, x_tma=True, prefetch=1, x_mcast=True)


@pytest.mark.parametrize("seed", [None, 5], ids=["in-order", "shuffled"])
@pytest.mark.parametrize(
    "m, cfg",
    [(13, dict(block_m=16, split_k=1, unroll=2, stages=3)),
     (16, dict(block_m=16, split_k=1, unroll=4, stages=3, kgroups=2)),
     (1, dict(block_m=8, split_k=2, unroll=2, stages=4)),
     (5, dict(block_m=8, split_k=2, unroll=2, stages=3, producer=True))],
    ids=["pair", "pair-kgroups", "pair-split", "pair-producer"],
)  # fmt: skip
def test_cluster_pairs_multicast_x_into_both_blocks(seed, m, cfg):
    # x_mcast: two blocks of neighbouring row tiles share each X chunk (one loads it for
    # both), so a refill waits for both blocks' readers; N = 200 is 4 row tiles of 64, the
    # last ragged, and N = 37 one tile, whose pair's second block lies wholly past N
    with tilus.option.scoped(schedule_seed=seed):
        for n in (200, 37):
            assert mma.run_interp(tilus.uint4b, 128, m, n, 2048, **cfg, **_MCAST) < 1e-2


class _OwnReadersOnly(mma.MatmulWxA16Mma):
    """x_mcast with the pair's readers not counted in: each block's readers free a slot for
    its own issuer only (twice, so the barrier's count is met), not for the peer's."""

    def free_slot(self, ebar, peer, slot):
        self.mbarrier.arrive(ebar[slot], count=2)


def test_a_multicast_refill_that_waits_for_its_own_readers_only_is_reported():
    import mma_operands

    m, n, k = 13, 200, 2048
    x, codes, scales, _packed = ex.random_problem(np.random.default_rng(), m, n, k, 128)
    y = np.full((m, n), np.nan, np.float16)
    cfg = dict(block_m=16, split_k=1, unroll=2, stages=3, **_MCAST)
    kernel = _OwnReadersOnly(tilus.uint4b, 128, **mma.pinned(**cfg))
    with pytest.raises(tilus.TilusRuntimeError, match="race") as info:
        kernel(m, n, k, x, mma.prepack(codes), scales, y)
    err = info.value
    assert err.loc.line == marker_line(mma_operands.MmaOperands, "CHECK:mcast")
    assert err.loc.file.endswith("mma_operands.py")


@pytest.mark.parametrize("i", range(len(mma_space.MMA_DEEP)))
def test_deeper_m16_rings_match_dequantize_then_matmul(i):
    # the rings outside the space (r101: no faster), at a ragged size whose K range wraps each
    # ring several times (16 steps of 2 chunks through 4-6 slots)
    keys = [k.strip() for k in mma.MMA_KEYS.split(",")]
    cfg = dict(zip(keys, mma_space.MMA_DEEP[i]))
    assert mma.run_interp(tilus.uint4b, 128, 13, 200, 4096, **cfg) < 1e-2
