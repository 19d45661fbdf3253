"""The example programs under examples/: each runs and checks itself on the CPU interpreter.

Every example is run as a script (``python examples/...``, from the repository root, with
``TILUS_INTERPRET=1`` so a GPU is never used) and must exit 0; its ``main()`` compares the result
with NumPy float64. For the Hopper matmul tutorial (V0..V6) every config of the autotune space is
also run at one small ragged size and cross-checked with ``interpret_all_configs``.
"""

from __future__ import annotations

import importlib
import os
import pathlib
import subprocess
import sys
import warnings

import numpy as np
import pytest

import tilus

ROOT = pathlib.Path(__file__).resolve().parents[1]
EXAMPLES_DIR = ROOT / "examples"

EXAMPLES = [
    "vector_add.py",
    "tiled_matmul.py",
    "softmax.py",
    "layer_norm.py",
    "rms_norm.py",
    "bias_act.py",
    "hopper_matmul/matmul_v0.py",
    "hopper_matmul/matmul_v1.py",
    "hopper_matmul/matmul_v2.py",
    "hopper_matmul/matmul_v3.py",
    "hopper_matmul/matmul_v4.py",
    "hopper_matmul/matmul_v5.py",
    "hopper_matmul/matmul_v6.py",
    "hopper_matmul/matmul_v7.py",
    "attention/flash_attention.py",
    "attention/decode_attention.py",
    "attention/paged_decode.py",
    "quantized/matmul_fp8.py",
    "quantized/per_token_cast.py",
    "quantized/matmul_wx_a16.py",
    "quantized/matmul_wx_a16_mma.py",
    "quantized/matmul_wx_a16_dequant.py",
]
HELPERS = [
    "example_support.py",
    "rowwise_support.py",
    "hopper_matmul/harness.py",
    "hopper_matmul/matmul_v7_epilogue.py",
    "hopper_matmul/matmul_v7_schedule.py",
    "attention/attention_support.py",
    "attention/flash_tiles.py",
    "attention/flash_producer.py",
    "attention/flash_epilogue.py",
    "attention/flash_gemms.py",
    "quantized/matmul_wx_a16_decode.py",
    "quantized/matmul_wx_a16_pipe.py",
    "quantized/mma_codecs.py",
    "quantized/matmul_wx_a16_prefill.py",
    "quantized/split_k.py",
    "quantized/mma_space.py",
    "quantized/mma_operands.py",
    "quantized/fp8_support.py",
]  # imported, not run alone

HOPPER_KERNELS = [
    ("matmul_v0", "MatmulTMA"),
    ("matmul_v1", "MatmulWGMMA"),
    ("matmul_v2", "MatmulWGMMAV2"),
    ("matmul_v3", "MatmulWGMMAV3"),
    ("matmul_v4", "MatmulWGMMAV4"),
    ("matmul_v5", "MatmulWGMMAV5"),
    ("matmul_v6", "MatmulWGMMAV6"),
]
# ragged in M, N and K; K spans more tiles than any config has stages, so slots get refilled
ALL_CONFIGS_SIZE = (200, 320, 392)


def test_every_example_is_listed():
    found = {p.relative_to(EXAMPLES_DIR).as_posix() for p in EXAMPLES_DIR.rglob("*.py")}
    assert found == set(EXAMPLES) | set(HELPERS)


@pytest.mark.parametrize("example", EXAMPLES)
def test_example_runs(example):
    pythonpath = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env = dict(os.environ, TILUS_INTERPRET="1", PYTHONPATH=pythonpath)
    proc = subprocess.run(
        [sys.executable, f"examples/{example}"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, f"{example} failed:\n{proc.stdout}\n{proc.stderr}"
    assert "FAIL" not in proc.stdout
    assert " ok" in proc.stdout


@pytest.fixture(scope="module")
def hopper_examples():
    """``import_module`` for the files of examples/hopper_matmul (imported by their plain names,
    as the scripts import each other); the names are taken out of ``sys.modules`` around the
    tests so that other modules of the same name cannot get in the way."""
    names = ["harness"] + [m for m, _ in HOPPER_KERNELS]
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(EXAMPLES_DIR / "hopper_matmul"))
        for name in names:
            mp.delitem(sys.modules, name, raising=False)
        yield importlib.import_module
        for name in names:
            sys.modules.pop(name, None)


@pytest.mark.parametrize("seed", [None, 1], ids=["in-order", "shuffled"])
@pytest.mark.parametrize("module, kernel", HOPPER_KERNELS, ids=[m for m, _ in HOPPER_KERNELS])
def test_hopper_matmul_all_configs(hopper_examples, module, kernel, seed):
    kernel_cls = getattr(hopper_examples(module), kernel)
    assert 1 < len(kernel_cls().configs) <= 12
    m, n, k = ALL_CONFIGS_SIZE
    rng = np.random.default_rng()
    a = rng.uniform(-1.0, 1.0, size=(m, k)).astype(np.float16)
    b = rng.uniform(-1.0, 1.0, size=(n, k)).astype(np.float16)
    c = np.full((m, n), np.nan, dtype=np.float16)
    with (
        warnings.catch_warnings(),  # a config that fails to compile would only warn: fail instead
        tilus.option.scoped(interpret=True, interpret_all_configs=True, schedule_seed=seed),
    ):
        warnings.simplefilter("error")
        kernel_cls()(m, n, k, a, b, c)
    assert not np.isnan(c).any()
    ref = a.astype(np.float64) @ b.astype(np.float64).T
    err = np.max(np.abs(c.astype(np.float64) - ref)) / np.max(np.abs(ref))
    assert err < 1e-2


@pytest.mark.parametrize("seed", [None, 1, 2])
def test_hopper_matmul_v6_runs_several_tiles_per_block(hopper_examples, seed):
    # 3 "SMs": every block loops over several C tiles, the ring's phases run on across tiles
    # and the shared C tile is rewritten only after its TMA store has read it
    kernel = hopper_examples("matmul_v6").MatmulWGMMAV6(num_sms=3)
    m, n, k = 520, 600, 200  # 5 x 5 tiles of 128 x 128 (ragged), 3 x 3 of 128 x 256
    rng = np.random.default_rng()
    a = rng.uniform(-1.0, 1.0, size=(m, k)).astype(np.float16)
    b = rng.uniform(-1.0, 1.0, size=(n, k)).astype(np.float16)
    c = np.full((m, n), np.nan, dtype=np.float16)
    with tilus.option.scoped(interpret=True, interpret_all_configs=True, schedule_seed=seed):
        kernel(m, n, k, a, b, c)
    ref = a.astype(np.float64) @ b.astype(np.float64).T
    assert not np.isnan(c).any()
    assert np.max(np.abs(c.astype(np.float64) - ref)) / np.max(np.abs(ref)) < 1e-2
