"""An on-disk cache of compiled artifacts: verified on every read, safe under concurrent writers."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import pathlib
import shutil
import stat
import tempfile
import threading
import time
import warnings
from dataclasses import dataclass, field

from tilus.errors import TilusCacheWarning

# Files of an entry; written last, it lists (size, sha256) of every other file.
META_FILE = "meta.json"
#: Version of the verification record; an entry of another format is rebuilt.
ENTRY_FORMAT = 2
# The key of meta.json holding the verification record (reserved: not for callers' meta).
_RECORD = "_entry"
# A writer's leftovers (temp dirs, entries set aside) older than this are stale even when
# their writer's pid is alive again (pids are reused).
_STALE_SECONDS = 3600.0

_lock = threading.Lock()
_warned: set = set()  # what this process already warned about (entries, directories)
_memory: dict[tuple[str, str], dict[str, bytes]] = {}  # entries that could not be written


def cache_dir() -> pathlib.Path:
    """Return the root of the tilus cache.

    ``tilus.option.cache_dir(...)`` if set, else `$TILUS_CACHE_DIR`, else `~/.cache/tilus`.
    """
    from tilus import option

    chosen = option.get_option("cache_dir")  # the option reads $TILUS_CACHE_DIR itself
    if chosen:
        return pathlib.Path(chosen).expanduser()
    return pathlib.Path.home() / ".cache" / "tilus"


def cache_key(*parts: str) -> str:
    """Hash the parts into a 16-hex-digit key.

    Each part is length-prefixed so that ("ab", "c") and ("a", "bc") give different keys.

    Args:
        *parts: The strings that determine the artifact (source, options, versions...).

    Returns:
        The first 16 hex digits of the sha256 of the encoded parts.
    """
    h = hashlib.sha256()
    for part in parts:
        data = part.encode()
        h.update(f"{len(data)}:".encode())
        h.update(data)
    return h.hexdigest()[:16]


def tilus_version() -> str:
    """The running tilus version (recorded in every entry; an entry of another is rebuilt)."""
    from tilus import version  # read per call: a test pretends to be another version

    return str(version.__version__)


def warn_once(tag, message: str, category=TilusCacheWarning, stacklevel: int = 3) -> bool:
    """Issue a ``TilusCacheWarning`` (or ``category``) unless this process already issued one
    for ``tag``; returns whether it did."""
    with _lock:
        if tag in _warned:
            return False
        _warned.add(tag)
    warnings.warn(message, category, stacklevel=stacklevel)
    return True


def make_private_dir(path: str | os.PathLike) -> pathlib.Path:
    """Create ``path`` if missing (parents with the usual permissions, ``path`` itself
    owner-only, 0o700) and return it; raises OSError when that is impossible."""
    path = pathlib.Path(path)
    if not path.is_dir():
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            path.mkdir(mode=0o700)
        except FileExistsError:
            if not path.is_dir():
                raise
    return path


def insecure(path: str | os.PathLike) -> str | None:
    """Why other users could write into directory ``path`` (None: they cannot, or it is absent)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    if hasattr(os, "geteuid") and st.st_uid != os.geteuid():
        return f"it is owned by another user (uid {st.st_uid})"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"it is writable by other users (mode 0o{stat.S_IMODE(st.st_mode):o})"
    return None


def guard_dir(path: str | os.PathLike, what: str = "tilus cache directory") -> str | None:
    """Warn once per process when other users can write into directory ``path`` (it is still
    used); returns why, or None. A directory that does not exist yet is checked next time."""
    tag = ("guarded", str(path))
    if tag in _warned or not os.path.isdir(path):
        return None
    _warned.add(tag)
    why = insecure(path)
    if why is not None:
        warn_once(
            ("insecure", str(path)),
            f"{what} {path} is used although {why}: what it holds decides the code run on the "
            "GPU, so anyone who can write it can run code as you; make it owner-only (chmod 700)",
        )
    return why


def warn_unwritable(root: str | os.PathLike, err: BaseException) -> None:
    """Warn once per process and cache root that writes fail and results stay in memory."""
    warn_once(
        ("unwritable", str(root)),
        f"tilus cache directory {root} cannot be written ({err}); compiled kernels and "
        "tuning decisions are kept in memory for this process only",
    )


