"""Kernels tilus ships for its own host helpers (``tilus.Tensor.to`` casts)."""

from tilus.kernels import cast  # noqa: F401 - installs Tensor.to's cast kernel
