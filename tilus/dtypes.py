"""Scalar data types (`float16`, `int32`, sub-byte families, ...) and pointer types (`~float16`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, slots=True)
class DataType:
    """A scalar element type.

    Attributes:
        name: full name, e.g. ``"float16"``.
        short_name: short alias, e.g. ``"f16"``.
        nbits: width in bits (may be below 8 for the sub-byte families).
        kind: ``"int"``, ``"uint"``, ``"float"`` or ``"bool"``.
        exponent_bits: for floats, the exponent width; 0 otherwise.
        mantissa_bits: for floats, the explicit mantissa width; 0 otherwise.
    """

    name: str
    short_name: str
    nbits: int
    kind: str
    exponent_bits: int = 0
    mantissa_bits: int = 0

    def __repr__(self) -> str:
        return self.name

    def __str__(self) -> str:
        return self.name

    def __invert__(self) -> PointerType:
        return PointerType(self)

    @property
    def nbytes(self) -> int:
        """Bytes per element; raises for sub-byte types, which have no whole-byte size."""
        if self.nbits % 8:
            raise TypeError(f"{self.name} is a sub-byte type ({self.nbits} bits) with no byte size")
        return self.nbits // 8

    def is_integer(self) -> bool:
        """True for signed and unsigned integers (not bool)."""
        return self.kind in ("int", "uint")

    def is_signed(self) -> bool:
        """True for signed integers and floats."""
        return self.kind in ("int", "float")

    def is_float(self) -> bool:
        """True for every floating-point type."""
        return self.kind == "float"

    def is_boolean(self) -> bool:
        """True for ``boolean``."""
        return self.kind == "bool"

    @property
    def np_storage(self) -> np.dtype:
        """The NumPy dtype the interpreter stores values of this type in."""
        return _np_storage(self)

    def __call__(self, value):
        """``float16(1.0)`` makes a typed constant for use inside a kernel."""
        return _make_constant(value, self)

    @property
    def zero(self):
        """The constant 0 of this type."""
        return self(0)

    @property
    def one(self):
        """The constant 1 of this type."""
        return self(1)

    def min_value(self):
        """Smallest representable value (integers), or the most negative finite float."""
        if self.kind == "int":
            return -(1 << (self.nbits - 1))
        if self.kind in ("uint", "bool"):
            return 0
        return -float_max(self)

    def max_value(self):
        """Largest representable value (integers), or the largest finite float."""
        if self.kind == "int":
            return (1 << (self.nbits - 1)) - 1
        if self.kind == "uint":
            return (1 << self.nbits) - 1
        if self.kind == "bool":
            return 1
        return float_max(self)


@dataclass(frozen=True, slots=True)
class PointerType:
    """A pointer to ``base`` (written ``~float16`` in annotations; nestable: ``~(~int32)``)."""

    base: DataType | PointerType | None  # None is void

    def __repr__(self) -> str:
        return f"~{self.base!r}" if self.base is not None else "void_p"

    def __invert__(self) -> PointerType:
        return PointerType(self)

    nbits = 64
    kind = "ptr"

    def is_integer(self) -> bool:
        return False

    def is_float(self) -> bool:
        return False

    def is_boolean(self) -> bool:
        return False


#: ``(value, dtype) -> Const``: constants are IR nodes, and the IR (the layer above this module)
#: installs how to make them through ``set_constant_factory`` when it is imported
_make_constant = None


def set_constant_factory(make) -> None:
    """Install the ``(value, dtype) -> constant`` function behind ``dtype(value)``."""
    global _make_constant
    _make_constant = make


def float_max(dt: DataType) -> float:
    """Largest finite value of a float type (IEEE-like, with the fp8/sub-byte conventions)."""
    if dt.name == "float8_e4m3":
        return 448.0
    e, m = dt.exponent_bits, dt.mantissa_bits
    bias = (1 << (e - 1)) - 1
    if dt.nbits >= 16 or e == 5:  # IEEE-like: the all-ones exponent is reserved
        max_exp = (1 << e) - 2 - bias
    else:  # small sub-byte floats have no Inf/NaN encodings
        max_exp = (1 << e) - 1 - bias
    return (2.0 - 2.0 ** (-m)) * 2.0**max_exp


def _np_storage(dt: DataType) -> np.dtype:
    if dt.kind == "bool":
        return np.dtype(np.bool_)
    if dt.kind == "float":
        return {16: np.dtype(np.float16), 32: np.dtype(np.float32), 64: np.dtype(np.float64)}.get(
            dt.nbits if dt.name != "bfloat16" else 0, np.dtype(np.float32)
        )
    bits = 8 if dt.nbits <= 8 else 16 if dt.nbits <= 16 else 32 if dt.nbits <= 32 else 64
    return np.dtype(f"{'i' if dt.kind == 'int' else 'u'}{bits // 8}")


def _int(name, short, nbits):
    return DataType(name, short, nbits, "int")


def _uint(name, short, nbits):
    return DataType(name, short, nbits, "uint")


def _float(name, short, nbits, e, m):
    return DataType(name, short, nbits, "float", e, m)


int8 = _int("int8", "i8", 8)
int16 = _int("int16", "i16", 16)
int32 = _int("int32", "i32", 32)
int64 = _int("int64", "i64", 64)
uint8 = _uint("uint8", "u8", 8)
uint16 = _uint("uint16", "u16", 16)
uint32 = _uint("uint32", "u32", 32)
uint64 = _uint("uint64", "u64", 64)
float16 = _float("float16", "f16", 16, 5, 10)
bfloat16 = _float("bfloat16", "bf16", 16, 8, 7)
float32 = _float("float32", "f32", 32, 8, 23)
float64 = _float("float64", "f64", 64, 11, 52)
tfloat32 = _float("tfloat32", "tf32", 32, 8, 10)
float8_e4m3 = _float("float8_e4m3", "f8e4m3", 8, 4, 3)
float8_e5m2 = _float("float8_e5m2", "f8e5m2", 8, 5, 2)
boolean = DataType("boolean", "bool", 8, "bool")
void_p = PointerType(None)

# Sub-byte integer families: int1b..int7b, uint1b..uint7b.
_subbyte_ints = {}
for _n in range(1, 8):
    _subbyte_ints[f"int{_n}b"] = _int(f"int{_n}b", f"i{_n}", _n)
    _subbyte_ints[f"uint{_n}b"] = _uint(f"uint{_n}b", f"u{_n}", _n)

# Sub-byte float families floatN_eXmY: 1 sign + X exponent + Y mantissa bits.
_subbyte_floats = {}
for _nb, _pairs in {
    7: [(5, 1), (4, 2), (3, 3), (2, 4)],
    6: [(4, 1), (3, 2), (2, 3)],
    5: [(3, 1), (2, 2)],
    4: [(2, 1)],
    3: [(1, 1)],
}.items():
    for _e, _m in _pairs:
        _nm = f"float{_nb}_e{_e}m{_m}"
        _subbyte_floats[_nm] = _float(_nm, f"f{_nb}e{_e}m{_m}", _nb, _e, _m)

globals().update(_subbyte_ints)
globals().update(_subbyte_floats)

ALL_DTYPES: dict[str, DataType] = {
    d.name: d
    for d in [
        int8,
        int16,
        int32,
        int64,
        uint8,
        uint16,
        uint32,
        uint64,
        float16,
        bfloat16,
        float32,
        float64,
        tfloat32,
        float8_e4m3,
        float8_e5m2,
        boolean,
        *_subbyte_ints.values(),
        *_subbyte_floats.values(),
    ]
}
SHORT_NAMES: dict[str, DataType] = {d.short_name: d for d in ALL_DTYPES.values()}

_NP_TO_DTYPE = {
    np.dtype(np.float16): float16,
    np.dtype(np.float32): float32,
    np.dtype(np.float64): float64,
    np.dtype(np.int8): int8,
    np.dtype(np.int16): int16,
    np.dtype(np.int32): int32,
    np.dtype(np.int64): int64,
    np.dtype(np.uint8): uint8,
    np.dtype(np.uint16): uint16,
    np.dtype(np.uint32): uint32,
    np.dtype(np.uint64): uint64,
    np.dtype(np.bool_): boolean,
}


def from_numpy_dtype(dt) -> DataType | None:
    """The tilus type of a NumPy dtype, or None when tilus has no equivalent."""
    return _NP_TO_DTYPE.get(np.dtype(dt))


def from_torch_dtype(tdt) -> DataType | None:
    """The tilus type of a torch dtype (by name, so torch need not be imported here)."""
    name = str(tdt).replace("torch.", "")
    return {
        "float16": float16,
        "half": float16,
        "bfloat16": bfloat16,
        "float32": float32,
        "float": float32,
        "float64": float64,
        "double": float64,
        "int8": int8,
        "int16": int16,
        "int32": int32,
        "int64": int64,
        "uint8": uint8,
        "uint16": uint16,
        "uint32": uint32,
        "uint64": uint64,
        "bool": boolean,
        "float8_e4m3fn": float8_e4m3,
        "float8_e5m2": float8_e5m2,
    }.get(name)


def promote(a: DataType, b: DataType) -> DataType:
    """C-like promotion of two scalar types (bool < integers < floats; wider wins)."""
    if a == b:
        return a
    if a.kind == "bool":
        return b
    if b.kind == "bool":
        return a
    if a.is_float() or b.is_float():
        if a.is_float() and b.is_float():
            return a if a.nbits >= b.nbits else b
        return a if a.is_float() else b
    # both integers: wider wins; on equal width unsigned wins (C's usual conversions)
    if a.nbits != b.nbits:
        return a if a.nbits > b.nbits else b
    return a if a.kind == "uint" else b
