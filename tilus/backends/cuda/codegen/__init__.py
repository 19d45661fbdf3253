"""CUDA C++ code generation from the tile IR (one module per concern)."""

from tilus.backends.cuda.codegen.kernel import CODEGEN_VERSION, KernelSource, generate
from tilus.backends.cuda.codegen.stmts import RULES as CUDA_RULES

__all__ = ["CODEGEN_VERSION", "CUDA_RULES", "KernelSource", "generate"]
