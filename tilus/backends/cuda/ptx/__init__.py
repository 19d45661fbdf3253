"""Inline-PTX device functions by instruction family; importing the package registers them all."""

from tilus.backends.cuda.ptx import (  # noqa: F401
    atomics,
    cache_hint,
    cluster,
    cp_async,
    ldst,
    lowbit,
    mbarrier,
    mma,
    random,
    sync,
    tma,
    wgmma,
)
