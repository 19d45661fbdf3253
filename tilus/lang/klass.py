"""``tilus.Class``: helper objects whose methods are inlined into kernels."""

from __future__ import annotations

import sys

from tilus import source_cache
from tilus.lang.instructions.generic import GenericInstructions
from tilus.lang.instructions.hopper import HopperInstructions
from tilus.lang.instructions.named_barriers import NamedBarrierInstructions


class Class(GenericInstructions, HopperInstructions, NamedBarrierInstructions):
    """Base class of helper objects used inside kernels (e.g. a pipeline of barriers).

    Instantiating a subclass inside a kernel transpiles its ``__init__`` inline; its methods are
    inlined at each call. Attributes annotated with a dtype (``self.stage: int32 = 0``) become
    kernel variables whose value persists across method calls.
    """

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        # the source as imported, which is what tilus transpiles (tilus/source_cache.py)
        source_cache.snapshot(cls, sys._getframe(1))
