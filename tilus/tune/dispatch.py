"""The persistent dispatch table: tuned winners per dispatch key, as JSON plus a text report."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pathlib
import tempfile
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field

from tilus.errors import TilusCacheWarning
from tilus.tune.keys import config_id, device_fingerprint, fingerprint_matches, script_file_name

FORMAT_VERSION = 1

try:  # advisory locks serialise concurrent writers on POSIX; elsewhere merge-on-write only
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None


class DispatchTableWarning(TilusCacheWarning):
    """A dispatch table file, or one entry of it, could not be used (corrupt, unknown format,
    inconsistent) and was ignored: its keys are tuned again."""


@dataclass
class Entry:
    """One tuning decision.

    Attributes:
        winner: The chosen config.
        times: ``[{"config": ..., "median_ms": ..., "min_ms": ...}]`` for every timed config.
        failed: ``[{"config": ..., "reason": ...}]``: configs that did not compile or crashed.
        disagreed: ``[{"config": ..., "error": ...}]``: configs whose outputs were wrong.
        fingerprint: The machine the times were measured on (``device_fingerprint()``).
        timestamp: Seconds since the epoch when the entry was made.
        info: Free-form context for humans (script, const args, buckets...).
    """

    winner: dict
    times: list = field(default_factory=list)
    failed: list = field(default_factory=list)
    disagreed: list = field(default_factory=list)
    fingerprint: dict = field(default_factory=dict)
    timestamp: float = field(default_factory=time.time)
    info: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        """The JSON object stored in the table."""
        return asdict(self)

    @classmethod
    def from_json(cls, doc: Mapping) -> Entry:
        """Parse a stored entry (raises KeyError/TypeError on a malformed one)."""
        if not isinstance(doc.get("winner"), dict):
            raise TypeError("entry has no winner config")
        return cls(
            winner=dict(doc["winner"]),
            times=list(doc.get("times", [])),
            failed=list(doc.get("failed", [])),
            disagreed=list(doc.get("disagreed", [])),
            fingerprint=doc.get("fingerprint", {}),
            timestamp=float(doc.get("timestamp", 0.0)),
            info=dict(doc.get("info", {})),
        )


def dispatch_dir(root: str | os.PathLike | None = None) -> pathlib.Path:
    """``<cache_dir>/dispatch``: the ``cache_dir`` option, else the runtime cache root."""
    if root is None:
        from tilus.option import get_option
        from tilus.runtime.cache import cache_dir

        opt = get_option("cache_dir")
        root = pathlib.Path(opt).expanduser() if opt else cache_dir()
    return pathlib.Path(root) / "dispatch"


class DispatchTable:
    """Tuned winners of one script, persisted at ``path`` (JSON) and ``path.txt`` (report).

    Reads never block and never see a half-written file (writers replace the file atomically).
    Writers re-read the file under a lock, merge their entries into it and replace it, so
    concurrent processes tuning different keys all land. A corrupt or unknown file, or a
    damaged entry (see ``entry_problem``), is ignored with one ``DispatchTableWarning`` and
    rewritten by the next ``record`` of its key. An entry made on another machine or by
    another tilus version is ignored for this one (its fingerprint does not match).
    """

    def __init__(self, path: str | os.PathLike):
        """Open (lazily) the table stored at ``path``; nothing is created until ``record``."""
        self.path = pathlib.Path(path)
        self._cache: dict | None = None
        self._stamp = None

    @classmethod
    def for_script(cls, script, root: str | os.PathLike | None = None) -> DispatchTable:
        """The table of a Script class (or name): ``<cache_dir>/dispatch/<snake_name>.json``."""
        return cls(dispatch_dir(root) / f"{script_file_name(script)}.json")

    @property
    def report_path(self) -> pathlib.Path:
        """The human-readable report written beside the JSON file."""
        return self.path.with_suffix(".txt")

    def __repr__(self):
        return f"DispatchTable({str(self.path)!r})"

    # --- reading -------------------------------------------------------------------------------
    def _read(self, warn: bool = True) -> dict:
        """The raw entries on disk (key -> JSON object); {} if missing or unusable (with one
        ``DispatchTableWarning`` per state of the file, when ``warn``)."""
        try:
            raw = self.path.read_bytes()
        except (FileNotFoundError, NotADirectoryError):
            return {}
        except OSError as e:
            entries, why = None, f"is unreadable ({e.strerror or e})"
        else:
            entries, why = _parse_table(raw)
        if entries is None:
            if warn:
                from tilus.runtime.cache import warn_once

                warn_once(
                    ("dispatch-table", str(self.path), _stamp(self.path)),
                    f"dispatch table {self.path} {why}; ignoring it (its keys are tuned again)",
                    DispatchTableWarning,
                    stacklevel=4,
                )
            return {}
        return entries

    def _entries(self) -> dict:
        """Entries, re-read only when the file changed since the last read."""
        stamp = _stamp(self.path)  # None: absent (or its directory cannot be entered)
        if self._cache is None or stamp != self._stamp:
            if stamp is not None:
                from tilus.runtime.cache import guard_dir

                guard_dir(self.path.parent, "tilus dispatch table directory")
            self._cache = self._read() if stamp is not None else {}
            self._stamp = stamp
        kept = _in_memory.get(str(self.path))
        return {**self._cache, **kept} if kept else self._cache

    def lookup(self, key: str, fingerprint: Mapping | None = None) -> Entry | None:
        """The entry for ``key``, or None if absent, malformed or made on another machine.

        Args:
            key: A ``dispatch_key``.
            fingerprint: The current machine; defaults to ``device_fingerprint()``.
        """
        raw = self._entries().get(key)
        if raw is None:
            return None
        why = entry_problem(key, raw)
        if why is not None:
            from tilus.runtime.cache import warn_once

            warn_once(
                ("dispatch-entry", str(self.path), key, self._stamp),
                f"dispatch table {self.path}: entry {key} is damaged ({why}); ignoring it "
                "(it is tuned again)",
                DispatchTableWarning,
            )
            return None
        entry = Entry.from_json(raw)
        current = fingerprint if fingerprint is not None else device_fingerprint()
        if not fingerprint_matches(entry.fingerprint, current):
            return None
        return entry

    def keys(self) -> list[str]:
        """All keys stored (whatever their fingerprint)."""
        return list(self._entries())

    def __contains__(self, key: str) -> bool:
        return self.lookup(key) is not None

    # --- writing -------------------------------------------------------------------------------
    @contextlib.contextmanager
    def _locked(self):
        lock_path = self.path.with_name(self.path.name + ".lock")
        with open(lock_path, "a+") as f:
            if fcntl is not None:
                fcntl.flock(f.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                if fcntl is not None:
                    fcntl.flock(f.fileno(), fcntl.LOCK_UN)

    def record(self, key: str, entry: Entry) -> None:
        """Store ``entry`` under ``key``: merge it into the file on disk and replace it atomically.

        Entries written meanwhile by other processes under other keys are kept; the same key is
        overwritten (the latest tuning wins).
        """
        self.update({key: entry})

    def update(self, entries: Mapping[str, Entry]) -> None:
        """Store several entries at once (one read-merge-replace).

        Each entry is stored with its key and a checksum, so a damaged or misplaced entry is
        recognised. When the table cannot be written (read-only or full disk) one warning per
        process says so, and the entries are kept in memory for this process.
        """
        from tilus.runtime.cache import make_private_dir, warn_unwritable

        kept = _in_memory.setdefault(str(self.path), {})
        kept.update({key: _sealed(key, entry) for key, entry in entries.items()})
        try:
            make_private_dir(self.path.parent)
            with self._locked():
                # a corrupt file is overwritten here; lookups already warned about it
                merged = {**self._read(warn=False), **kept}
                doc = {"version": FORMAT_VERSION, "entries": merged}
                text = json.dumps(doc, indent=1, sort_keys=True, default=str)
                _atomic_write(self.path, text + "\n")
                _atomic_write(self.report_path, render_report(merged, self.path.stem))
        except OSError as e:
            root = self.path.parent
            warn_unwritable(root.parent if root.name == "dispatch" else root, e)
        else:
            _in_memory.pop(str(self.path), None)
        self._cache = None

    def verify(self, drop: bool = True, report=None):
        """Check every entry of the table (``entry_problem``); with ``drop``, rewrite the table
        without the damaged ones (an unusable file is deleted). Returns a ``CacheReport``."""
        from tilus.runtime.cache import CacheReport

        report = report if report is not None else CacheReport(self.path.parent)
        try:
            entries, why = _parse_table(self.path.read_bytes())
        except (FileNotFoundError, NotADirectoryError):
            return report
        except OSError as e:
            entries, why = None, f"is unreadable ({e.strerror or e})"
        report.checked += 1 if entries is None else len(entries)
        if entries is None:
            report.bad.append((str(self.path), why.removeprefix("is ")))
            if drop:
                with contextlib.suppress(OSError), self._locked():
                    if _parse_table(self.path.read_bytes())[0] is None:
                        self.path.unlink()
                        self.report_path.unlink(missing_ok=True)
                        report.dropped.append(str(self.path))
            return report
        bad = {}
        for key, raw in entries.items():
            problem = entry_problem(key, raw)
            if problem is None:
                report.ok += 1
            else:
                bad[key] = problem
                report.bad.append((f"{self.path} entry {key}", problem))
        if drop and bad:
            with self._locked():
                merged = dict(self._read(warn=False))
                gone = [k for k in bad if k in merged and entry_problem(k, merged[k]) is not None]
                for k in gone:
                    del merged[k]
                doc = {"version": FORMAT_VERSION, "entries": merged}
                text = json.dumps(doc, indent=1, sort_keys=True, default=str)
                _atomic_write(self.path, text + "\n")
                _atomic_write(self.report_path, render_report(merged, self.path.stem))
            report.dropped += [f"{self.path} entry {k}" for k in gone]
            self._cache = None
        return report

    def remove(self, key: str) -> bool:
        """Delete the entry of ``key`` (if any); returns whether one was removed."""
        if _stamp(self.path) is None:
            return False
        _in_memory.get(str(self.path), {}).pop(key, None)
        with self._locked():
            merged = dict(self._read(warn=False))
            if merged.pop(key, None) is None:
                return False
            doc = {"version": FORMAT_VERSION, "entries": merged}
            _atomic_write(self.path, json.dumps(doc, indent=1, sort_keys=True, default=str) + "\n")
            _atomic_write(self.report_path, render_report(merged, self.path.stem))
        self._cache = None
        return True


#: Entries that could not be written, by table path: this process still uses them.
_in_memory: dict[str, dict[str, dict]] = {}


def _stamp(path: pathlib.Path):
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino)


def _parse_table(raw: bytes) -> tuple[dict | None, str]:
    """``(entries, "")`` of a table file's bytes, or ``(None, why it is unusable)``."""
    try:
        doc = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        return None, "is corrupt (not UTF-8 text)"
    except (ValueError, RecursionError) as e:
        return None, f"is corrupt ({e})"
    if not isinstance(doc, dict) or not isinstance(doc.get("entries"), dict):
        return None, "has no entries object"
    if doc.get("version") != FORMAT_VERSION:
        return None, f"has format version {doc.get('version')!r} (expected {FORMAT_VERSION})"
    return doc["entries"], ""


