"""An inspectable on-disk cache of compiled artifacts, safe under concurrent writers."""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import shutil
import tempfile

# Files of an entry; an entry counts as complete only once this file is present.
META_FILE = "meta.json"


def cache_dir() -> pathlib.Path:
    """Return the root of the tilus cache.

    ``tilus.option.cache_dir(...)`` if set, else `$TILUS_CACHE_DIR`, else `~/.cache/tilus`.
    """
    from tilus import option

    chosen = option.get_option("cache_dir")  # the option reads $TILUS_CACHE_DIR itself
    if chosen:
        return pathlib.Path(chosen).expanduser()
    env = os.environ.get("TILUS_CACHE_DIR")
    if env:
        return pathlib.Path(env).expanduser()
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


class ArtifactCache:
    """Entries live in `<root>/programs/<key>/`, one plain file per artifact plus meta.json."""

    def __init__(self, root: str | os.PathLike | None = None):
        """Open (lazily create) a cache.

        Args:
            root: The cache root; defaults to `cache_dir()`.
        """
        self.root = pathlib.Path(root) if root is not None else cache_dir()
        self.programs = self.root / "programs"

    def path(self, key: str) -> pathlib.Path:
        """Return the directory an entry with this key lives in (it may not exist)."""
        return self.programs / key

    def lookup(self, key: str) -> dict[str, bytes] | None:
        """Return the files of a complete entry, by name, or None on a miss.

        Args:
            key: The entry key, e.g. from `cache_key`.

        Returns:
            A dict from file name to contents (meta.json included), or None.
        """
        entry = self.path(key)
        if not (entry / META_FILE).is_file():
            return None
        files: dict[str, bytes] = {}
        try:
            for item in entry.iterdir():
                if item.is_file():
                    files[item.name] = item.read_bytes()
        except FileNotFoundError:
            # Someone removed the entry while we read it (e.g. a cache clear): a miss.
            return None
        return files if META_FILE in files else None

    def meta(self, key: str) -> dict | None:
        """Return the parsed meta.json of a complete entry, or None."""
        try:
            return json.loads((self.path(key) / META_FILE).read_text())
        except FileNotFoundError:
            return None

    def store(self, key: str, files: dict[str, bytes | str], meta: dict) -> pathlib.Path:
        """Write an entry atomically and return its directory.

        Everything is written into a temporary directory next to the final one, then moved
        into place with one rename, so readers never see a half-written entry. If another
        writer got there first, its entry is kept and ours is discarded.

        Args:
            key: The entry key.
            files: File name to contents (str is written as UTF-8); names must be plain.
            meta: JSON-serialisable metadata, written as meta.json.

        Returns:
            The entry directory.
        """
        for name in files:
            if name == META_FILE or os.sep in name or name in ("", ".", ".."):
                raise ValueError(f"invalid cache file name {name!r}")
        final = self.path(key)
        if (final / META_FILE).is_file():
            return final
        self.programs.mkdir(parents=True, exist_ok=True)
        # Temp dirs start with '.' so they are never mistaken for entries.
        tmp = pathlib.Path(tempfile.mkdtemp(prefix=f".tmp-{key}-", dir=self.programs))
        try:
            for name, content in files.items():
                data = content.encode() if isinstance(content, str) else content
                (tmp / name).write_bytes(data)
            # meta.json last: it is the completeness marker.
            (tmp / META_FILE).write_text(json.dumps(meta, indent=2, sort_keys=True, default=str))
            try:
                os.replace(tmp, final)
            except OSError:
                # The target exists and is non-empty: another writer won the race.
                if not (final / META_FILE).is_file():
                    # A stale incomplete directory (crashed writer): replace it.
                    shutil.rmtree(final, ignore_errors=True)
                    try:
                        os.replace(tmp, final)
                    except OSError:
                        pass
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
        return final

    def clear(self) -> None:
        """Delete every entry (and any leftover temp dirs)."""
        shutil.rmtree(self.programs, ignore_errors=True)
