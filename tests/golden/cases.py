"""The golden-code cases: every example config and the seed kernels, generated on the CPU."""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).resolve().parent
EXAMPLES = REPO / "examples"
# the user's seed kernels live beside the repository (tests/conftest.py finds them the same way)
SEED_KERNELS = Path(os.environ.get("TILUS_SEED_KERNELS", REPO.parent / "shared" / "seed_kernels"))
#: the compile-time sizes of the matmul kernels (the GPU tests' and benchmarks' size)
MATMUL_ARGS = (4096, 4096, 4096, None, None, None)
REGEN = "python -m tests.golden.regen"


@dataclass(frozen=True)
class Case:
    """One golden file: a Script class (by module and name) and the call's arguments."""

    name: str  # tests/golden/<name>.cu
    where: str  # how the module is found: "examples/...", or "seed:<name>"
    cls: str
    args: tuple

    @property
    def path(self) -> Path:
        return GOLDEN / f"{self.name}.cu"

    @property
    def is_seed(self) -> bool:
        return self.where.startswith("seed:")


CASES = [
    *(
        Case(f"hopper_matmul_v{v}", f"examples/hopper_matmul/matmul_v{v}.py", cls, MATMUL_ARGS)
        for v, cls in enumerate(
            [
                "MatmulTMA",
                "MatmulWGMMA",
                "MatmulWGMMAV2",
                "MatmulWGMMAV3",
                "MatmulWGMMAV4",
                "MatmulWGMMAV5",
                "MatmulWGMMAV6",
            ]
        )
    ),
    Case("tiled_matmul", "examples/tiled_matmul.py", "TiledMatmul", MATMUL_ARGS),
    Case("vector_add", "examples/vector_add.py", "VectorAdd", (4096, None, None, None)),
    Case("seed_matmul_v2", "seed:matmul_v2", "MatmulWGMMAV2", MATMUL_ARGS),
    Case("seed_matmul_v4", "seed:matmul_v4", "MatmulWGMMAV4", MATMUL_ARGS),
]


class SeedsMissing(Exception):
    """The seed-kernel folder is not beside the repository."""


def _module(case: Case):
    if case.is_seed:
        name = case.where.split(":", 1)[1]
        mod_name = f"seed_{name}"  # the examples have modules of the same names
        if mod_name in sys.modules:
            return sys.modules[mod_name]
        path = SEED_KERNELS / f"{name}.py"
        if not path.is_file():
            raise SeedsMissing(f"seed kernel {path.name} not found in {SEED_KERNELS}")
        spec = importlib.util.spec_from_file_location(mod_name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[mod_name] = module
        spec.loader.exec_module(module)
        return module
    path = REPO / case.where
    folder = str(path.parent)
    # the examples import their siblings (harness, matmul_v4, example_support) by plain name
    for d in (str(EXAMPLES), folder):
        if d not in sys.path:
            sys.path.insert(0, d)
    return importlib.import_module(path.stem)


def sources(case: Case) -> list[tuple[dict, str | None, str | None]]:
    """(config, CUDA source or None, reason it did not lower or None) per config, in order.

    Only code generation runs (no NVRTC): the source of ``tilus.compile`` without the compile.
    """
    from tilus.backends.cuda.codegen.kernel import generate
    from tilus.errors import TilusCompileError, at

    kernel = getattr(_module(case), case.cls)()
    const_args, _ = kernel.bind(case.args, {})
    out = []
    for cfg in kernel.configs:
        try:
            out.append((cfg, generate(kernel.program(cfg, const_args)).source, None))
        except TilusCompileError as e:
            out.append((cfg, None, f"{at(e.loc)}: {e.msg}" if e.loc else e.msg))
    return out


def render(case: Case) -> str:
    """The golden file's text: a header, then each config's source (or why it did not lower)."""
    entries = sources(case)
    const, _ = getattr(_module(case), case.cls)().bind(case.args, {})
    lines = [
        f"// tilus golden code of {case.cls} ({_where(case)}), compile-time arguments {const}:",
        f"// every config of its autotune space, generated on the CPU. Regenerate: {REGEN}",
    ]
    for i, (cfg, src, why) in enumerate(entries, 1):
        head = f"// ======== config {i}/{len(entries)}: {cfg}"
        if src is None:
            lines.append(f"{head}: not lowered: {why.splitlines()[0]}")
            continue
        lines.append(f"{head} ========")
        lines.append(src.rstrip("\n"))
    return "\n".join(lines) + "\n"


def _where(case: Case) -> str:
    return f"seed kernel {case.where.split(':', 1)[1]}.py" if case.is_seed else case.where