class _Damaged(Exception):
    """An entry failed a check; ``reason`` says which. ``quiet``: an entry of an older tilus
    (no verification record), expected after an upgrade: rebuilt without a warning."""

    def __init__(self, reason: str, quiet: bool = False):
        super().__init__(reason)
        self.reason, self.quiet = reason, quiet


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _doc_check(doc: dict) -> str:
    """The checksum of meta.json's content (the record's own ``check`` field left out)."""
    record = {k: v for k, v in doc[_RECORD].items() if k != "check"}
    text = json.dumps({**doc, _RECORD: record}, sort_keys=True, separators=(",", ":"))
    return _sha256(text.encode())


def _valid_name(name) -> bool:
    return isinstance(name, str) and name not in ("", ".", "..", META_FILE) and os.sep not in name


def _parse_meta(raw: bytes, key: str) -> dict:
    """meta.json's content, checked against the key it is read for; raises _Damaged."""
    try:
        doc = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise _Damaged("meta.json is not UTF-8 text") from None
    except (ValueError, RecursionError) as e:
        raise _Damaged(f"meta.json is not valid JSON ({e})") from None
    if not isinstance(doc, dict):
        raise _Damaged("meta.json is not a JSON object")
    record = doc.get(_RECORD)
    if not isinstance(record, dict):
        raise _Damaged("meta.json has no verification record (an older tilus wrote it)", True)
    if record.get("format") != ENTRY_FORMAT:
        raise _Damaged(f"entry format {record.get('format')!r}, expected {ENTRY_FORMAT}")
    if record.get("key") != key:
        raise _Damaged(f"it was built for key {record.get('key')!r}")
    if record.get("tilus") != tilus_version():
        raise _Damaged(f"it was written by tilus {record.get('tilus')!r}, not {tilus_version()}")
    files = record.get("files")
    if not isinstance(files, dict):
        raise _Damaged("meta.json lists no files")
    for name, want in files.items():
        size = want.get("size") if isinstance(want, dict) else None
        digest = want.get("sha256") if isinstance(want, dict) else None
        if (
            not _valid_name(name)
            or not isinstance(size, int)
            or isinstance(size, bool)
            or size < 0
            or not isinstance(digest, str)
            or len(digest) != 64
        ):
            raise _Damaged(f"meta.json's record of {name!r} is malformed")
    if record.get("check") != _doc_check(doc):
        raise _Damaged("meta.json does not match its checksum")
    return doc


