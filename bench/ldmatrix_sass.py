"""Shared operands of ``dot``: SASS of the tutorial V0 and of a shared-operand dot, per config.

Prints, for each kernel, the shared loads (LDS, LDSM), the mma instructions, all instructions
and the registers ptxas used. Runs on CPU (NVRTC and a disassembler, see tilus.runtime.sass):
``python bench/ldmatrix_sass.py [--tilus OTHER_CHECKOUT]`` (the second form compiles the same
kernels with another checkout's tilus, to compare element-wise loads with ldmatrix).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# ``--tilus CHECKOUT`` measures another checkout's tilus (e.g. main) with these kernels
TILUS = Path(sys.argv[sys.argv.index("--tilus") + 1]) if "--tilus" in sys.argv else REPO
for _p in (REPO / "tests", REPO / "examples" / "hopper_matmul", TILUS):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

import tilus  # noqa: E402
from tilus.runtime.sass import sass_opcodes  # noqa: E402


def _v0():
    spec = importlib.util.spec_from_file_location(
        "ldsm_v0", REPO / "examples" / "hopper_matmul" / "matmul_v0.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.MatmulTMA


def kernels():
    """(name, a function compiling the kernels) to measure."""
    from dot_forms_kernels import SharedDot

    f16 = tilus.float16

    def shared_dot(op, acc):
        return lambda: tilus.compile(SharedDot(op, acc), 1000, 1000, *([tilus.void_p] * 3))

    yield "V0 matmul", lambda: tilus.compile(_v0()(), 4096, 4096, 4096, f16, f16, f16)
    for op, acc in ((tilus.float16, tilus.float32), (tilus.int8, tilus.int32)):
        yield f"dot {op}->{acc} 64x64x64", shared_dot(op, acc)


def main():
    print(f"{'kernel':34} {'config':28} {'LDS':>5} {'LDSM':>5} {'MMA':>5} {'instr':>6} {'regs':>5}")
    for name, build in kernels():
        try:
            cks = build()
        except tilus.TilusError as e:  # an older checkout without this form
            print(f"{name:34} not compiled: {str(e).splitlines()[0][:60]}")
            continue
        for ck in cks if isinstance(cks, list) else [cks]:
            ops = sass_opcodes(ck.sass())
            mma = sum(v for k, v in ops.items() if k in ("HMMA", "IMMA"))
            cfg = ",".join(f"{v}" for v in ck.config.values()) if ck.config else "-"
            print(
                f"{name:34} {cfg:28} {ops.get('LDS', 0):5} {ops.get('LDSM', 0):5} {mma:5} "
                f"{sum(ops.values()):6} {ck.resources['registers']:5}"
            )


if __name__ == "__main__":
    main()
