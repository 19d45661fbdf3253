"""The cast kernels' CUDA code on the CPU emulator, against the interpreter: every config of
``tilus.kernels.cast.Cast`` (persistent grids looping over ragged tiles) bit for bit, and the
per-token fp8 cast's ring and persistent forms (codes and scales) at ragged shapes."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import tilus
from tests.cuda.conftest import needs_nvrtc
from tests.helpers_cpu_cuda import available, emulate
from tilus.kernels.cast import Cast
from tilus.packing import unpack

torch = pytest.importorskip("torch")
needs_gxx = pytest.mark.skipif(not available(), reason="needs g++ for the CPU emulator")
pytestmark = [needs_nvrtc, needs_gxx]

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "quantized"
if str(EXAMPLES) not in sys.path:
    sys.path.insert(0, str(EXAMPLES))
import per_token_cast as ptc  # noqa: E402

rng = np.random.default_rng()

#: the bench's casts: the widening ones' two decode paths (magic numbers, f16x2 scaling)
#: and the narrowing ones (integer saturation, the branch-free float encode)
PAIRS = [
    (tilus.int4b, tilus.float16),
    (tilus.float4_e2m1, tilus.float16),
    (tilus.float6_e3m2, tilus.float16),
    (tilus.float16, tilus.float4_e2m1),
    (tilus.float16, tilus.int4b),
    (tilus.float16, tilus.float6_e3m2),
    (tilus.float16, tilus.float6_e2m3),
    (tilus.float16, tilus.float5_e2m2),  # the two-exponent-bit encode at every mantissa width
    (tilus.float16, tilus.float7_e2m4),
]


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TILUS_CACHE_DIR", str(tmp_path))


def _source(src, n):
    if src.nbits % 8:
        return rng.integers(0, 256, (n * src.nbits + 7) // 8, dtype=np.uint8)
    # every f16 code (NaN, inf, subnormals and ties included), then random values
    x = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    return np.concatenate([x, rng.integers(0, 1 << 16, max(0, n - x.size), dtype=np.uint16)])[:n]


def _nbytes(dt, n):
    return (n * dt.nbits + 7) // 8


CONFIGS = Cast(tilus.int4b, tilus.float16).configs
#: every config on one pair, every pair on a block-a-tile and a persistent config
CASES = [(*PAIRS[0], c) for c in CONFIGS] + [
    (s, d, c) for s, d in PAIRS[1:] for c in CONFIGS if c in (CONFIGS[0], CONFIGS[2])
]


@pytest.mark.parametrize("src, dst, cfg", CASES, ids=str)
def test_cast_configs_match_the_interpreter(src, dst, cfg):
    n = 3 * cfg["block"] + 77 if cfg["per_sm"] == 0 else cfg["block"] * (cfg["per_sm"] + 2) + 77
    if not src.nbits % 8:
        n = max(n, (1 << 16) + 77)  # every f16 code
    xs = _source(src, n)
    k = Cast(src, dst, **cfg, num_sms=1)  # a persistent grid of per_sm blocks loops
    got = np.full(_nbytes(dst, n), 0xA5, np.uint8)
    want = got.copy()
    tiles = -(-n // cfg["block"])
    grid = tiles if cfg["per_sm"] == 0 else min(tiles, cfg["per_sm"])
    emulate(k, (n, xs, got), [grid], config=cfg)
    host = tilus.Tensor(src, [n], torch.from_numpy(xs.view(np.uint8).copy()))
    want = host.to(dst).storage.numpy()
    np.testing.assert_array_equal(unpack(got, dst.nbits, n), unpack(want, dst.nbits, n))


#: integer -> float casts: the byte-sized integers by magic numbers (no I2F), to f32 and
#: (rounded from the exact f32) f16/bf16; every sub-byte width, signed and unsigned (I2FP)
INT_PAIRS = [
    *((getattr(tilus, f"{s}int{b}b"), tilus.float32) for s in ("", "u") for b in range(1, 8)),
    (tilus.int3b, tilus.float16), (tilus.uint5b, tilus.bfloat16),
    *((i, f) for i in (tilus.int8, tilus.uint8, tilus.int16, tilus.uint16)
      for f in (tilus.float32, tilus.float16, tilus.bfloat16)),
]  # fmt: skip


@pytest.mark.parametrize("src, dst", INT_PAIRS, ids=str)
def test_int_to_float_casts_match_the_interpreter(src, dst):
    cfg = CONFIGS[0]
    n = 3 * cfg["block"] + 77
    if src.nbits == 16:
        n = max(n, (1 << 16) + 77)  # every 16-bit code
    xs = rng.integers(0, 256, _nbytes(src, n), dtype=np.uint8)
    if src.nbits == 16:
        xs[: 1 << 17] = np.arange(1 << 16, dtype=np.uint16).view(np.uint8)
    elif src.nbits == 8:
        xs[:256] = np.arange(256)
    k = Cast(src, dst, **cfg, num_sms=1)
    got = np.full(_nbytes(dst, n), 0xA5, np.uint8)
    emulate(k, (n, xs, got), [-(-n // cfg["block"])], config=cfg)
    host = tilus.Tensor(src, [n], torch.from_numpy(xs.copy()))
    want = host.to(dst).storage.numpy()
    np.testing.assert_array_equal(got, want.view(np.uint8).reshape(-1))


RING = [c for c in ptc.PerTokenCast().configs if c["stages"] or c["blocks_per_sm"]]
#: the re-read form (a row a block, one chunk and several, a ragged tail) and a register cap
REREAD = [dict(zip(ptc.KEYS, c)) for c in [(1, 2, 1, 0, 8, 0, 2, 4), (1, 1, 2, 0, 8, 0, 2, 0),
                                           (1, 4, 1, 0, 8, 0, 1, 2)]]  # fmt: skip


@pytest.mark.parametrize(
    "cfg, m, n",
    [(c, 9, 1000) for c in RING + REREAD] + [(RING[0], 5, 328), (REREAD[0], 3, 328)],
    ids=str,
)
def test_per_token_cast_ring_matches_the_interpreter(cfg, m, n):
    x = (torch.randn(m, n) * torch.rand(m, 1) * 10).to(torch.bfloat16)
    x[m // 2] = 0  # an all-zero row
    k = ptc.PerTokenCast(**cfg, num_sms=1)
    q = np.full((m, n), 0x7F, np.uint8)
    s = np.full(m, np.nan, np.float32)
    xs = x.view(torch.int16).numpy().view(np.uint16)
    groups = -(-m // cfg["rows"])
    # the ring strides by gridDim (2 blocks here); the register form by its fixed grid; the
    # re-read form and a block per row group take a block a group
    if cfg["stages"]:
        grid = 2
    elif cfg["blocks_per_sm"]:
        grid = min(groups, cfg["blocks_per_sm"])
    else:
        grid = groups
    emulate(k, (m, n, xs, q, s), [grid], config=cfg)
    q_ref = torch.full((m, n), 0x7F, dtype=torch.uint8).view(torch.float8_e4m3fn)
    s_ref = torch.full((m,), float("nan"))
    with tilus.option.scoped(interpret=True):
        k(m, n, x, q_ref, s_ref)
    np.testing.assert_array_equal(q, q_ref.view(torch.uint8).numpy())
    np.testing.assert_array_equal(s, s_ref.numpy())