def _checksum(raw: Mapping) -> str:
    text = json.dumps({k: v for k, v in raw.items() if k != "check"}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def _sealed(key: str, entry) -> dict:
    """The stored form of an entry: its JSON, the key it was made for and a checksum."""
    doc = entry.to_json() if isinstance(entry, Entry) else dict(entry)
    doc = json.loads(json.dumps({**doc, "key": key}, default=str))  # as a reader parses it
    doc.pop("check", None)
    doc["check"] = _checksum(doc)
    return doc


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def entry_problem(key: str, raw) -> str | None:
    """Why the stored entry ``raw`` cannot be trusted for ``key`` (None: it can).

    An entry must be an object with a winner config and well-formed lists; one that records
    the key it was made for must have been made for ``key``, and one with a checksum must
    match it (an entry edited by hand must lose its ``check`` field).
    """
    if not isinstance(raw, Mapping):
        return "it is not a JSON object"
    if "key" in raw and raw["key"] != key:
        return f"it was recorded for key {raw['key']!r}"
    if "check" in raw and raw["check"] != _checksum(raw):
        return "it does not match its checksum"
    if not isinstance(raw.get("winner"), dict):
        return "it has no winner config"
    for name in ("times", "failed", "disagreed"):
        items = raw.get(name, [])
        if not isinstance(items, list) or not all(isinstance(x, dict) for x in items):
            return f"its {name!r} is not a list of objects"
    for t in raw.get("times", []):
        if not isinstance(t.get("config"), dict) or not _number(t.get("median_ms")):
            return "a timing has no config or no median"
    fp = raw.get("fingerprint", {})
    if not (isinstance(fp, dict) or fp == "*"):
        return "its fingerprint is not an object"
    if not _number(raw.get("timestamp", 0.0)) or not isinstance(raw.get("info", {}), dict):
        return "its timestamp or info is malformed"
    return None


def _atomic_write(path: pathlib.Path, text: str) -> None:
    # the pid in the name lets ``verify_tables`` tell an interrupted writer's leftovers
    fd, tmp = tempfile.mkstemp(
        prefix=f".{path.name}.{os.getpid()}.", suffix=".tmp", dir=path.parent
    )
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _fmt_config(cfg) -> str:
    if isinstance(cfg, Mapping):
        return ", ".join(f"{k}={v}" for k, v in cfg.items()) or "(default)"
    return str(cfg)


def render_report(entries: Mapping[str, Mapping], title: str = "") -> str:
    """The text report of a table: per key, the configs ranked by median time, then the
    configs that failed or disagreed."""
    lines = [f"tilus dispatch table {title}".rstrip(), ""]
    for key in sorted(entries, key=lambda k: (-float(entries[k].get("timestamp", 0)), k)):
        e = entries[key]
        fp = e.get("fingerprint", {})
        when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(float(e.get("timestamp", 0))))
        lines.append(
            f"key {key}  ({fp.get('device', '?') if isinstance(fp, Mapping) else fp}, {when})"
        )
        for k, v in sorted(e.get("info", {}).items()):
            lines.append(f"  {k}: {v}")
        winner = config_id(e.get("winner", {}))
        lines.append(f"  winner: {_fmt_config(e.get('winner'))}")
        times = sorted(e.get("times", []), key=lambda t: t.get("median_ms", float("inf")))
        if times:
            lines.append(f"  {'median ms':>12} {'min ms':>12}  config")
        for t in times:
            mark = " *" if config_id(t.get("config", {})) == winner else "  "
            lines.append(
                f"  {t.get('median_ms', float('nan')):12.4f} "
                f"{t.get('min_ms', float('nan')):12.4f}{mark}{_fmt_config(t.get('config'))}"
            )
        for d in e.get("disagreed", []):
            lines.append(f"  WRONG  {_fmt_config(d.get('config'))}: {d.get('error')}")
        for f in e.get("failed", []):
            reason = str(f.get("reason", "")).strip().splitlines() or [""]
            lines.append(f"  FAILED {_fmt_config(f.get('config'))}: {reason[0]}")
        lines.append("")
    return "\n".join(lines)


