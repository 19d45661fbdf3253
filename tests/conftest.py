"""Shared test helpers: the seed-kernel folder beside the repository, and marker lookup."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SEED_KERNELS = REPO.parent / "shared" / "seed_kernels"


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


@pytest.fixture(scope="session")
def seed_kernels():
    """Import path of the user's seed kernels (they are imported, never copied)."""
    if not SEED_KERNELS.is_dir():
        pytest.skip(f"seed kernels not found beside the repository ({SEED_KERNELS})")
    if str(SEED_KERNELS) not in sys.path:
        sys.path.insert(0, str(SEED_KERNELS))
    return SEED_KERNELS

