"""print_tensor on the CUDA backend: register, shared (swizzled, column blocks, slices,
transposed views) and global tiles print the interpreter's text; compiled by NVRTC and run on
the CPU emulator (a GPU test runs it in a child process and compares its stdout)."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import tilus
from tests.cuda.conftest import ROOT, needs_gpu, needs_nvrtc
from tests.helpers_cpu_cuda import available, emulate
from tests.helpers_errors import err_line
from tests.lowbit_kernels import codes
from tilus import float16, float32, int32, uint8
from tilus.ir.layout import shared_row_major_swizzle
from tilus.tensor import pack

needs_gxx = pytest.mark.skipif(not available(), reason="needs g++ for the CPU emulator")


@pytest.fixture(scope="module", autouse=True)
def _fresh_cache(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("TILUS_CACHE_DIR", str(tmp_path_factory.mktemp("tilus-cache")))
    yield
    mp.undo()


class PrintTiles(tilus.Script):
    """Every kind of tile printed: a global view of runtime shape, a swizzled shared tile in
    column blocks and its transpose, slices of a shared tile, a float16 register tile
    spread over two warps, an int32 tile with a float format and a 0-d tile."""

    def __call__(self, m: int32, n: int32, x_ptr: ~float32, h_ptr: ~float16, k_ptr: ~int32):
        self.attrs.blocks = 1
        self.attrs.warps = 2
        gx = self.global_view(x_ptr, dtype=float32, shape=[m, n])
        self.print_tensor("global:", gx, fmt="%.3f")
        self.print_tensor("its row 1:", gx[1], fmt="%.1f")
        self.print_tensor("transposed view:", gx.transpose(), fmt="%.1f")
        x = self.load_global(gx, offsets=[0, 0], shape=[8, 64])
        s = self.shared_tensor(
            dtype=float32, shape=[8, 64], layout=shared_row_major_swizzle((8, 64), 4)
        )
        self.store_shared(s, x * 2.0)
        self.print_tensor("shared:", s)
        self.print_tensor("transposed:", s.transpose())
        gh = self.global_view(h_ptr, dtype=float16, shape=[3, 4, 5])
        h = self.load_global(gh, offsets=[0, 0, 0], shape=[3, 4, 5])
        self.print_tensor("half:", h)
        sh = self.shared_tensor(dtype=float16, shape=[3, 4, 5])
        self.store_shared(sh, h)
        self.print_tensor("half in shared:", sh[1], fmt="%4.1f")
        self.print_tensor("its row 2:", sh[1, 2], fmt="%+.1e")
        gk = self.global_view(k_ptr, dtype=int32, shape=[n])
        self.print_tensor("ints as %f, 100%%:", gk, fmt="%6.1f %%")
        k = self.load_global(gk, offsets=[0], shape=[64])
        self.print_tensor("ints:", k, fmt="%u")
        self.print_tensor("total:", self.sum(k))
        self.print_tensor("x > 0:", x[0] > 0.0)


def _inputs(m=5, n=61):
    rng = np.random.default_rng()
    x = rng.standard_normal((m, n)).astype(np.float32)
    h = (rng.integers(-40, 40, (3, 4, 5)) / 8).astype(np.float16)
    k = rng.integers(-1000, 1000, n).astype(np.int32)
    return m, n, x, h, k


def _interpreted(args) -> str:
    import contextlib
    import io

    out = io.StringIO()
    with tilus.option.scoped(interpret=True), contextlib.redirect_stdout(out):
        PrintTiles()(*args)
    return out.getvalue()


@needs_nvrtc
@needs_gxx
def test_print_tensor_of_every_kind_matches_the_interpreter(capfd):
    args = _inputs()
    want = _interpreted(args)
    emulate(PrintTiles(), args, [1])
    got = capfd.readouterr().out
    assert "transposed:" in want and "its row 2:" in want and "x > 0:" in want
    assert got == want


class LanesOfOneWarp(tilus.Script):
    """A group of 8 lanes of the second warp prints its tile and a view and reads an element:
    each waits for the group, a ``__syncwarp`` of the group's lanes."""

    def __call__(self, x_ptr: ~float32, y_ptr: ~float32):
        self.attrs.blocks = 1
        self.attrs.warps = 2
        g = self.global_view(x_ptr, dtype=float32, shape=[16])
        gy = self.global_view(y_ptr, dtype=float32, shape=[16])
        with self.thread_group(thread_begin=40, num_threads=8):
            x = self.load_global(g, offsets=[0], shape=[16])
            self.print_tensor("x:", x)
            self.print_tensor("view:", g, fmt="%.2f")
            self.store_global(gy, x * x[3], offsets=[0])
            self.sync()


