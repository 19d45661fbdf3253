"""CUDA C++ code generation from the tile IR (one module per concern)."""

from tilus.backends.cuda.codegen.kernel import CODEGEN_VERSION, KernelSource, generate

__all__ = ["CODEGEN_VERSION", "KernelSource", "generate"]
