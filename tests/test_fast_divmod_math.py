"""The magic numbers of ``fast_divmod`` (tilus/passes/fast_divmod.py), checked in NumPy against
``//`` and ``%`` with the device formula emulated in 32-bit unsigned arithmetic."""

from __future__ import annotations

import numpy as np
import pytest

from tilus.passes.fast_divmod import MAX_DIVISOR, magic_numbers

N_MAX = 2**31 - 1  # fast_divmod dividends are in [0, 2**31)


def device_divmod(n: np.ndarray, d: int):
    """What tl_fastdiv/tl_fastmod compute: ``q = (umulhi(n, magic) + n) >> shift`` in uint32."""
    magic, shift = magic_numbers(d)
    assert 0 <= magic < 2**32 and 0 <= shift <= 31
    n32 = n.astype(np.uint32)
    hi = ((n32.astype(np.uint64) * np.uint64(magic)) >> np.uint64(32)).astype(np.uint32)
    s = hi + n32  # uint32 add: must not wrap
    assert (s >= n32).all(), f"overflow for d={d}"
    q = (s >> np.uint32(shift)).astype(np.int64)
    r = n.astype(np.int64) - q * d  # n - q * d, as the int32 code computes it
    return q, r


def _dividends(d: int, rng) -> np.ndarray:
    near = [0, 1, d - 1, d, d + 1, 2 * d - 1, 2 * d, N_MAX, N_MAX - 1, N_MAX - d]
    near += [(N_MAX // d) * d, (N_MAX // d) * d - 1]  # the last multiple of d and just below
    rand = rng.integers(0, N_MAX, size=64, endpoint=True)
    n = np.array([x for x in near if 0 <= x <= N_MAX], dtype=np.int64)
    return np.concatenate([n, rand])


def _check(d: int, n: np.ndarray) -> None:
    q, r = device_divmod(n, d)
    np.testing.assert_array_equal(q, n // d, err_msg=f"quotient, d={d}")
    np.testing.assert_array_equal(r, n % d, err_msg=f"remainder, d={d}")


def _divisors(rng) -> list[int]:
    ds = set(range(1, 5001))
    for k in range(1, 32):
        ds.update(x for x in (2**k - 1, 2**k, 2**k + 1) if 1 <= x <= MAX_DIVISOR)
    ds.update(int(x) for x in rng.integers(5001, MAX_DIVISOR, size=3000, endpoint=True))
    ds.update(int(x) for x in rng.integers(2**30, MAX_DIVISOR, size=500, endpoint=True))
    ds.update({3 * 2**29, 641 * 6700417 % MAX_DIVISOR, MAX_DIVISOR, MAX_DIVISOR - 1})
    return sorted(ds)


def test_magic_numbers_match_floor_division_for_many_divisors():
    rng = np.random.default_rng(2024)
    divisors = _divisors(rng)
    assert len(divisors) > 8000
    for d in divisors:
        _check(d, _dividends(d, rng))


def test_every_dividend_below_2_pow_20_for_small_divisors():
    n = np.arange(2**20, dtype=np.int64)
    for d in (1, 2, 3, 5, 6, 7, 12, 100, 641, 4095, 4097, 65535, 999983):
        _check(d, n)


def test_small_cases_known_values():
    assert magic_numbers(1) == (0, 0)  # q = n
    assert magic_numbers(2) == (0, 1)  # powers of two: q = n >> k
    assert magic_numbers(2**30) == (0, 30)
    assert magic_numbers(3) == ((2**34 + 2) // 3 - 2**32, 2)
    assert magic_numbers(MAX_DIVISOR)[1] == 31


@pytest.mark.parametrize("d", [0, -1, -(2**31), 2**31, 2**32])
def test_out_of_range_divisors_are_rejected(d):
    with pytest.raises(ValueError, match="not in"):
        magic_numbers(d)
