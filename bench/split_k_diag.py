"""Repeat pinned split-K configs of the W4A16 mma kernel and explain their wrong elements.

``python3 bench/split_k_diag.py NAME,NAME+s,... [LAUNCHES]`` (names: ``CF`` below; ``SEED``
picks the inputs, ``INTERP=1`` runs a small problem on the interpreter). Each launch at
1 x 8192 x 8192 uint4b is poisoned first, and launches alternate between two random X, so
sums a launch left in the workspace would show. A name ending in ``+s`` runs ``Strong``, whose
meeting has every thread release its workspace stores and acquire before reading them. Per
config: the largest error against the largest value, the bad launches and elements, the bad
64-row tiles, and for a few wrong elements the nearest of: one 128-K chunk's products, a
part's sums, or a part's sums from the other input (stale).
"""

import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
for p in (REPO, REPO / "examples" / "quantized", REPO / "bench"):
    sys.path.insert(0, str(p))

import matmul_wx_a16 as ex  # noqa: E402
import matmul_wx_a16_mma as mma  # noqa: E402
import torch  # noqa: E402
from w4a16_configs import parse_configs  # noqa: E402

import tilus  # noqa: E402
from tilus import int32  # noqa: E402


class Strong(mma.MatmulWxA16Mma):
    """The mma kernel with a meeting where every thread releases and acquires."""

    def add_parts(self, acc, ws, cnt, tile: int32, part: int32, split: int32):
        """``SplitKParts.add_parts`` with a release and an acquire by every thread."""
        rows = 64
        nt = 32 * self.warps
        flag = self.shared_tensor(dtype=int32, shape=[1])
        self.store_global(ws, acc, offsets=[(tile * self.split_k + part) * rows, 0])
        # every thread releases its own stores
        ai = self.register_tensor(dtype=int32, shape=[nt], init=tile)
        az = self.register_tensor(dtype=int32, shape=[nt], init=0)
        self.atomic.global_scatter_add(
            cnt, dim=0, indices=ai, values=az, sem="release", scope="gpu"
        )
        self.sync()
        with self.single_warp(0):
            idx = self.register_tensor(dtype=int32, shape=[1], init=tile)
            one = self.register_tensor(dtype=int32, shape=[1], init=1)
            old = self.atomic.global_scatter_add(
                cnt, dim=0, indices=idx, values=one, sem="acq_rel", scope="gpu"
            )
            self.store_shared(flag, old)
            if old[0] == split - 1:
                back = self.register_tensor(dtype=int32, shape=[1], init=-split)
                self.atomic.global_scatter_add(cnt, dim=0, indices=idx, values=back, scope="gpu")
        self.sync()
        seen = self.load_shared(flag)
        last: int32 = 0
        if seen[0] == split - 1:
            last = 1
            bi = self.register_tensor(dtype=int32, shape=[nt], init=tile)
            bz = self.register_tensor(dtype=int32, shape=[nt], init=0)
            self.atomic.global_scatter_add(
                cnt, dim=0, indices=bi, values=bz, sem="acquire", scope="gpu"
            )
            for p in self.range(split):
                if p != part:
                    acc += self.load_global(
                        ws,
                        offsets=[(tile * self.split_k + p) * rows, 0],
                        shape=[rows, self.block_m],
                    )
        return last


