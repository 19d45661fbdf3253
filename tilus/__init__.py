"""tilus: a tile-level GPU kernel language embedded in Python, targeting NVIDIA Hopper."""

from tilus import (
    kernels,  # noqa: E402, F401 - Tensor.to's cast kernel (a Script)
    option,
    target,
    utils,
)
from tilus.backends.cuda.api import compile  # noqa: A004 - tilus.compile(kernel, ...)
from tilus.dtypes import (
    ALL_DTYPES,
    SHORT_NAMES,
    DataType,
    PointerType,
    bfloat16,
    boolean,
    float8_e4m3,
    float8_e5m2,
    float16,
    float32,
    float64,
    int8,
    int16,
    int32,
    int64,
    tfloat32,
    uint8,
    uint16,
    uint32,
    uint64,
    void_p,
)
from tilus.errors import (
    LayoutOperationError,
    TilusArgumentError,
    TilusBackendError,
    TilusCacheWarning,
    TilusCompileError,
    TilusError,
    TilusPerformanceWarning,
    TilusProgramError,
    TilusRuntimeError,
)
from tilus.ir.tensor import GlobalTensor, RegisterTensor, SharedTensor
from tilus.lang.autotune import autotune
from tilus.lang.klass import Class
from tilus.lang.script import InstantiatedScript, Script
from tilus.tensor import (
    Tensor,
    empty,
    from_torch,
    full,
    ones,
    rand,
    randint,
    randn,
    view_torch,
    zeros,
)
from tilus.version import __version__  # noqa: F401 - tilus.__version__

# sub-byte integer and float families (int4b, uint2b, float6_e3m2, ...) and short aliases
globals().update({name: dt for name, dt in ALL_DTYPES.items() if name not in globals()})
globals().update({name: dt for name, dt in SHORT_NAMES.items() if name not in globals()})
i8, i16, i32, i64 = int8, int16, int32, int64
u8, u16, u32, u64 = uint8, uint16, uint32, uint64
f16, f32, f64, bf16, tf32 = float16, float32, float64, bfloat16, tfloat32
f8e4m3, f8e5m2 = float8_e4m3, float8_e5m2


__all__ = [
    "Class",
    "DataType",
    "GlobalTensor",
    "InstantiatedScript",
    "LayoutOperationError",
    "PointerType",
    "RegisterTensor",
    "Script",
    "SharedTensor",
    "Tensor",
    "TilusArgumentError",
    "TilusBackendError",
    "TilusCacheWarning",
    "TilusCompileError",
    "TilusError",
    "TilusPerformanceWarning",
    "TilusProgramError",
    "TilusRuntimeError",
    "autotune",
    "bfloat16",
    "boolean",
    "compile",
    "empty",
    "from_torch",
    "full",
    "ones",
    "rand",
    "randint",
    "randn",
    "view_torch",
    "zeros",
    "float16",
    "float32",
    "float64",
    "float8_e4m3",
    "float8_e5m2",
    "int16",
    "int32",
    "int64",
    "int8",
    "option",
    "target",
    "tfloat32",
    "uint16",
    "uint32",
    "uint64",
    "uint8",
    "utils",
    "void_p",
]
