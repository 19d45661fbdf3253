"""CUDA C++ code generation from the tile IR (one module per concern)."""

from tilus.backends.cuda.codegen import cluster as _cluster  # noqa: F401 - registers the rules
from tilus.backends.cuda.codegen import prefetch as _prefetch  # noqa: F401 - registers the rules
from tilus.backends.cuda.codegen import printing as _printing  # noqa: F401 - registers the rules
from tilus.backends.cuda.codegen import reduce as _reduce  # noqa: F401 - registers the rules
from tilus.backends.cuda.codegen import shared_sub as _shared_sub  # noqa: F401 - the rules
from tilus.backends.cuda.codegen import stmts as _stmts  # noqa: F401 - registers the rules
from tilus.backends.cuda.codegen.kernel import CODEGEN_VERSION, KernelSource, generate
from tilus.backends.cuda.tables import CODEGEN_RULES

__all__ = ["CODEGEN_VERSION", "CODEGEN_RULES", "KernelSource", "generate"]
