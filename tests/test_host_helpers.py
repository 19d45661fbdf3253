"""Host helpers: tilus.Tensor (dense bit packing, views, torch round trips), benchmark_func."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tilus
from tilus.tensor import decode, encode, pack, unpack


def _ref_pack(codes, nbits):
    """Element i at bit i * nbits, least significant first: one bit at a time."""
    out = bytearray((len(codes) * nbits + 7) // 8)
    for i, c in enumerate(codes):
        for b in range(nbits):
            if (int(c) >> b) & 1:
                bit = i * nbits + b
                out[bit // 8] |= 1 << (bit % 8)
    return bytes(out)


@pytest.mark.parametrize("nbits", [1, 2, 3, 4, 5, 6, 7, 12])
def test_packing_is_dense_little_endian(nbits):
    rng = np.random.default_rng()
    n = int(rng.integers(1, 40))
    codes = rng.integers(0, 1 << nbits, n)
    data = pack(codes, nbits)
    assert bytes(data) == _ref_pack(codes, nbits) and len(data) == (n * nbits + 7) // 8
    assert (unpack(data, nbits, n) == codes).all()


def test_sub_byte_integers():
    rng = np.random.default_rng()
    want = rng.integers(-8, 8, (3, 5))
    t = tilus.randint(-8, 8, (3, 5), tilus.int4b, seed=int(rng.integers(1 << 30)))
    assert t.nbytes == 8 and t.storage.dtype == torch.uint8 and t.storage.shape == (8,)
    assert ((t.numpy() >= -8) & (t.numpy() < 8)).all()
    u = tilus.Tensor(tilus.int4b, want.shape, torch.from_numpy(pack(want & 15, 4)))
    assert (u.numpy() == want).all()
    assert (tilus.full([9], 5, tilus.uint3b).numpy() == 5).all()
    assert tilus.full([9], 5, tilus.uint3b).nbytes == 4  # ceil(27 / 8)
    with pytest.raises(tilus.TilusError, match=r"randint range \[0, 9\) is empty or outside"):
        tilus.randint(0, 9, [4], tilus.uint3b)


def test_sub_byte_floats_round_to_nearest():
    fp4 = tilus.float4_e2m1  # values 0, 0.5, 1, 1.5, 2, 3, 4, 6 and negatives
    t = tilus.full([5], 1.5, fp4)
    assert (t.numpy() == 1.5).all()
    codes = encode(np.array([0.2, 0.3, 2.4, 2.6, 5.0, 7.0, -1.1, 100.0]), fp4)
    assert decode(codes, fp4).tolist() == [0.0, 0.5, 2.0, 3.0, 4.0, 6.0, -1.0, 6.0]
    x = tilus.randn([33], tilus.float6_e3m2, seed=3).numpy()
    assert np.isfinite(x).all() and len(set(x.tolist())) > 4


def test_torch_types_round_trip_and_share_memory():
    a = torch.randn(5, 7)
    t = tilus.from_torch(a)
    assert t.dtype == tilus.float32 and t.shape == (5, 7) and t.nbytes == 140
    assert t.torch().data_ptr() == a.data_ptr()
    t.torch()[1, 2] = 42.0
    assert a[1, 2] == 42.0
    for dt in (tilus.float16, tilus.bfloat16, tilus.int8, tilus.float8_e4m3):
        v = tilus.ones([3, 4], dt)
        assert v.torch().dtype == tilus.tensor._torch_dtype(dt) and (v.numpy() == 1).all()
    assert (tilus.zeros([6], tilus.int32).numpy() == 0).all()
    r = tilus.rand([1000], seed=7).numpy()
    assert r.min() >= 0 and r.max() < 1 and 0.4 < r.mean() < 0.6
    assert tilus.empty([3, 3], tilus.float16).torch().shape == (3, 3)


def test_views():
    raw = torch.randint(0, 256, (4, 6), dtype=torch.uint8)
    w = tilus.view_torch(raw, dtype=tilus.int4b)  # 4 x 12 int4 weights, no copy
    assert w.shape == (4, 12) and w.storage.data_ptr() == raw.data_ptr()
    lo = raw.numpy().astype(np.int64) & 15
    assert (w.numpy()[:, 0::2] == np.where(lo >= 8, lo - 16, lo)).all()
    assert w.view(dtype=tilus.uint8).torch().equal(raw)
    assert w.view(shape=[48]).shape == (48,)
    assert tilus.view_torch(raw, dtype=tilus.int16, shape=[12]).torch().shape == (12,)
    with pytest.raises(tilus.TilusError, match="cannot view the last dim"):
        tilus.view_torch(raw, dtype=tilus.float6_e3m2).view(dtype=tilus.int32)
    with pytest.raises(tilus.TilusError, match=r"as int4b of shape \[5\]"):
        w.view(shape=[5])
    with pytest.raises(tilus.TilusError, match="needs a contiguous tensor"):
        tilus.view_torch(raw.t())


def test_to_and_its_refusal():
    a = tilus.from_torch(torch.arange(6, dtype=torch.int32))
    assert a.to(tilus.float16).torch().equal(torch.arange(6, dtype=torch.float16))
    with pytest.raises(tilus.TilusError, match="int4b has no torch dtype"):
        tilus.zeros([4], tilus.int4b).torch()


def test_benchmark_func_needs_a_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(tilus.TilusError, match="No GPU is available"):
        tilus.utils.benchmark_func(lambda: None)
    with pytest.raises(tilus.TilusError, match="warmup >= 0 and repeat >= 1"):
        tilus.utils.benchmark_func(lambda: None, repeat=0)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_benchmark_func_times_gpu_work():
    x = torch.randn(4096, 4096, device="cuda")
    ms = tilus.utils.benchmark_func(lambda: x @ x, warmup=2, repeat=5)
    assert 0 < ms < 1000
    t = tilus.randn([64, 64], tilus.float16)
    assert t.device.startswith("cuda") and t.torch().is_cuda


@pytest.mark.parametrize(
    "src, dst",
    [
        (tilus.float16, tilus.float4_e2m1),
        (tilus.float32, tilus.float6_e3m2),
        (tilus.bfloat16, tilus.int3b),
        (tilus.int4b, tilus.float16),
        (tilus.float7_e5m1, tilus.bfloat16),
        (tilus.uint5b, tilus.float5_e2m2),
    ],
    ids=str,
)
def test_to_between_packed_and_torch_types_runs_the_cast_kernel(src, dst):
    from tilus.backends.interp.numeric import convert

    rng = np.random.default_rng()
    shape = (3, 1029)  # more than a block of the cast kernel, not a multiple of it
    if src.is_float():
        x = tilus.randn(shape, src, device="cpu", seed=int(rng.integers(1 << 30)))
    else:
        x = tilus.randint(src.min_value(), src.max_value() + 1, shape, src, device="cpu")
    y = x.to(dst)
    assert y.dtype == dst and y.shape == shape
    want = convert(x.numpy(), dst)
    np.testing.assert_array_equal(y.numpy().astype(np.float64), want.astype(np.float64))
