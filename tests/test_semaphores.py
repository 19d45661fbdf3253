"""Semaphores: blocks taking turns in the interpreter, deadlock reports, refusals, GPU check."""

from __future__ import annotations

import numpy as np
import pytest

import tilus
from tests.cuda.conftest import needs_nvrtc
from tests.helpers_errors import err_line, expect_error
from tilus import float32, int32
from tilus.errors import TilusRuntimeError

B = 64


class Serial(tilus.Script):
    """Serial split-K in reverse block order: block b waits until the semaphore is
    ``nb - 1 - b``, adds its row into the output (a plain read-modify-write that only the
    turn-taking makes safe), then passes the turn on. Block 0 goes last, so on the interpreter
    the earlier blocks step aside while they spin."""

    def __call__(self, nb: int32, x_ptr: ~float32, y_ptr: ~float32, sem_ptr: ~int32):
        self.attrs.blocks = [nb]
        self.attrs.warps = 2
        b = self.blockIdx.x
        x = self.load_global(self.global_view(x_ptr, dtype=float32, shape=[nb, B]),
                             offsets=[b, 0], shape=[B], dims=[1])  # fmt: skip
        gy = self.global_view(y_ptr, dtype=float32, shape=[B])
        with self.single_thread():
            self.lock_semaphore(sem_ptr, nb - 1 - b)
        self.sync()
        y = self.load_global(gy, offsets=[0], shape=[B])
        self.store_global(gy, y * 2.0 + x, offsets=[0])
        self.sync()
        with self.single_thread():
            self.release_semaphore(sem_ptr, nb - b)


def _serial(nb, device=None):
    x = np.random.default_rng().integers(-4, 4, (nb, B)).astype(np.float32)
    y = np.zeros(B, np.float32)
    sem = np.zeros(1, np.int32)
    args = [x, y, sem]
    if device is not None:
        import torch

        args = [torch.from_numpy(a).to(device) for a in args]
    Serial()(nb, *args)
    return x, *(a.cpu().numpy() if hasattr(a, "cpu") else a for a in args[1:])


def test_blocks_take_turns_on_the_interpreter():
    nb = 5
    x, y, sem = _serial(nb)
    want = np.zeros(B, np.float32)
    for b in reversed(range(nb)):  # the order the semaphore imposes
        want = want * 2 + x[b]
    np.testing.assert_array_equal(y, want)
    assert sem[0] == nb


class NeverReleased(tilus.Script):
    def __call__(self, sem_ptr: ~int32):
        self.attrs.blocks = [2]
        self.attrs.warps = 1
        with self.single_thread():
            self.lock_semaphore(sem_ptr, 7)  # ERR


def test_a_lock_nobody_releases_is_a_deadlock():
    with pytest.raises(TilusRuntimeError, match="spins .* in lock_semaphore") as info:
        NeverReleased()(np.zeros(1, np.int32))
    assert info.value.loc.line == err_line(NeverReleased)
    assert "deadlock" in str(info.value)


class ManyThreads(tilus.Script):
    def __call__(self, sem_ptr: ~int32):
        self.attrs.blocks = [1]
        self.attrs.warps = 1
        self.release_semaphore(sem_ptr, 1)  # ERR


class NotInt32(tilus.Script):
    def __call__(self, sem_ptr: ~float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 1
        with self.single_thread():
            self.lock_semaphore(sem_ptr, 1)  # ERR


def test_refusals_name_the_line():
    expect_error(ManyThreads, fragment="single thread .* has 32 threads")
    expect_error(NotInt32, fragment="pointer to int32, got a pointer to float32")


class Chain(tilus.Script):
    """Semaphores in a ``global_tensor`` (one per block, addressed as ``turns[b]``): block b
    waits for block b - 1's turn flag, adds its row onto the running sum, raises its own flag;
    the last block clears every flag (the tensor must be left clean)."""

    def __call__(self, nb: int, x_ptr: ~float32, y_ptr: ~float32):
        self.attrs.blocks = [nb]
        self.attrs.warps = 1
        b = self.blockIdx.x
        turns = self.global_tensor(int32, [nb], requires_clean=True)
        x = self.load_global(self.global_view(x_ptr, dtype=float32, shape=[nb, B]),
                             offsets=[b, 0], shape=[B], dims=[1])  # fmt: skip
        gy = self.global_view(y_ptr, dtype=float32, shape=[B])
        if b > 0:
            with self.single_thread():
                self.lock_semaphore(turns[b - 1], 1)
        self.sync()
        y = self.load_global(gy, offsets=[0], shape=[B])
        self.store_global(gy, y * 2.0 + x, offsets=[0])  # exact in fp32 with or without fma
        self.sync()
        with self.single_thread():
            self.release_semaphore(turns[b], 1)
            if b == nb - 1:
                for i in self.range(nb):
                    self.release_semaphore(turns[i], 0)


def _chain(nb, device=None):
    x = np.random.default_rng().integers(-4, 4, (nb, B)).astype(np.float32)
    y = np.zeros(B, np.float32)
    args = [x, y]
    if device is not None:
        import torch

        args = [torch.from_numpy(a).to(device) for a in args]
    Chain()(nb, *args)
    y = args[1].cpu().numpy() if device is not None else args[1]
    want = np.zeros(B, np.float32)
    for b in range(nb):
        want = want * 2 + x[b]
    np.testing.assert_array_equal(y, want)


def test_semaphores_in_a_global_tensor():
    _chain(4)


class NotOneElement(tilus.Script):
    def __call__(self, n: int32):
        self.attrs.blocks = [1]
        self.attrs.warps = 1
        t = self.global_tensor(int32, [4], requires_clean=True)
        with self.single_thread():
            self.lock_semaphore(t, 1)  # ERR


def test_a_semaphore_tile_must_be_one_int32():
    expect_error(NotOneElement, fragment="one-element int32 global tile, got")


@needs_nvrtc
def test_global_tensor_semaphores_build():
    ck = tilus.compile(Chain(), 6, None, None)
    assert "tl_sem_wait_eq((const int*)(turns_" in ck.source
    assert "tl_sem_store((int*)(turns_" in ck.source


@needs_nvrtc
def test_builds_for_sm90a():
    from tilus.runtime.sass import sass_opcodes

    ck = tilus.compile(Serial(), None, None, None, None)
    assert "ld.acquire.gpu" in ck.source and "st.release.gpu" in ck.source
    ops = sass_opcodes(ck.sass())
    assert ops.get("LDG") and ops.get("STG") and not ops.get("LDL")


@pytest.mark.gpu
def test_gpu_matches_the_interpreter():
    from tests.cuda.conftest import _gpu_available

    if not _gpu_available():
        pytest.skip("needs torch with a Hopper GPU")
    nb = 24  # all resident at once on an H200: the spin-waits can all be satisfied
    x, y, sem = _serial(nb, device="cuda")
    want = np.zeros(B, np.float32)
    for b in reversed(range(nb)):
        want = want * 2 + x[b]
    np.testing.assert_array_equal(y, want)
    assert sem[0] == nb
    _chain(24, device="cuda")
