"""Fault injection into the artifact cache: every damaged, foreign, partial or unwritable entry
is a miss that rebuilds the kernel (real NVRTC builds, no GPU), with one warning naming it."""

from __future__ import annotations

import errno
import json
import multiprocessing
import os
import shutil
import signal
import stat
import warnings

import numpy as np
import pytest

import tilus
from tests.cuda.conftest import needs_nvrtc
from tests.helpers_fakegpu import Add1, TunedAdd
from tilus import option
from tilus.errors import TilusCacheWarning
from tilus.runtime import cache as C
from tilus.tune.dispatch import verify_cache

pytestmark = [needs_nvrtc, pytest.mark.filterwarnings("ignore:.*use of fork:DeprecationWarning")]


_NVRTC: dict = {}


@pytest.fixture(autouse=True)
def nvrtc_once(monkeypatch):
    """Each distinct source goes through NVRTC once per test session (its real output is
    reused), so that the many rebuilds below stay fast; everything else is real."""
    from tilus.runtime import nvrtc

    real = nvrtc.compile_cuda

    def once(source, **kw):
        memo = (source, repr(sorted(kw.items())))
        if memo not in _NVRTC:
            _NVRTC[memo] = real(source, **kw)
        return _NVRTC[memo]

    monkeypatch.setattr(nvrtc, "compile_cuda", once)


@pytest.fixture
def root(tmp_path, monkeypatch):
    """An empty cache root, used by every build of the test."""
    path = tmp_path / "cache"
    monkeypatch.setenv("TILUS_CACHE_DIR", str(path))
    with option.scoped(cache_dir=str(path), parallel_workers=2):
        yield path


def build(**kw):
    """Compile the smallest kernel into the cache (one config, built in this process)."""
    return tilus.compile(Add1(), 32, None, None, None, target="sm_90a", **kw)


def build_other():
    """A second, different kernel (another program text: another key)."""
    return tilus.compile(TunedAdd(block=32), 64, None, None, None, target="sm_90a")


class Caught:
    """The TilusCacheWarnings raised inside a ``with`` block (every one, none filtered)."""

    def __enter__(self):
        self._cm = warnings.catch_warnings(record=True)
        self._all = self._cm.__enter__()
        warnings.simplefilter("always")
        return self

    def __exit__(self, *exc):
        self._cm.__exit__(*exc)

    @property
    def messages(self) -> list[str]:
        return [str(w.message) for w in self._all if issubclass(w.category, TilusCacheWarning)]


def only_entry(root):
    (entry,) = [p for p in (root / "programs").iterdir() if not p.name.startswith(".")]
    return entry


def leftovers(root):
    return sorted(p.name for p in (root / "programs").iterdir() if p.name.startswith("."))


def assert_rebuilt(root, entry, good, damage_name, warns=1):
    """A build after the damage rebuilds, warns once naming the entry (``warns=0``: an entry
    of an older tilus, rebuilt silently), and replaces the entry."""
    with Caught() as w:
        ck = build()
    assert len(w.messages) == warns, w.messages
    assert all(str(entry) in m and "damaged" in m for m in w.messages), w.messages
    assert not ck.cached and ck.cubin == good.cubin, damage_name
    assert C.ArtifactCache(root).lookup(entry.name)["kernel.cubin"] == good.cubin
    assert leftovers(root) == []
    with Caught() as w:
        again = build()
    assert again.cached and again.cubin == good.cubin and w.messages == []


# --- damaged entries ---------------------------------------------------------------------------
def _random_bytes(path):
    path.write_bytes(np.random.default_rng().bytes(path.stat().st_size))


def _random_text(path):
    rng = np.random.default_rng()
    path.write_bytes(bytes(rng.integers(32, 127, path.stat().st_size, dtype=np.uint8)))