def _read_entry(entry: pathlib.Path, key: str) -> dict[str, bytes]:
    """Every file of a complete, intact entry (meta.json included); raises _Damaged."""
    try:
        raw = (entry / META_FILE).read_bytes()
    except FileNotFoundError:
        raise _Damaged("meta.json is missing") from None
    except OSError as e:
        raise _Damaged(f"meta.json is unreadable ({e.strerror or e})") from None
    doc = _parse_meta(raw, key)
    out = {META_FILE: raw}
    for name, want in doc[_RECORD]["files"].items():
        try:
            with open(entry / name, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                # the size first: a file of the wrong length is not read at all
                data = f.read() if size == want["size"] else b""
        except OSError:
            raise _Damaged(f"{name} is missing or unreadable") from None
        if size != want["size"] or len(data) != size:
            raise _Damaged(f"{name} has {size} bytes, expected {want['size']}")
        if _sha256(data) != want["sha256"]:
            raise _Damaged(f"{name} does not match its sha256")
        out[name] = data
    return out


def _inode(path: pathlib.Path):
    try:
        return os.stat(path).st_ino
    except OSError:
        return None


def _signature(entry: pathlib.Path) -> tuple:
    """Identifies the present state of an entry, so that one damage is reported once."""
    try:
        with os.scandir(entry) as it:
            files = sorted((e.name, e.inode(), e.stat().st_size, e.stat().st_mtime_ns) for e in it)
    except OSError:
        files = []
    return (str(entry), _inode(entry), tuple(files))


def _write_file(path: pathlib.Path, data: bytes) -> None:
    """Write a new file (a seam for fault-injection tests)."""
    with open(path, "xb") as f:
        f.write(data)


def _set_aside(path: pathlib.Path) -> bool:
    """Move an entry out of the way in one rename, then delete it; False if it was gone."""
    trash = path.with_name(f".trash-{path.name}-{os.getpid()}-{os.urandom(4).hex()}")
    try:
        os.rename(path, trash)
    except FileNotFoundError:
        return False
    if trash.is_dir() and not trash.is_symlink():
        shutil.rmtree(trash, ignore_errors=True)
    else:
        trash.unlink(missing_ok=True)
    return True


class ArtifactCache:
    """Entries live in `<root>/programs/<key>/`, one plain file per artifact plus meta.json.

    meta.json records the entry's format, its key, the tilus version and the size and sha256
    of every file, plus a checksum of itself. A read checks all of it: an entry that fails
    (unreadable, truncated, foreign, from another version) is a miss, reported by one
    ``TilusCacheWarning`` naming it, and the next ``store`` replaces it atomically. When the
    cache cannot be written, ``store`` warns once and keeps the entry in memory instead.
    """

    def __init__(self, root: str | os.PathLike | None = None):
        """Open (lazily create) a cache.

        Args:
            root: The cache root; defaults to `cache_dir()`.
        """
        self.root = pathlib.Path(root) if root is not None else cache_dir()
        self.programs = self.root / "programs"
        self._last: tuple[str, dict[str, bytes]] | None = None

    def path(self, key: str) -> pathlib.Path:
        """Return the directory an entry with this key lives in (it may not exist)."""
        return self.programs / key

    def _read(self, key: str, warn: bool = True) -> dict[str, bytes] | None:
        entry = self.path(key)
        for _ in range(3):
            ino = _inode(entry)
            if ino is None:
                return None  # no entry: a plain miss
            try:
                return _read_entry(entry, key)
            except _Damaged as d:
                if _inode(entry) != ino:
                    continue  # replaced by another writer while we read it: read again
                if warn and not d.quiet:
                    warn_once(
                        ("damaged", _signature(entry)),
                        f"tilus cache entry {entry} is damaged ({d.reason}); rebuilding it",
                        stacklevel=4,
                    )
                return None
        return None

    def lookup(self, key: str) -> dict[str, bytes] | None:
        """Return the files of a complete, verified entry, by name, or None on a miss.

        Args:
            key: The entry key, e.g. from `cache_key`.

        Returns:
            A dict from file name to contents (meta.json included), or None.
        """
        guard_dir(self.root)
        guard_dir(self.programs)
        files = self._read(key)
        if files is None:
            files = _memory.get((str(self.root), key))
        self._last = (key, files) if files is not None else None
        return dict(files) if files is not None else None

    def meta(self, key: str) -> dict | None:
        """Return the metadata a verified entry was stored with (None on a miss)."""
        files = self._last[1] if self._last and self._last[0] == key else self.lookup(key)
        if files is None:
            return None
        doc = json.loads(files[META_FILE])
        doc.pop(_RECORD, None)
        return doc

    def store(self, key: str, files: dict[str, bytes | str], meta: dict) -> pathlib.Path | None:
        """Write an entry atomically and return its directory (None: kept in memory).

        Everything is written into a temporary directory next to the final one, then moved
        into place with one rename, so readers never see a half-written entry. If another
        writer got there first with an intact entry holding at least these files, that entry
        is kept; a damaged one (or one with fewer files) is replaced. If the cache cannot be written (read-only, disk full), one warning per
        process says so and the entry is kept in memory for this process.

        Args:
            key: The entry key.
            files: File name to contents (str is written as UTF-8); names must be plain.
            meta: JSON-serialisable metadata, written as meta.json.

        Returns:
            The entry directory, or None when the entry could only be kept in memory.
        """
        for name in files:
            if not _valid_name(name):
                raise ValueError(f"invalid cache file name {name!r}")
        if _RECORD in meta:
            raise ValueError(f"{_RECORD!r} is reserved in cache metadata")
        data = {n: c.encode() if isinstance(c, str) else bytes(c) for n, c in files.items()}
        doc = json.loads(json.dumps(meta, default=str))  # what a reader will parse
        doc[_RECORD] = {
            "format": ENTRY_FORMAT,
            "key": key,
            "tilus": tilus_version(),
            "created": time.time(),
            "files": {n: {"size": len(b), "sha256": _sha256(b)} for n, b in data.items()},
        }
        doc[_RECORD]["check"] = _doc_check(doc)
        raw = json.dumps(doc, indent=2, sort_keys=True).encode()
        try:
            return self._install(key, data, raw)
        except OSError as e:
            _memory[(str(self.root), key)] = {**data, META_FILE: raw}
            warn_unwritable(self.root, e)
            return None

    def _intact(self, key: str, names) -> bool:
        """Whether the entry on disk is intact and has at least the files ``names``."""
        try:
            return set(names) <= set(_read_entry(self.path(key), key))
        except _Damaged:
            return False

    def _install(self, key: str, data: dict[str, bytes], raw_meta: bytes) -> pathlib.Path:
        final = self.path(key)
        if _inode(final) is not None and self._intact(key, data):
            return final
        make_private_dir(self.root)
        make_private_dir(self.programs)
        # Temp dirs start with '.' so they are never mistaken for entries; the pid tells
        # `verify` whether their writer is gone.
        tmp = pathlib.Path(tempfile.mkdtemp(prefix=f".tmp-{key}-{os.getpid()}-", dir=self.programs))
        try:
            for name, content in data.items():
                _write_file(tmp / name, content)
            _write_file(tmp / META_FILE, raw_meta)  # last: it vouches for the others
            for _ in range(8):
                try:
                    os.rename(tmp, final)
                    return final
                except OSError as e:
                    if e.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR, errno.EISDIR):
                        raise
                if self._intact(key, data):
                    return final  # another writer won the race with an intact entry
                _set_aside(final)  # damaged, or lacking a file we have (kernel.ptx): replace it
            return final
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)

    def clear(self) -> None:
        """Delete every entry (and any leftover temp dirs)."""
        shutil.rmtree(self.programs, ignore_errors=True)
        for k in [k for k in _memory if k[0] == str(self.root)]:
            _memory.pop(k, None)


