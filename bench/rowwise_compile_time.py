"""CPU seconds to compile each config of the row-wise examples' autotune spaces (no GPU).

For every config of Softmax, OnlineSoftmax, LayerNorm and RMSNorm (both forms) at the benchmark's row
lengths (8192, 32000, 1024) it prints the tilus time (transpile, passes, code generation), the
NVRTC time (CUDA C++ to cubin for sm_90a), the lines of generated CUDA and the registers a
thread, and a summary (median and max seconds a config). Times are CPU seconds of this process
(``time.process_time``), so a loaded machine inflates them less than wall time; ``--repeat K``
keeps the least of K compiles. ``--sass`` adds the SASS of the hot loop (the longest loop of
the kernel): its instruction count and that of its work (memory, floating point, shuffles),
the numbers that must not grow when the emitted code changes for compile time. It compiles
the usual build, the one a call with 16-byte aligned tensors gets (``Function.pointer_align``);
``--unaligned`` compiles the build for pointers of any alignment instead; ``--both`` compiles
each config's other build right after it (a comparison under the same load). Run:
``python bench/rowwise_compile_time.py [--n 8192 32000 1024] [--kernels LayerNorm] [--sass]``
(needs NVRTC; ``--sass`` needs cuobjdump).
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
for _p in (REPO, REPO / "examples"):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

import layer_norm  # noqa: E402
import rms_norm  # noqa: E402
import softmax  # noqa: E402

import tilus  # noqa: E402
from tilus.backends.cuda.codegen.build import NVRTC_OPTIONS, generate  # noqa: E402
from tilus.ir.function import UNALIGNED_ARG  # noqa: E402
from tilus.runtime.nvrtc import compile_cuda  # noqa: E402
from tilus.target import buildable, building_for  # noqa: E402

#: Pointer arguments after (m, n) of each kernel.
KERNELS = [
    (softmax.Softmax, 2),
    (softmax.OnlineSoftmax, 2),
    (layer_norm.LayerNorm, 4),
    (rms_norm.RMSNorm, 3),
]


def one(
    cls, nptr: int, n: int, cfg: dict, repeat: int = 1, sass: bool = False, unaligned=False
) -> dict:
    """Compile one config; its times (CPU seconds, the least of ``repeat``), source lines,
    registers and (``sass``) hot-loop instruction counts; ``unaligned``: the build for
    pointers of any alignment."""
    kernel = cls(**cfg)
    target = buildable("sm_90a")
    t_tilus = t_nvrtc = float("inf")
    for _ in range(repeat):
        with building_for(target):
            t0 = time.process_time()
            const_args, _ = kernel.bind((4096, n) + (None,) * nptr, {})
            if unaligned:
                const_args = {**const_args, UNALIGNED_ARG: True}
            ks = generate(kernel.program(cfg, const_args), smem_limit=227 * 1024)
            t1 = time.process_time()
        binary = compile_cuda(ks.source, arch="sm_90a", options=NVRTC_OPTIONS, name="k.cu")
        t2 = time.process_time()
        t_tilus, t_nvrtc = min(t_tilus, t1 - t0), min(t_nvrtc, t2 - t1)
    regs = None
    for line in binary.log.splitlines():
        if "registers" in line and "Used" in line:
            regs = int(line.split("Used")[1].split("registers")[0])
    out = dict(tilus=t_tilus, nvrtc=t_nvrtc, lines=ks.source.count("\n"), regs=regs)
    if sass:
        from tilus.runtime.sass import disassemble

        out.update(hot_loop(disassemble(binary.cubin)))
    return out


_SASS_LINE = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)([^;]*);")
#: Opcodes (their first part) of a row-wise kernel's work: memory, floating point, shuffles.
WORK = ("LDG", "STG", "LDS", "STS", "LDGSTS", "LDL", "STL", "MUFU", "FMNMX", "FADD", "FMUL",
        "FFMA", "FSEL", "HADD2", "F2FP", "SHFL")  # fmt: skip


def is_work(op: str) -> bool:
    """A work opcode (``WORK``); not a 1- or 2-byte access: the element-wise path of a
    vector access, which the hot loop runs only for a misaligned pointer."""
    parts = op.split(".")
    return parts[0] in WORK and not {"U8", "S8", "U16", "S16"} & set(parts[1:])


def hot_loop(sass: str) -> dict:
    """The longest loop of a SASS listing (a backward branch and its target; the whole kernel
    when it has none, as a row-wise kernel of one pass): its instruction count (``loop``) and
    that of its work (``work``, see ``is_work``)."""
    ins = []
    for line in sass.splitlines():
        m = _SASS_LINE.search(line)
        if m and (m.group(2) or "").strip() != "@!PT":  # @!PT: never runs (padding)
            t = re.search(r"0x([0-9a-f]+)", m.group(4)) if m.group(3) == "BRA" else None
            ins.append((int(m.group(1), 16), m.group(3), int(t.group(1), 16) if t else None))
    # a branch to itself is the padding after the kernel's EXIT, not a loop
    loops = [(a - t, t, a) for a, _, t in ins if t is not None and t < a]
    _, lo, hi = (
        max(loops) if loops else (0, 0, max((a for a, op, _ in ins if op == "EXIT"), default=0))
    )
    body = [op for a, op, _ in ins if lo <= a <= hi and op != "NOP"]
    return dict(loop=len(body), work=sum(map(is_work, body)))


def main() -> int:
    """Compile every config at every row length; print a line each and a summary."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--n", type=int, nargs="+", default=[8192, 32000, 1024])
    ap.add_argument("--kernels", nargs="+", default=None, help="class names (default: all)")
    ap.add_argument("--repeat", type=int, default=1, help="compiles a config, the least kept")
    ap.add_argument("--sass", action="store_true", help="hot-loop SASS counts (cuobjdump)")
    ap.add_argument("--unaligned", action="store_true", help="the build for any alignment")
    ap.add_argument(
        "--both", action="store_true", help="each config's two builds in turn (usual, any)"
    )
    a = ap.parse_args()
    totals, refused, other = [], 0, []
    for cls, nptr in KERNELS:
        if a.kernels and cls.__name__ not in a.kernels:
            continue
        for n in a.n:
            for cfg in cls().configs:
                label = ",".join(f"{k}={v}" for k, v in cfg.items())
                try:
                    r = one(cls, nptr, n, cfg, a.repeat, a.sass, a.unaligned)
                except tilus.TilusError as e:
                    refused += 1
                    print(f"{cls.__name__:14s} n={n:<6d} {label:30s} refused: "
                          f"{str(e).splitlines()[0][-90:]}")  # fmt: skip
                    continue
                totals.append(r["tilus"] + r["nvrtc"])
                extra = f"  loop {r['loop']:5d}  work {r['work']:5d}" if a.sass else ""
                if a.both:  # the other build, right after (the same load on the machine)
                    u = one(cls, nptr, n, cfg, a.repeat, False, not a.unaligned)
                    other.append(u["tilus"] + u["nvrtc"])
                    extra += f"  | other build: nvrtc {u['nvrtc']:5.2f} s  {u['lines']:5d} lines"
                print(f"{cls.__name__:14s} n={n:<6d} {label:30s} tilus {r['tilus']:5.2f} s  "
                      f"nvrtc {r['nvrtc']:5.2f} s  {r['lines']:5d} lines  {r['regs']} regs{extra}",
                      flush=True)  # fmt: skip
    if totals:
        print(
            f"{len(totals)} configs compiled, {refused} refused; seconds a config: median "
            f"{statistics.median(totals):.2f}, max {max(totals):.2f}, total {sum(totals):.1f}"
        )
    if other:
        print(
            f"the other build ({'usual' if a.unaligned else 'any alignment'}): median "
            f"{statistics.median(other):.2f}, max {max(other):.2f}, total {sum(other):.1f}; "
            f"over 0.5 s: {sum(t > 0.5 for t in totals)} against {sum(t > 0.5 for t in other)}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