def _flip_one_byte(path):
    data = bytearray(path.read_bytes())
    data[len(data) // 3] ^= 0x40
    path.write_bytes(bytes(data))


def _truncate(offset):
    def damage(path):
        data = path.read_bytes()
        path.write_bytes(data[: offset if offset >= 0 else len(data) + offset])

    return damage


def _rewrite_meta(edit, reseal=True):
    def damage(path):
        doc = json.loads(path.read_text())
        edit(doc)
        if reseal and isinstance(doc.get("_entry"), dict):
            doc["_entry"]["check"] = C._doc_check(doc)  # a consistent record of wrong facts
        path.write_text(json.dumps(doc))

    return damage


def _set(*path_and_value):
    *keys, value = path_and_value

    def edit(doc):
        d = doc
        for k in keys[:-1]:
            d = d[k]
        d[keys[-1]] = value

    return edit


DAMAGE = {
    "meta random bytes": ("meta.json", _random_bytes),
    "meta random text": ("meta.json", _random_text),
    "meta empty": ("meta.json", _truncate(0)),
    "meta cut at 1": ("meta.json", _truncate(1)),
    "meta cut in half": ("meta.json", lambda p: _truncate(p.stat().st_size // 2)(p)),
    "meta cut last byte": ("meta.json", _truncate(-1)),
    "meta one byte flipped": ("meta.json", _flip_one_byte),
    "meta deleted": ("meta.json", lambda p: p.unlink()),
    "meta is a list": ("meta.json", lambda p: p.write_text("[1, 2]")),
    "meta edited (stale checksum)": ("meta.json", _rewrite_meta(_set("log", "x"), reseal=False)),
    "meta size as text": (
        "meta.json",
        _rewrite_meta(_set("_entry", "files", "kernel.cubin", "size", "26120")),
    ),
    "meta wrong cubin size": (
        "meta.json",
        _rewrite_meta(_set("_entry", "files", "kernel.cubin", "size", 1000)),
    ),
    "meta another format": ("meta.json", _rewrite_meta(_set("_entry", "format", 1))),
    "meta another tilus version": ("meta.json", _rewrite_meta(_set("_entry", "tilus", "0.0.1"))),
    "meta another key": ("meta.json", _rewrite_meta(_set("_entry", "key", "0123456789abcdef"))),
    "cubin empty": ("kernel.cubin", _truncate(0)),
    "cubin cut at 1000": ("kernel.cubin", _truncate(1000)),
    "cubin cut in half": ("kernel.cubin", lambda p: _truncate(p.stat().st_size // 2)(p)),
    "cubin cut last byte": ("kernel.cubin", _truncate(-1)),
    "cubin one byte flipped": ("kernel.cubin", _flip_one_byte),
    "cubin one byte longer": ("kernel.cubin", lambda p: p.write_bytes(p.read_bytes() + b"\0")),
    "cubin deleted": ("kernel.cubin", lambda p: p.unlink()),
    "cubin is a directory": ("kernel.cubin", lambda p: (p.unlink(), p.mkdir())),
    "source cut": ("kernel.cu", _truncate(10)),
}


@pytest.mark.parametrize("name", list(DAMAGE))
def test_damaged_entry_is_rebuilt_with_one_warning(root, name):
    good = build()
    entry = only_entry(root)
    file, damage = DAMAGE[name]
    damage(entry / file)
    assert_rebuilt(root, entry, good, name)


def test_entry_of_an_older_tilus_is_rebuilt_silently(root):
    good = build()
    entry = only_entry(root)
    _rewrite_meta(lambda d: d.pop("_entry"), reseal=False)(entry / "meta.json")
    assert_rebuilt(root, entry, good, "no verification record", warns=0)


def test_files_from_another_key_are_not_trusted(root):
    good = build()
    entry = only_entry(root)
    build_other()
    (other,) = [p for p in (root / "programs").iterdir() if p.name not in (entry.name,)]
    # one file of the other entry copied in: its hash does not match this entry's record
    shutil.copy(other / "kernel.cubin", entry / "kernel.cubin")
    assert_rebuilt(root, entry, good, "cubin of another key")
    # the whole other entry copied over this one: its record names the other key
    shutil.rmtree(entry)
    shutil.copytree(other, entry)
    assert_rebuilt(root, entry, good, "entry of another key")


def test_entry_replaced_by_a_file(root):
    good = build()
    entry = only_entry(root)
    shutil.rmtree(entry)
    entry.write_bytes(b"not a directory")
    assert_rebuilt(root, entry, good, "file instead of entry")


# --- interrupted builds ------------------------------------------------------------------------
def _killed_while_writing(root, victim="kernel.cubin"):
    """Fork a process that builds and is SIGKILLed halfway through writing ``victim``."""

    def child():
        real = C._write_file

        def dying(path, data):
            if path.name == victim:
                real(path, data[: len(data) // 2])
                os.kill(os.getpid(), signal.SIGKILL)
            real(path, data)

        C._write_file = dying
        build()

    proc = multiprocessing.get_context("fork").Process(target=child)
    proc.start()
    proc.join(60)
    assert proc.exitcode == -signal.SIGKILL


@pytest.mark.parametrize("victim", ["kernel.cubin", "meta.json"])
def test_build_killed_mid_write_leaves_nothing_trusted(root, victim):
    _killed_while_writing(root, victim)
    assert [p for p in (root / "programs").iterdir() if not p.name.startswith(".")] == []
    (left,) = leftovers(root)
    assert left.startswith(".tmp-")
    with Caught() as w:
        ck = build()
    assert not ck.cached and w.messages == []  # a plain miss: nothing was published
    report = verify_cache(root)
    assert report.ok == 1 and report.bad == [] and len(report.leftovers) == 1
    assert leftovers(root) == [] and build().cached


def test_replacement_killed_between_its_renames(root, monkeypatch):
    good = build()
    entry = only_entry(root)
    _truncate(1000)(entry / "kernel.cubin")

    def child():
        def set_aside_and_die(path):
            os.rename(path, path.with_name(f".trash-{path.name}-{os.getpid()}-0"))
            os.kill(os.getpid(), signal.SIGKILL)

        C._set_aside = set_aside_and_die
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", TilusCacheWarning)
            build()

    proc = multiprocessing.get_context("fork").Process(target=child)
    proc.start()
    proc.join(60)
    assert proc.exitcode == -signal.SIGKILL
    assert not entry.exists()  # the damaged entry was moved aside, the new one never landed
    with Caught() as w:
        ck = build()
    assert not ck.cached and ck.cubin == good.cubin and w.messages == []
    assert sorted(n.split("-")[0] for n in leftovers(root)) == [".tmp", ".trash"]
    report = verify_cache(root)
    assert report.ok == 1 and len(report.leftovers) == 2 and leftovers(root) == []


def test_interrupt_during_a_build_leaves_nothing(root, monkeypatch):
    def interrupted(path, data):
        raise KeyboardInterrupt

    monkeypatch.setattr(C, "_write_file", interrupted)
    with pytest.raises(KeyboardInterrupt):
        build()
    assert list((root / "programs").iterdir()) == []
    monkeypatch.undo()
    assert not build().cached and build().cached


def _racer(root, barrier, dying_now, die):
    """One of several processes building the same kernel at once; ``die``: killed mid-write
    (the others write once it is dying, so that it surely dies with a half-written cubin)."""
    if die:
        real = C._write_file

        def dying(path, data):
            if path.name == "kernel.cubin":
                real(path, data[:1000])
                dying_now.set()
                os.kill(os.getpid(), signal.SIGKILL)
            real(path, data)

        C._write_file = dying
    real_lookup = C.ArtifactCache.lookup

    def lookup(self, key):
        got = real_lookup(self, key)
        barrier.wait()  # every racer has missed before any of them writes
        if not die:
            dying_now.wait(30)
        return got

    C.ArtifactCache.lookup = lookup
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TilusCacheWarning)  # each racer sees the damage
        ck = build()
    assert ck.cubin[:4] == b"\x7fELF"


@pytest.mark.parametrize("start", ["empty", "damaged"])
def test_concurrent_writers_one_killed(root, start):
    good = build()
    if start == "empty":
        shutil.rmtree(root / "programs")
    else:
        _truncate(1000)(only_entry(root) / "kernel.cubin")
    ctx = multiprocessing.get_context("fork")
    n = 5
    barrier, dying_now = ctx.Barrier(n), ctx.Event()
    procs = [ctx.Process(target=_racer, args=(root, barrier, dying_now, i == 2)) for i in range(n)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0, -signal.SIGKILL, 0, 0]
    entry = only_entry(root)
    assert C.ArtifactCache(root).lookup(entry.name)["kernel.cubin"] == good.cubin
    with Caught() as w:
        assert build().cached
    assert w.messages == []
    report = verify_cache(root)
    assert report.ok == 1 and report.bad == [] and len(report.leftovers) == 1
    assert leftovers(root) == []


def test_worker_killed_mid_build(root, monkeypatch):
    """A build worker of a multi-config compile dies in the middle of a job: the job runs here
    instead, and the cache (written by this process only, never by a worker) stays whole."""
    from tilus.backends.cuda.codegen import build as B
    from tilus.runtime.workers import Job

    real, killed = B.build_steps, []

    def steps(program, config, **kw):
        if not killed:  # the first config's worker dies before answering
            killed.append(dict(config))
            pid, _, _ = yield Job("tilus.runtime.workers:ping", ("exit",))
            killed.append(pid)
        return (yield from real(program, config, **kw))

    monkeypatch.setattr(B, "build_steps", steps)
    with option.scoped(parallel_workers=2):
        built = tilus.compile(TunedAdd(), 1000, None, None, None, target="sm_90a")
    assert killed == [{"block": 32}, os.getpid()]  # a worker died; its job ran here
    assert [ck.config for ck in built] == [{"block": b} for b in (32, 64, 128)]
    assert all(ck.cubin[:4] == b"\x7fELF" for ck in built)
    report = verify_cache(root)
    assert report.ok == 3 and report.bad == [], str(report)
    assert leftovers(root) == []
    again = tilus.compile(TunedAdd(), 1000, None, None, None, target="sm_90a")
    assert [ck.cubin for ck in again] == [ck.cubin for ck in built]


# --- unwritable and shared locations -----------------------------------------------------------
def _check_in_memory(root, match):
    with Caught() as w:
        ck = build()
    assert not ck.cached and ck.cubin[:4] == b"\x7fELF"
    assert len(w.messages) == 1 and str(root) in w.messages[0] and match in w.messages[0]
    with Caught() as w:
        again = build()  # served from memory, no second warning
    assert again.cached and again.cubin == ck.cubin and w.messages == []
    x, y = (np.random.default_rng(s).standard_normal(32).astype(np.float32) for s in (1, 2))
    z = np.full(32, np.nan, np.float32)
    Add1()(32, x, y, z)  # the kernel still runs (here on the interpreter)
    np.testing.assert_array_equal(z, x + y)


def test_cache_under_a_regular_file_builds_in_memory(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    root = blocker / "cache"
    with option.scoped(cache_dir=str(root)):
        _check_in_memory(root, "cannot be written")


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EROFS])
def test_failing_writes_build_in_memory(root, monkeypatch, code):
    def failing(path, data):
        raise OSError(code, os.strerror(code), str(path))

    monkeypatch.setattr(C, "_write_file", failing)
    _check_in_memory(root, os.strerror(code))
    assert leftovers(root) == []  # the temp dir of the failed write is gone


def test_default_cache_dir_is_owner_only(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("TILUS_CACHE_DIR", raising=False)
    with option.scoped(cache_dir=None), Caught() as w:
        build()
    root = tmp_path / "home" / ".cache" / "tilus"
    assert w.messages == [] and only_entry(root)
    for d in (root, root / "programs"):
        assert stat.S_IMODE(d.stat().st_mode) == 0o700


@pytest.mark.parametrize("mode", [0o777, 0o775, 0o1777])
def test_directory_writable_by_others_is_used_after_a_warning(tmp_path, mode):
    root = tmp_path / "shared"
    root.mkdir()
    root.chmod(mode)
    with option.scoped(cache_dir=str(root)):
        with Caught() as w:
            build()
            ck = build()
        assert ck.cached
        assert len(w.messages) == 1 and str(root) in w.messages[0]
        assert "writable by other users" in w.messages[0]
        with Caught() as w:
            build()
        assert w.messages == []
    assert any("writable by other users" in m for m in verify_cache(root).warnings)


# --- verification of the whole cache -----------------------------------------------------------
def test_verify_reports_and_drops(root):
    build()
    build_other()
    victim = sorted(p for p in (root / "programs").iterdir())[0]
    _truncate(100)(victim / "kernel.cubin")
    (root / "programs" / "junk").mkdir()
    dead = multiprocessing.get_context("fork").Process(target=lambda: None)
    dead.start()
    dead.join()
    (root / "programs" / f".tmp-{victim.name}-{dead.pid}-xyz").mkdir()
    live = root / "programs" / f".tmp-{victim.name}-{os.getpid()}-abc"
    live.mkdir()  # an in-flight write of a live process: kept
    report = verify_cache(root, drop=False)
    assert (report.checked, report.ok) == (3, 1) and not report.clean
    assert sorted(p for p, _ in report.bad) == sorted(
        [str(victim), str(root / "programs" / "junk")]
    )
    assert "kernel.cubin has 100 bytes" in dict(report.bad)[str(victim)]
    assert len(report.leftovers) == 1 and report.dropped == [] and victim.exists()
    report = verify_cache(root)
    assert len(report.dropped) == 3 and not victim.exists() and live.exists()
    live.rmdir()
    assert verify_cache(root).clean
    with Caught() as w:
        build()
        build_other()
    assert w.messages == []
    assert verify_cache(root).ok == 2


def test_entry_without_ptx_is_replaced_once_ptx_is_asked_for(root):
    build()
    with option.scoped(keep_ptx=True), Caught() as w:
        ck = build()
        assert not ck.cached and ".entry" in ck.ptx
        again = build()
    assert again.cached and again.ptx == ck.ptx and w.messages == []
    assert build().cached and "kernel.ptx" in C.ArtifactCache(root).lookup(only_entry(root).name)


def test_entry_whose_resource_scan_failed_is_scanned_again(root):
    """An entry stored while cuobjdump was missing records the scan's error, not the
    registers: a hit scans its cubin again (the setmaxnreg check needs the count), silently."""
    good = build()
    assert "registers" in good.resources
    meta = only_entry(root) / "meta.json"
    err = {"function": good.kernel.name, "error": "cuobjdump not found"}
    _rewrite_meta(_set("resources", err))(meta)
    with Caught() as w:
        again = build()
    assert again.cached and w.messages == []
    assert again.resources["registers"] == good.resources["registers"]


class _MinBlocks(tilus.Script):
    """Add1 with a constructor argument that changes only a launch attribute (no config)."""

    def __init__(self, min_blocks):
        super().__init__()
        self.min_blocks = min_blocks

    def __call__(self, n: tilus.int32, x: ~tilus.float32, y: ~tilus.float32, z: ~tilus.float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 1
        self.attrs.min_blocks = self.min_blocks
        gx = self.global_view(x, dtype=tilus.float32, shape=[n])
        gz = self.global_view(z, dtype=tilus.float32, shape=[n])
        self.store_global(gz, self.load_global(gx, offsets=[0], shape=[32]), offsets=[0])


def test_kernels_that_differ_only_in_launch_bounds_do_not_share_an_entry(root):
    """Two kernels whose sources differ only in ``__launch_bounds__`` (``min_blocks``, which
    is not an autotune config) get an artifact each: the key covers the generated source, so
    the second is built, not served the first one's cubin."""
    one = tilus.compile(_MinBlocks(4), 32, None, None, None, target="sm_90a")
    two = tilus.compile(_MinBlocks(1), 32, None, None, None, target="sm_90a")
    assert "__launch_bounds__(32, 4)" in one.kernel.source
    assert "__launch_bounds__(32, 1)" in two.kernel.source
    assert not two.cached and len(list((root / "programs").iterdir())) == 2
