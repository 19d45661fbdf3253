"""Shared helpers of the split test_interpreter_numerics tests."""

from __future__ import annotations

import numpy as np

rng = np.random.default_rng()

BM, BN = 16, 8


def nan_like(shape, dtype=np.float32):
    return np.full(shape, np.nan, dtype=dtype)


def rand_f32(shape, lo=-4.0, hi=4.0):
    """Random floats away from zero (never an all-zero input)."""
    x = rng.uniform(lo, hi, size=shape)
    x = np.where(np.abs(x) < 0.25, 0.25 + np.abs(x), x)
    return x.astype(np.float32)


def rand_i32(shape, lo=-1000, hi=1000):
    x = rng.integers(lo, hi, size=shape)
    return np.where(x == 0, 7, x).astype(np.int32)


def assert_close(got, want, rtol=1e-6, atol=0.0):
    got = np.asarray(got, dtype=np.float64)
    assert not np.isnan(got).any(), "an output element was never written"
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)
