"""codegen.loops: closed forms of register index maps, checked against the maps themselves."""

from __future__ import annotations

import random

from tilus.backends.cuda.codegen.loops import fit, fitted_expr, local_coord_exprs
from tilus.ir.layout.register import blocked, wgmma_acc


def _eval(code: str, **env) -> int:
    return eval(code.replace("/", "//"), {}, env)  # C ints here are non-negative


def test_fit_finds_mixed_radix_maps_and_refuses_others():
    # register i of [2 rows x 16] -> register of a [16] operand (the row digit dropped)
    m = [i % 16 for i in range(32)]
    assert [_eval(fitted_expr(m, "i"), i=i) for i in range(32)] == m
    m = [0] * 24  # a replicated scalar
    assert fitted_expr(m, "i") == "0"
    m = [(i // 3) % 2 * 5 + i % 3 for i in range(12)]  # radix 3 below radix 2
    e = fitted_expr(m, "i")
    assert e is not None and [_eval(e, i=i) for i in range(12)] == m
    m = list(range(16))
    m[3], m[4] = m[4], m[3]  # not affine in any digits
    assert fit(m) is None and fitted_expr(m, "i") is None


def test_fit_of_random_digit_maps():
    rng = random.Random(7)
    for _ in range(50):
        radices = [rng.choice([2, 4, 8]) for _ in range(rng.randint(1, 4))]
        steps = [rng.choice([0, 1, 2, 8, 64]) for _ in radices]
        n = 1
        for r in radices:
            n *= r
        m = []
        for i in range(n):
            v, rest = 0, i
            for r, s in zip(radices, steps):
                v += (rest % r) * s
                rest //= r
            m.append(v)
        e = fitted_expr(m, "(k)")
        assert e is not None and [_eval(e, k=i) for i in range(n)] == m


def test_local_coord_exprs_match_the_layouts():
    for layout in (blocked((4, 256), 32, 8), blocked((1, 8192), 512, 8), wgmma_acc(128, 64)):
        exprs = local_coord_exprs(layout, "i")
        for i in range(layout.local_size):
            assert tuple(_eval(e, i=i) for e in exprs) == layout.local_coords(i)
