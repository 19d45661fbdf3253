"""Shared test helpers: the seed-kernel folder beside the repository, and marker lookup."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# the user's seed kernels live beside the repository; a GPU machine gets them via an env var
SEED_KERNELS = Path(os.environ.get("TILUS_SEED_KERNELS", REPO.parent / "shared" / "seed_kernels"))


def pytest_collection_modifyitems(config, items):
    try:
        import torch

        has_gpu = torch.cuda.is_available()
    except Exception:
        has_gpu = False
    if has_gpu:
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU with torch")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def load_seed(name: str):
    """Import ``../shared/seed_kernels/<name>.py`` under a unique module name (never copied).

    The examples folder has files with the same names, so the seeds are loaded by path.
    """
    if not SEED_KERNELS.is_dir():
        pytest.skip(f"seed kernels not found beside the repository ({SEED_KERNELS})")
    mod_name = f"seed_{name}"
    if mod_name in sys.modules:
        return sys.modules[mod_name]
    spec = importlib.util.spec_from_file_location(mod_name, SEED_KERNELS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def seeds():
    """Loader of the user's seed kernels: ``seeds("matmul_v2").MatmulWGMMAV2``."""
    return load_seed