@needs_nvrtc
@needs_gxx
def test_a_group_of_lanes_of_one_warp_prints_and_broadcasts(capfd):
    x = np.random.default_rng().standard_normal(16).astype(np.float32)
    y, yi = np.zeros_like(x), np.zeros_like(x)
    with tilus.option.scoped(interpret=True):
        LanesOfOneWarp()(x, yi)
    want = capfd.readouterr().out
    ck = emulate(LanesOfOneWarp(), (x, y), [1])
    assert capfd.readouterr().out == want and "view:" in want
    np.testing.assert_array_equal(y, yi)
    assert "__syncwarp(0x0000ff00u);" in ck.source


class BadFormat(tilus.Script):
    def __call__(self, x_ptr: ~float32):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        g = self.global_view(x_ptr, dtype=float32, shape=[4])
        self.print_tensor("x", g, fmt="%f and %f")  # ERR


class PrintPacked(tilus.Script):
    """A bit-packed global view of runtime rows (elements straddling bytes for 3 and 6 bits)
    and a register tile loaded from it."""

    def __init__(self, dt):
        super().__init__()
        self.dt = dt

    def __call__(self, m: int32, w_ptr: ~uint8):
        self.attrs.blocks = 1
        self.attrs.warps = 1
        g = self.global_view(w_ptr, dtype=self.dt, shape=[m, 12])
        self.print_tensor("view:", g)
        self.print_tensor("tile:", self.load_global(g, offsets=[0, 0], shape=[4, 16]))


@needs_nvrtc
@needs_gxx
@pytest.mark.parametrize(
    "dt",
    [tilus.int4b, tilus.float6_e3m2],
    ids=str,  # signed ints; floats straddling bytes
)
def test_print_of_packed_tiles_matches_the_interpreter(dt, capfd):
    m = 5
    w = pack(codes(np.random.default_rng(), dt, (m, 12)), dt.nbits)
    with tilus.option.scoped(interpret=True):
        PrintPacked(dt)(m, w)
    want = capfd.readouterr().out
    emulate(PrintPacked(dt), (m, w), [1])
    assert capfd.readouterr().out == want and "tile:" in want


def test_a_format_of_two_conversions_is_refused_at_its_line():
    with pytest.raises(tilus.TilusProgramError) as e:
        with tilus.option.scoped(interpret=True):
            BadFormat()(np.zeros(4, np.float32))
    assert "exactly one printf conversion" in str(e.value)
    assert e.value.loc.line == err_line(BadFormat), str(e.value)


_CHILD = """
import sys, numpy as np, torch, tilus
sys.path.insert(0, {root!r})
from tests.cuda.test_cuda_print import LanesOfOneWarp, PrintPacked, PrintTiles
args = [np.load({path!r} + str(i) + '.npy') for i in range(5)]
m, n = {m}, {n}
PrintTiles()(m, n, *[torch.from_numpy(a).cuda() for a in args[:3]])
torch.cuda.synchronize()
PrintPacked(tilus.float6_e3m2)(m, torch.from_numpy(args[3]).cuda())
torch.cuda.synchronize()
LanesOfOneWarp()(torch.from_numpy(args[4]).cuda(), torch.zeros(16, device="cuda"))
torch.cuda.synchronize()
"""


@pytest.mark.gpu
@needs_gpu
def test_print_tensor_on_the_gpu_matches_the_interpreter(tmp_path, capfd):
    # printf from a kernel reaches the process's stdout: the GPU run is a child process
    m, n, *arrays = _inputs()
    want = _interpreted((m, n, *arrays))
    dt = tilus.float6_e3m2
    w = pack(codes(np.random.default_rng(), dt, (m, 12)), dt.nbits)
    capfd.readouterr()
    x = np.random.default_rng().standard_normal(16).astype(np.float32)
    with tilus.option.scoped(interpret=True):
        PrintPacked(dt)(m, w)
        LanesOfOneWarp()(x, np.zeros_like(x))
    want += capfd.readouterr().out
    for i, a in enumerate([*arrays, w, x]):
        np.save(tmp_path / f"a{i}.npy", a)
    code = _CHILD.format(root=str(ROOT), path=str(tmp_path / "a"), m=m, n=n)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stderr[-4000:]
    assert r.stdout == want
