"""Inline-PTX device functions by instruction family; importing the package registers them all."""

from tilus.backends.cuda.ptx import ldst, mbarrier, mma, random, sync, tma, wgmma  # noqa: F401
