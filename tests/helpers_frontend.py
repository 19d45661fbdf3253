"""Shared helpers of the split test_frontend tests."""

from __future__ import annotations

import numpy as np

N_OUT = 16


def _out(n=N_OUT):
    return np.full(n, -12345, dtype=np.int32)


def _text(kernel, const_args):
    """The IR text of the first config of ``kernel`` for ``const_args``."""
    return kernel.program(kernel.configs[0], const_args).text
