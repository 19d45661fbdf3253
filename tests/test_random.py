"""Philox random numbers: known answers, the kernel on the interpreter, refusals, sm_90a build."""

from __future__ import annotations

import numpy as np
import pytest

import tilus
from tests.cuda.conftest import needs_nvrtc
from tests.helpers_errors import err_line, expect_error
from tilus import float32, int32, uint32, uint64
from tilus.backends.interp.rules_random import philox4x32
from tilus.utils import cdiv

M = 0xFFFFFFFF


def philox_reference(seed: int, counter: tuple[int, int, int, int], rounds: int = 10):
    """Philox-4x32 on Python ints, written from the paper's round function (one element)."""
    c0, c1, c2, c3 = counter
    k0, k1 = seed & M, (seed >> 32) & M
    for r in range(rounds):
        if r:
            k0, k1 = (k0 + 0x9E3779B9) & M, (k1 + 0xBB67AE85) & M
        p0, p1 = 0xD2511F53 * c0, 0xCD9E8D57 * c2
        c0, c1, c2, c3 = ((p1 >> 32) ^ c1 ^ k0) & M, p1 & M, ((p0 >> 32) ^ c3 ^ k1) & M, p0 & M
    return c0, c1, c2, c3


def test_known_answer():
    # Random123's published answer for philox4x32-10 with a zero counter and key
    words = philox4x32(0, np.zeros(1, np.uint32), 10)
    assert [int(w[0]) for w in words] == [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]


def test_vectorized_matches_the_scalar_reference():
    rng = np.random.default_rng()
    seed = int(rng.integers(0, 2**63)) * 2 + 1
    offs = rng.integers(0, 2**32, size=64, dtype=np.uint64).astype(np.uint32)
    for rounds in (1, 7, 10):
        got = philox4x32(seed, offs, rounds)
        for j, o in enumerate(offs):
            want = philox_reference(seed, (int(o), 0, 0, 0), rounds)
            assert tuple(int(w[j]) for w in got) == want


class Rng(tilus.Script):
    def __init__(self, block=128):
        super().__init__()
        self.block = block

    def __call__(self, n: int32, seed: uint64, w_ptr: ~uint32, u_ptr: ~float32, z_ptr: ~float32):
        self.attrs.blocks = [cdiv(n, self.block)]
        self.attrs.warps = 4
        base = self.blockIdx.x * self.block
        offs = self.register_tensor(dtype=uint32, shape=[self.block], init=lambda i: base + i)
        words = self.randint4x(seed, offs)
        u = self.rand(seed, offs)
        z = self.randn(seed, offs, n_rounds=7)
        gw = self.global_view(w_ptr, dtype=uint32, shape=[4, n])
        for k, word in enumerate(words):  # a host tuple: unrolled at transpile time
            self.store_global(gw, word, offsets=[k, base], dims=[1])
        self.store_global(self.global_view(u_ptr, dtype=float32, shape=[n]), u, offsets=[base])
        self.store_global(self.global_view(z_ptr, dtype=float32, shape=[n]), z, offsets=[base])


def _run(n, seed, device=None):
    if device is None:
        w = np.zeros((4, n), np.uint32)
        u = np.full(n, np.nan, np.float32)
        z = np.full(n, np.nan, np.float32)
    else:
        import torch

        w = torch.zeros((4, n), dtype=torch.uint32, device=device)
        u = torch.full((n,), float("nan"), device=device)
        z = torch.full((n,), float("nan"), device=device)
    Rng()(n, seed, w, u, z)
    return w, u, z


def test_kernel_on_the_interpreter():
    n = 300  # not a multiple of the 128-element tile
    seed = int(np.random.default_rng().integers(1, 2**63))
    w, u, z = _run(n, seed)
    want = philox4x32(seed, np.arange(n, dtype=np.uint32), 10)
    for k in range(4):
        np.testing.assert_array_equal(w[k], want[k])
    np.testing.assert_array_equal(u, (want[0] >> 8).astype(np.float32) * np.float32(2**-24))
    assert 0.0 <= u.min() and u.max() < 1.0
    assert np.isfinite(z).all()
    # the same seed and offsets give the same numbers; another seed gives others
    w2, u2, z2 = _run(n, seed)
    assert np.array_equal(w, w2) and np.array_equal(z, z2)
    w3, _, _ = _run(n, seed ^ 1)
    assert not np.array_equal(w, w3)


def test_normal_numbers_look_normal():
    n = 8192
    _, _, z = _run(n, 2024)
    assert abs(z.mean()) < 0.05 and abs(z.std() - 1.0) < 0.05
    assert 0.6 < (np.abs(z) < 1.0).mean() < 0.76  # P(|Z| < 1) = 0.683


class BadRounds(tilus.Script):
    def __call__(self, out: ~uint32):
        self.attrs.blocks = [1]
        self.attrs.warps = 1
        offs = self.register_tensor(dtype=uint32, shape=[32], init=lambda i: i)
        r = self.randint(7, offs, n_rounds=0)  # ERR
        self.store_global(self.global_view(out, dtype=uint32, shape=[32]), r, offsets=[0])


class BadOffsets(tilus.Script):
    def __call__(self, out: ~float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 1
        offs = self.register_tensor(dtype=float32, shape=[32], init=0.5)
        r = self.rand(7, offs)  # ERR
        self.store_global(self.global_view(out, dtype=float32, shape=[32]), r, offsets=[0])


def test_refusals_name_the_line():
    expect_error(BadRounds, fragment=r"rounds must be in \[1, 16\], got 0")
    expect_error(BadOffsets, fragment="offsets must be uint32 or int32, got float32")
    assert err_line(BadRounds) > 0


@needs_nvrtc
def test_builds_for_sm90a_without_spilling():
    from tilus.runtime.sass import sass_opcodes

    ck = tilus.compile(Rng(), 300, 1, None, None, None, target="sm_90a")
    assert "tl_philox" in ck.source
    ops = sass_opcodes(ck.sass())
    assert not ops.get("LDL") and not ops.get("STL")


@pytest.mark.gpu
def test_gpu_bits_match_the_interpreter():
    from tests.cuda.conftest import _gpu_available

    if not _gpu_available():
        pytest.skip("needs torch with a Hopper GPU")
    n, seed = 5000, int(np.random.default_rng().integers(1, 2**63))
    w, u, z = (t.cpu().numpy() for t in _run(n, seed, device="cuda"))
    wi, ui, zi = _run(n, seed)
    np.testing.assert_array_equal(w, wi)
    np.testing.assert_array_equal(u, ui)  # bit-identical: exact conversions
    # Box-Muller through logf/sqrtf/cospif: within a few float32 ulps of the interpreter
    np.testing.assert_allclose(z, zi, rtol=2e-6, atol=2e-6)
