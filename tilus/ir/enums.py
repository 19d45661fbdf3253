"""Closed choices of the tile IR as string-valued enums (tensor and variable kinds, orderings)."""

from __future__ import annotations

try:
    from enum import StrEnum
except ImportError:  # Python 3.10: the same behaviour, spelled out
    from enum import Enum

    class StrEnum(str, Enum):
        """A str-valued enum whose members print and format as their value (as 3.11's)."""

        def __str__(self) -> str:
            return str.__str__(self)

        def __format__(self, spec: str) -> str:
            return str.__format__(str.__str__(self), spec)

# StrEnum members are str: they print as their value (so the IR text and the compile-cache keys
# do not change) and still compare equal to the plain string during a transition.


class TensorKind(StrEnum):
    """Where a tile lives."""

    REGISTER = "register"
    SHARED = "shared"
    GLOBAL = "global"


class VarKind(StrEnum):
    """What a scalar variable is bound to."""

    LOCAL = "local"  # defined by a statement of the kernel
    PARAM = "param"  # a kernel parameter
    BUILTIN = "builtin"  # blockIdx / gridDim
    AXIS = "axis"  # an element index of a register tile's ``init`` function


class MemSem(StrEnum):
    """Memory-ordering semantics of an mbarrier operation (PTX ``.sem``)."""

    RELAXED = "relaxed"
    RELEASE = "release"
    ACQUIRE = "acquire"


class MemScope(StrEnum):
    """The set of threads a memory ordering applies to (PTX ``.scope``)."""

    CTA = "cta"
    CLUSTER = "cluster"


class Unroll(StrEnum):
    """``ForStmt.unroll`` besides None (no pragma) and a positive int count."""

    ALL = "all"
