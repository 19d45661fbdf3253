"""Sub-byte tiles on the GPU (H200): every type, both cast directions, bit-identical to the
interpreter; packed round trips and views at ragged sizes with poisoned or sentinel outputs."""

from __future__ import annotations

import numpy as np
import pytest

import tilus
from tests.cuda.conftest import needs_gpu
from tests.lowbit_kernels import SUBBYTE, Both, Dequant, Repack, ViewBytes, both_inputs, codes
from tilus.tensor import pack

pytestmark = [pytest.mark.gpu, needs_gpu]
rng = np.random.default_rng()


def _cuda(args):
    import torch

    return [torch.from_numpy(a.copy()).cuda() if isinstance(a, np.ndarray) else a for a in args]


def _host(t):
    return t.cpu().numpy()


@pytest.mark.parametrize("dt", SUBBYTE, ids=str)
def test_casts_both_ways_bit_identical_to_the_interpreter(dt):
    args = both_inputs(rng, dt, 250, 262)
    dev = _cuda(args)
    Both(dt)(*dev)
    Both(dt)(*args)
    np.testing.assert_array_equal(_host(dev[3]).view(np.uint32), args[3].view(np.uint32))
    np.testing.assert_array_equal(_host(dev[5]), args[5])
    assert (_host(dev[5])[-4:] == 0xA5).all()


@pytest.mark.parametrize("dt", [tilus.int3b, tilus.uint4b, tilus.float6_e2m3, tilus.int1b], ids=str)
def test_packed_round_trip_with_padded_rows(dt):
    m, n, ld = 77, 301, 305
    w = pack(codes(rng, dt, (m, n)), dt.nbits)
    out = np.full((m * ld * dt.nbits + 7) // 8, 0x3C, np.uint8)
    dev = _cuda([m, n, ld, w, out])
    Repack(dt)(*dev)
    Repack(dt)(m, n, ld, w, out)
    np.testing.assert_array_equal(_host(dev[4]), out)


@pytest.mark.parametrize("dt", [tilus.int4b, tilus.uint4b, tilus.float4_e2m1], ids=str)
def test_dequant_to_f16_large_and_ragged(dt):
    m, n = 1000, 1030
    w = pack(codes(rng, dt, (m, n)), dt.nbits)
    out = np.full((m, n), np.nan, np.float16)
    dev = _cuda([m, n, w, out])
    Dequant(dt, tilus.float16, warps=4)(*dev)
    Dequant(dt, tilus.float16, warps=4)(m, n, w, out)
    np.testing.assert_array_equal(_host(dev[3]).view(np.uint16), out.view(np.uint16))


@pytest.mark.parametrize(
    "dt", [tilus.int4b, tilus.uint2b, tilus.float4_e2m1, tilus.uint1b], ids=str
)
def test_view_of_uint8_tiles(dt):
    m, n = 45, 96
    raw = pack(codes(rng, dt, (m, n)), dt.nbits).reshape(m, -1)
    out = np.full((m, n), np.nan, np.float16)
    dev = _cuda([m, n, raw, out])
    ViewBytes(dt)(*dev)
    ViewBytes(dt)(m, n, raw, out)
    np.testing.assert_array_equal(_host(dev[3]).view(np.uint16), out.view(np.uint16))


def test_packed_storage_too_small_is_refused_naming_the_argument():
    import torch

    m, n = 33, 64
    w = torch.zeros(m * n // 2 - 1, dtype=torch.uint8, device="cuda")
    out = torch.zeros((m, n), dtype=torch.float16, device="cuda")
    with pytest.raises(tilus.TilusArgumentError, match=r"'w_ptr' has 1055 bytes.*\(1056 bytes\)"):
        Dequant(tilus.int4b, tilus.float16)(m, n, w, out)
    w = torch.zeros(m * n // 2, dtype=torch.uint8, device="cuda")
    Dequant(tilus.int4b, tilus.float16)(m, n, w, out)  # exactly enough: accepted
    assert not out.isnan().any()


def _cast_configs():
    from tilus.kernels.cast import Cast

    return Cast(tilus.int4b, tilus.float16).configs


@pytest.mark.parametrize(
    "src, dst",
    [
        (tilus.int4b, tilus.float16),
        (tilus.uint4b, tilus.float16),
        (tilus.float4_e2m1, tilus.float16),
        (tilus.float6_e3m2, tilus.float16),
        (tilus.float6_e2m3, tilus.float16),
        (tilus.float16, tilus.int4b),
        (tilus.float16, tilus.float4_e2m1),
        (tilus.float16, tilus.float6_e3m2),
    ],  # fmt: skip
    ids=str,
)
@pytest.mark.parametrize("cfg", _cast_configs(), ids=str)
def test_every_cast_config_matches_the_interpreter(src, dst, cfg):
    """Every config of ``tilus.kernels.cast.Cast`` at a ragged size (the persistent ones on 3
    "SMs": each block loops over several tiles): the GPU's codes equal the interpreter's bit
    for bit (f16 sources: every f16 code, NaN and infinities included); the bytes past the
    output stay poisoned."""
    import torch

    from tilus.kernels.cast import Cast
    from tilus.packing import unpack

    n = max(1 << 16, 6 * (cfg["per_sm"] or 1) * cfg["block"]) + 77  # 2+ tiles a block
    if src.nbits % 8:
        x = tilus.Tensor(src, [n], torch.randint(0, 256, [(n * src.nbits + 7) // 8],
                                                 dtype=torch.uint8))  # fmt: skip
    else:
        codes = torch.randint(0, 1 << 16, [n], dtype=torch.int32)
        codes[: 1 << 16] = torch.arange(1 << 16)
        x = tilus.Tensor(src, [n], codes.to(torch.int16).view(torch.uint8).reshape(-1))
    want = x.to(dst)
    nbytes = (n * dst.nbits + 7) // 8
    raw = torch.full([nbytes + 16], 0xA5, dtype=torch.uint8, device="cuda")
    xs = x.storage.cuda() if src.nbits % 8 else x.torch().reshape(-1).cuda()
    ys = raw if dst.nbits % 8 else raw.view(torch.float16)
    Cast(src, dst, **cfg, num_sms=3)(n, xs, ys)
    got = raw.cpu().numpy()
    bits = unpack(got[:nbytes], dst.nbits, n), unpack(want.storage.cpu().numpy(), dst.nbits, n)
    assert np.array_equal(*bits)
    assert (got[nbytes:] == 0xA5).all()
