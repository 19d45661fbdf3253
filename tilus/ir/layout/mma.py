"""The mma.sync shapes ``dot`` lowers to, by dtypes, and the warp split that fits registers."""

from __future__ import annotations

from dataclasses import dataclass

from tilus.ir.layout.register import RegisterLayout, mma_a, mma_b, mma_c


@dataclass(frozen=True)
class MmaAtom:
    """One warp-level ``mma.sync.aligned.m16n8k{k}.row.col`` form.

    Attributes:
        k: The K of the shape (16 for 16-bit inputs, 32 for 8-bit, 8 for tf32).
        pack: Input elements per 32-bit register (2, 4 or 1).
        ab: The PTX type of A and B (``f16``, ``bf16``, ``s8``, ``u8``, ``tf32``).
        cd: The PTX type of C and D (``f32``, ``f16``, ``s32``).
    """

    k: int
    pack: int
    ab: str
    cd: str

    @property
    def name(self) -> str:
        """The C++ name of its wrapper (``tl_mma_m16n8k16_f32_f16``)."""
        return f"tl_mma_m16n8k{self.k}_{self.cd}_{self.ab}"

    def layouts(self, m, n, k, wm, wn, num_warps) -> tuple[RegisterLayout, ...]:
        """The (A, B, C) fragment layouts of an [m, k] @ [k, n] dot over ``wm x wn`` warps."""
        return (
            mma_a(m, k, wm, wn, num_warps, self.pack),
            mma_b(k, n, wm, wn, num_warps, self.pack),
            mma_c(m, n, wm, wn, num_warps),
        )


#: (operand dtype, accumulator dtype) -> the mma.sync form (PTX ISA 9.7.14.5.14). int8 and
#: uint8 accumulate in int32 without .satfinite: sums wrap modulo 2^32 like int32 additions.
ATOMS = {
    ("float16", "float32"): MmaAtom(16, 2, "f16", "f32"),
    ("bfloat16", "float32"): MmaAtom(16, 2, "bf16", "f32"),
    ("float16", "float16"): MmaAtom(16, 2, "f16", "f16"),
    ("int8", "int32"): MmaAtom(32, 4, "s8", "s32"),
    ("uint8", "int32"): MmaAtom(32, 4, "u8", "s32"),
    ("tfloat32", "float32"): MmaAtom(8, 1, "tf32", "f32"),
}


def mma_atom(operand, acc) -> MmaAtom | None:
    """The mma.sync form for ``operand`` inputs into an ``acc`` accumulator (None: none)."""
    return ATOMS.get((operand.name, acc.name))


def supported_pairs() -> str:
    """The operand -> accumulator pairs ``dot`` lowers, for error messages."""
    return ", ".join(f"{a} -> {c}" for a, c in ATOMS)


def fragment_registers(m, n, k, wm, wn, operand_bits: int, acc_bits: int) -> int:
    """32-bit registers per thread holding A, B and C of a dot split ``wm x wn`` over warps,
    as the backend holds tiles: one register per element up to 32 bits."""
    per = lambda bits: max(1, bits // 32)  # noqa: E731
    a = (m // wm) * k // 32 * per(operand_bits)
    b = k * (n // wn) // 32 * per(operand_bits)
    c = (m // wm) * (n // wn) // 32 * per(acc_bits)
    return a + b + c


def choose_warps(
    num_warps: int, m: int, n: int, k: int = 16, operand_bits: int = 16, acc_bits: int = 32
) -> tuple[int, int] | None:
    """How warps tile an [m, n] accumulator: (warps along m, warps along n), or None.

    Uses as many of the ``num_warps`` warps as the tile allows (a power-of-two share of them;
    the rest hold copies), and of those splits the one with the fewest fragment registers per
    thread (A is replicated over the warps along n and B over those along m), then the most
    square per-warp tile.
    """
    used = num_warps
    while used >= 1:
        options = []
        wm = 1
        while wm <= used:
            if used % wm == 0:
                wn = used // wm
                if m % (16 * wm) == 0 and n % (8 * wn) == 0:
                    regs = fragment_registers(m, n, k, wm, wn, operand_bits, acc_bits)
                    options.append((regs, abs((m // wm) - (n // wn)), wm, wn))
            wm *= 2
        if options:
            *_, wm, wn = min(options)
            return wm, wn
        if used % 2:
            return None
        used //= 2
    return None
