"""The persistent dispatch table: tuned winners per dispatch key, as JSON plus a text report."""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import tempfile
import time
import warnings
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field

from tilus.tune.keys import config_id, device_fingerprint, fingerprint_matches, script_file_name

FORMAT_VERSION = 1

try:  # advisory locks serialise concurrent writers on POSIX; elsewhere merge-on-write only
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None


class DispatchTableWarning(UserWarning):
    """A dispatch table file could not be used (corrupt, unknown format) and was ignored."""


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
    concurrent processes tuning different keys all land. A corrupt or unknown file is ignored
    with a ``DispatchTableWarning`` and rewritten by the next ``record``.
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
    def _read(self) -> dict:
        """The raw entries on disk (key -> JSON object); {} if missing or unusable."""
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return {}
        except OSError as e:
            warnings.warn(
                f"dispatch table {self.path} is unreadable ({e}); ignoring it",
                DispatchTableWarning,
                stacklevel=3,
            )
            return {}
        try:
            doc = json.loads(text)
        except ValueError as e:
            warnings.warn(
                f"dispatch table {self.path} is corrupt ({e}); ignoring it",
                DispatchTableWarning,
                stacklevel=3,
            )
            return {}
        if not isinstance(doc, dict) or not isinstance(doc.get("entries"), dict):
            warnings.warn(
                f"dispatch table {self.path} has no entries object; ignoring it",
                DispatchTableWarning,
                stacklevel=3,
            )
            return {}
        if doc.get("version") != FORMAT_VERSION:
            warnings.warn(
                f"dispatch table {self.path} has format version {doc.get('version')!r} "
                f"(expected {FORMAT_VERSION}); ignoring it",
                DispatchTableWarning,
                stacklevel=3,
            )
            return {}
        return doc["entries"]

    def _entries(self) -> dict:
        """Entries, re-read only when the file changed since the last read."""
        try:
            st = self.path.stat()
            stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
        except FileNotFoundError:
            stamp = None
        if self._cache is None or stamp != self._stamp:
            self._cache = self._read() if stamp is not None else {}
            self._stamp = stamp
        return self._cache

    def lookup(self, key: str, fingerprint: Mapping | None = None) -> Entry | None:
        """The entry for ``key``, or None if absent, malformed or made on another machine.

        Args:
            key: A ``dispatch_key``.
            fingerprint: The current machine; defaults to ``device_fingerprint()``.
        """
        raw = self._entries().get(key)
        if raw is None:
            return None
        try:
            entry = Entry.from_json(raw)
        except (KeyError, TypeError, ValueError):
            return None
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
        """Store several entries at once (one read-merge-replace)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._locked():
            with warnings.catch_warnings():
                # a corrupt file is overwritten here; lookups already warned about it
                warnings.simplefilter("ignore", DispatchTableWarning)
                merged = dict(self._read())
            for key, entry in entries.items():
                merged[key] = entry.to_json() if isinstance(entry, Entry) else dict(entry)
            doc = {"version": FORMAT_VERSION, "entries": merged}
            text = json.dumps(doc, indent=1, sort_keys=True, default=str)
            _atomic_write(self.path, text + "\n")
            _atomic_write(self.report_path, render_report(merged, self.path.stem))
        self._cache = None

    def remove(self, key: str) -> bool:
        """Delete the entry of ``key`` (if any); returns whether one was removed."""
        if not self.path.exists():
            return False
        with self._locked():
            merged = dict(self._read())
            if merged.pop(key, None) is None:
                return False
            doc = {"version": FORMAT_VERSION, "entries": merged}
            _atomic_write(self.path, json.dumps(doc, indent=1, sort_keys=True, default=str) + "\n")
            _atomic_write(self.report_path, render_report(merged, self.path.stem))
        self._cache = None
        return True


def _atomic_write(path: pathlib.Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
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