@dataclass
class CacheReport:
    """What ``verify`` found.

    Attributes:
        root: The cache root verified.
        checked: Entries examined (artifact entries and dispatch-table entries).
        ok: Entries that passed every check.
        bad: ``(entry, reason)`` of every entry that failed a check.
        dropped: The entries (and leftovers) deleted (with ``drop=True``).
        leftovers: Temporary files of writers that are gone (interrupted builds).
        warnings: Problems that are not entries, e.g. a directory others can write.
    """

    root: pathlib.Path
    checked: int = 0
    ok: int = 0
    bad: list[tuple[str, str]] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    leftovers: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        """Nothing failed and nothing was left over."""
        return not (self.bad or self.leftovers or self.warnings)

    def __str__(self) -> str:
        lines = [f"tilus cache {self.root}: {self.checked} entries checked, {self.ok} intact"]
        lines += [f"  BAD     {what}: {why}" for what, why in self.bad]
        lines += [f"  STALE   {what}" for what in self.leftovers]
        lines += [f"  WARNING {what}" for what in self.warnings]
        lines += [f"  dropped {what}" for what in self.dropped]
        return "\n".join(lines)


def leftover_is_stale(path: pathlib.Path, pid: str | None) -> bool:
    """Whether a writer's temporary file or directory is abandoned: the process ``pid`` (its
    writer, from its name) is gone, or it is older than an hour."""
    try:
        age = time.time() - path.lstat().st_mtime
    except OSError:
        return False
    try:
        os.kill(int(pid), 0)
    except (TypeError, ValueError, OverflowError, ProcessLookupError):
        return True  # no pid (an older writer's) or its process is gone
    except OSError:
        pass  # alive (another user's)
    return age > _STALE_SECONDS


def _stale(path: pathlib.Path) -> bool:
    """``.tmp-KEY-PID-*`` / ``.trash-KEY-PID-*``: see ``leftover_is_stale``."""
    parts = path.name.split("-")
    return leftover_is_stale(path, parts[2] if len(parts) > 3 else None)


def verify(root: str | os.PathLike | None = None, *, drop: bool = True) -> CacheReport:
    """Verify every artifact entry under ``<root>/programs`` (the tables: see
    ``tilus.tune.dispatch.verify_cache``).

    Args:
        root: The cache root; defaults to ``cache_dir()``.
        drop: Delete the entries that fail and the leftovers of interrupted writers.

    Returns:
        A ``CacheReport``.
    """
    cache = ArtifactCache(root)
    report = CacheReport(cache.root)
    for d in (cache.root, cache.programs):
        why = insecure(d)
        if why is not None:
            report.warnings.append(f"{d}: {why}")
    try:
        items = sorted(cache.programs.iterdir())
    except OSError:
        return report
    for item in items:
        if item.name.startswith("."):
            if _stale(item):
                report.leftovers.append(str(item))
                if drop and _set_aside(item):
                    report.dropped.append(str(item))
            continue
        report.checked += 1
        try:
            if not item.is_dir():
                raise _Damaged("not a directory")
            _read_entry(item, item.name)
        except _Damaged as d:
            report.bad.append((str(item), d.reason))
            if drop and _set_aside(item):
                report.dropped.append(str(item))
        else:
            report.ok += 1
    return report