def verify_tables(root: str | os.PathLike | None = None, *, drop: bool = True, report=None):
    """Verify every dispatch table under ``<root>/dispatch`` (``DispatchTable.verify``) and
    find the leftovers of interrupted writers; with ``drop``, remove what fails.

    Args:
        root: The cache root; defaults to the ``cache_dir`` option / ``cache_dir()``.
        drop: Remove damaged entries, unusable tables and abandoned temporary files.
        report: A ``CacheReport`` to add to (default: a new one).

    Returns:
        The ``CacheReport``.
    """
    from tilus.runtime.cache import CacheReport, insecure, leftover_is_stale

    ddir = dispatch_dir(root)
    report = report if report is not None else CacheReport(ddir.parent)
    why = insecure(ddir)
    if why is not None:
        report.warnings.append(f"{ddir}: {why}")
    try:
        items = sorted(ddir.iterdir())
    except OSError:
        return report
    for item in items:
        if item.name.startswith(".") and item.name.endswith(".tmp"):
            parts = item.name.split(".")  # .<table>.json.<pid>.<random>.tmp
            if leftover_is_stale(item, parts[-3] if len(parts) > 4 else None):
                report.leftovers.append(str(item))
                if drop:
                    with contextlib.suppress(OSError):
                        item.unlink()
                        report.dropped.append(str(item))
        elif item.suffix == ".json" and item.is_file():
            DispatchTable(item).verify(drop=drop, report=report)
    return report


def verify_cache(root: str | os.PathLike | None = None, *, drop: bool = True):
    """Verify the whole tilus cache: every compiled artifact entry
    (``tilus.runtime.cache.verify``) and every dispatch table (``verify_tables``).

    Args:
        root: The cache root; defaults to the ``cache_dir`` option / ``cache_dir()``.
        drop: Delete what fails a check, and the leftovers of interrupted writers; the next
            use rebuilds or re-tunes it.

    Returns:
        A ``CacheReport`` (``str(report)`` is a readable summary; ``report.clean``).
    """
    from tilus.runtime.cache import verify

    report = verify(root, drop=drop)
    return verify_tables(report.root, drop=drop, report=report)