T = "w_ring=True,w_tma=True,x_tma=True"
CF = {
    "C8": f"block_m=8,split_k=8,unroll=1,prefetch=2,stages=4,min_blocks=8,{T}",
    "C1": f"block_m=8,split_k=1,unroll=1,prefetch=2,stages=4,min_blocks=8,{T}",
    "T842": f"block_m=8,split_k=4,unroll=2,prefetch=1,stages=4,min_blocks=4,{T}",
    "T142": f"block_m=8,split_k=1,unroll=2,prefetch=1,stages=4,min_blocks=4,{T}",
    "R842": "block_m=8,split_k=4,unroll=2,prefetch=1,stages=4,min_blocks=4,w_ring=True",
    "R142": "block_m=8,split_k=1,unroll=2,prefetch=1,stages=4,min_blocks=4,w_ring=True",
    "B842": "block_m=8,split_k=4,unroll=2,prefetch=0,stages=3,min_blocks=4",
    "B142": "block_m=8,split_k=1,unroll=2,prefetch=0,stages=3,min_blocks=4",
    "T1642": f"block_m=16,split_k=4,unroll=2,prefetch=1,stages=3,min_blocks=4,{T}",
    "T1132": f"block_m=16,split_k=1,unroll=2,prefetch=1,stages=3,min_blocks=4,{T}",
    "T1643": f"block_m=16,split_k=4,unroll=2,prefetch=1,stages=4,min_blocks=4,{T}",
    "T1622": f"block_m=16,split_k=2,unroll=2,prefetch=1,stages=3,min_blocks=4,{T}",
    "R1642": "block_m=16,split_k=4,unroll=2,prefetch=1,stages=3,min_blocks=4,w_ring=True",
    "B1642": "block_m=16,split_k=4,unroll=2,prefetch=0,stages=3,min_blocks=4",
    "S2": f"block_m=8,split_k=2,unroll=2,prefetch=1,stages=4,min_blocks=4,{T}",
}
interp = os.environ.get("INTERP") == "1"
pick = sys.argv[1].split(",") if len(sys.argv) > 1 else list(CF)
launches = int(sys.argv[2]) if len(sys.argv) > 2 else 20
m, n, k = (1, 256, 1024) if interp else (1, 8192, 8192)
dev = "cpu" if interp else "cuda"
torch.manual_seed(int(os.environ.get("SEED", "0")))
x, w, s, w16 = ex.torch_problem(torch, m, n, k, 128, tilus.uint4b, device=dev)
wp = mma.prepack_torch(torch, w, tilus.uint4b)
kc = k // 128
xs = [x, torch.randn_like(x)]  # launches alternate between two inputs: stale sums show
refs = [torch.matmul(xx.float(), w16.float().T)[0] for xx in xs]
pcs = [
    (xx.float()[0].reshape(kc, 128)[None] * w16.float().reshape(n, kc, 128)).sum(-1) for xx in xs
]
scale = max(r.abs().max() for r in refs)
for name0 in pick:
    strong = name0.endswith("+s")
    name = name0[:-2] if strong else name0
    cfg = parse_configs(CF[name])[0]
    cls = Strong if strong else mma.MatmulWxA16Mma
    kern = cls(tilus.uint4b, 128, **mma.pinned(**cfg))
    y = torch.empty((m, n), dtype=torch.float16, device=dev)
    errs, nbad, allbad = [], [], set()
    expl = []
    for li in range(launches):
        xi = li % 2
        ref, pc, po = refs[xi], pcs[xi], pcs[1 - xi]
        y.fill_(float("nan"))
        kern(m, n, k, xs[xi], wp, s, y)
        if not interp:
            torch.cuda.synchronize()
        d = y[0].float() - ref
        errs.append((d.abs().max() / scale).item())
        bad = (d.abs() > 5e-3 * scale).nonzero().flatten().tolist()
        nbad.append(len(bad))
        allbad |= set(bad)
        for r in bad[:2]:
            if len(expl) >= 6:
                break
            cand = [
                (abs(d[r] - sg * pc[r, c]).item(), sg, f"c{c}") for c in range(kc) for sg in (1, -1)
            ]
            sp, u = cfg["split_k"], cfg["unroll"]
            steps = kc // u
            for p in range(sp):
                lo, hi = p * steps // sp * u, (p + 1) * steps // sp * u
                cand += [
                    (abs(d[r] - sg * pc[r, lo:hi].sum()).item(), sg, f"part{p}") for sg in (1, -1)
                ]
                cand.append(
                    (abs(d[r] - (po[r, lo:hi].sum() - pc[r, lo:hi].sum())).item(), 0, f"stale{p}")
                )
            cand.sort(key=lambda t: t[0])
            expl.append(
                f"L{li} row {r} (tile {r // 64}) diff {d[r].item():+.3f} ref {ref[r].item():+.3f} best {[(round(a, 4), b, c) for a, b, c in cand[:2]]}"
            )
    print(
        f"{name0}: max {max(errs):.2e} launches-bad {sum(1 for b in nbad if b)}/{launches} elems {nbad}",
        flush=True,
    )
    if allbad:
        print(f"   tiles {sorted({r // 64 for r in allbad})[:24]}")
    for e in expl:
        print("   ", e)
