"""Tests of the on-disk artifact cache: keys, lookups, and atomic concurrent stores."""

from __future__ import annotations

import json
import multiprocessing
import threading

import pytest

from tilus.errors import TilusCacheWarning
from tilus.runtime.cache import META_FILE, ArtifactCache, cache_dir, cache_key


def _files(writer: str) -> dict[str, bytes | str]:
    # Sizeable content so that a torn write would be likely to show.
    return {"kernel.cubin": writer.encode() * 20000, "kernel.cu": f"// by {writer}\n"}


def _check_entry(cache: ArtifactCache, key: str) -> str:
    """Assert the entry is complete and self-consistent; return who wrote it."""
    files = cache.lookup(key)
    assert files is not None
    meta = json.loads(files[META_FILE])
    writer = meta["writer"]
    assert files["kernel.cubin"] == writer.encode() * 20000
    assert files["kernel.cu"] == f"// by {writer}\n".encode()
    return writer


def _leftovers(cache: ArtifactCache) -> list[str]:
    return [p.name for p in cache.programs.iterdir() if p.name.startswith(".")]


def test_cache_dir_env(monkeypatch, tmp_path):
    monkeypatch.setenv("TILUS_CACHE_DIR", str(tmp_path / "c"))
    assert cache_dir() == tmp_path / "c"
    monkeypatch.delenv("TILUS_CACHE_DIR")
    assert cache_dir().parts[-2:] == (".cache", "tilus")


def test_cache_key():
    k = cache_key("source", "sm_90a")
    assert len(k) == 16 and int(k, 16) >= 0
    assert k == cache_key("source", "sm_90a")
    assert cache_key("ab", "c") != cache_key("a", "bc")  # parts are length-prefixed
    assert cache_key("a") != cache_key("a", "")


def test_store_and_lookup(tmp_path):
    cache = ArtifactCache(tmp_path)
    assert cache.lookup("k0") is None
    path = cache.store("k0", {"a.bin": b"\x00\x01", "a.txt": "héllo"}, {"arch": "sm_90a"})
    assert path == cache.path("k0") == tmp_path / "programs" / "k0"
    files = cache.lookup("k0")
    assert files["a.bin"] == b"\x00\x01"
    assert files["a.txt"] == "héllo".encode()
    assert cache.meta("k0") == {"arch": "sm_90a"}
    assert _leftovers(cache) == []
    # A second store of the same key keeps the first entry.
    cache.store("k0", {"a.bin": b"other"}, {"arch": "other"})
    assert cache.lookup("k0")["a.bin"] == b"\x00\x01"


def test_partial_entries_are_ignored(tmp_path):
    cache = ArtifactCache(tmp_path)
    cache.programs.mkdir(parents=True)
    # A crashed writer's temp dir and an entry directory without meta.json.
    tmp = cache.programs / ".tmp-k1-abcd"
    tmp.mkdir()
    (tmp / "kernel.cubin").write_bytes(b"half")
    (cache.programs / "k1").mkdir()
    (cache.programs / "k1" / "kernel.cubin").write_bytes(b"half")
    with pytest.warns(TilusCacheWarning, match="k1 is damaged"):
        assert cache.lookup("k1") is None
    assert cache.meta("k1") is None
    # Storing over the incomplete directory recovers it.
    cache.store("k1", _files("w"), {"writer": "w"})
    assert _check_entry(cache, "k1") == "w"


def test_concurrent_thread_stores(tmp_path):
    cache = ArtifactCache(tmp_path)
    n_threads, n_keys = 8, 10
    barrier = threading.Barrier(n_threads)
    errors: list[BaseException] = []

    def worker(i: int) -> None:
        try:
            for k in range(n_keys):
                barrier.wait()
                cache.store(f"key{k}", _files(f"t{i}"), {"writer": f"t{i}"})
        except BaseException as e:  # noqa: BLE001 - surfaced by the assert below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for k in range(n_keys):
        _check_entry(cache, f"key{k}")
    assert sorted(p.name for p in cache.programs.iterdir()) == sorted(
        f"key{k}" for k in range(n_keys)
    )


def _process_worker(root: str, writer: str, n_keys: int, barrier) -> None:
    cache = ArtifactCache(root)
    for k in range(n_keys):
        barrier.wait()
        cache.store(f"key{k}", _files(writer), {"writer": writer})


def test_concurrent_process_stores(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    n_keys = 10
    barrier = ctx.Barrier(2)
    procs = [
        ctx.Process(target=_process_worker, args=(str(tmp_path), f"p{i}", n_keys, barrier))
        for i in range(2)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    cache = ArtifactCache(tmp_path)
    writers = {_check_entry(cache, f"key{k}") for k in range(n_keys)}
    assert writers <= {"p0", "p1"}
    assert _leftovers(cache) == []
    assert len(list(cache.programs.iterdir())) == n_keys
