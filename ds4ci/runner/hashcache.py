"""The hash cache: a JSON file of SHA-256 digests keyed by realpath and stat fields (``ds4ci.runner.identity``).

The cache is advisory. Anything odd about it (unreadable, a link, not JSON, wrong shape, wrong version)
makes it ignored entirely, never partially trusted; the worst a lost or stale-looking cache can cost is
a re-read. It is read without following a link, and a file at its path that does not carry ds4ci's
format marker (a key, a link, anything else) is never replaced: ds4ci overwrites only what it wrote.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

from ds4ci.fileio import write_text_atomic
from ds4ci.log import Logger, Progress, as_logger

CACHE_FORMAT = "ds4ci/hash-cache/v1"
MAX_CACHE_BYTES = 16 * 1024 * 1024
MAX_CACHE_ENTRIES = 4096


def default_cache_path() -> Path:
    """``$XDG_CACHE_HOME/ds4ci/hash-cache.json``, else ``~/.cache/ds4ci/hash-cache.json``."""
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    # The XDG spec says relative values are invalid and must be ignored.
    base = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".cache"
    return base / "ds4ci" / "hash-cache.json"


def _valid_entry(value: Any) -> bool:
    if not isinstance(value, dict) or set(value) != {"dev", "ino", "size", "mtime_ns", "ctime_ns", "sha256"}:
        return False
    sha = value["sha256"]
    numbers = [value[k] for k in ("dev", "ino", "size", "mtime_ns", "ctime_ns")]
    ints_ok = all(isinstance(v, int) and not isinstance(v, bool) for v in numbers)
    return ints_ok and isinstance(sha, str) and len(sha) == 64 and all(c in "0123456789abcdef" for c in sha)


def _read(path: Path) -> tuple[Any, str | None]:
    """The file's JSON (None when there is no file), or why it is no cache file: opened without following a link."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        return None, f"cannot read it as a file ({exc.strerror or exc}; a link is never followed)"
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            return None, "not a regular file"
        try:
            data = fh.read(MAX_CACHE_BYTES + 1)
        except OSError as exc:
            return None, f"cannot read it ({exc.strerror or exc})"
    if len(data) > MAX_CACHE_BYTES:
        return None, f"larger than {MAX_CACHE_BYTES} bytes"
    try:
        return json.loads(data.decode("utf-8")), None
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:  # RecursionError: nested too deeply
        return None, f"not valid JSON ({str(exc)[:200]})"


def load_cache(path: Path, progress: Progress | Logger | None) -> dict[str, dict[str, Any]]:
    """Entries keyed by realpath; ``{}`` (with a warning) for anything not exactly our format."""
    doc, why = _read(path)
    entries = doc.get("entries") if isinstance(doc, dict) else None
    if why is None and doc is not None:
        if not isinstance(doc, dict) or doc.get("format") != CACHE_FORMAT or not isinstance(entries, dict):
            why = f"expected an object with \"format\": \"{CACHE_FORMAT}\" and \"entries\""
        else:
            why = next((f"malformed entry for {real!r}" for real, e in entries.items() if not _valid_entry(e)), None)
    if why is not None:
        as_logger(progress).warning(f"ignoring hash cache {path}: {why}; files will be re-read")
        return {}
    return entries if isinstance(entries, dict) else {}


def carries_marker(path: Path) -> bool:
    """Is ``path`` a regular file (not a link) of JSON with ds4ci's ``"format"`` marker: one ds4ci wrote?"""
    doc, why = _read(path)
    return why is None and isinstance(doc, dict) and doc.get("format") == CACHE_FORMAT


def save_cache(path: Path, fresh: dict[str, dict[str, Any]], progress: Progress | Logger | None) -> None:
    """Merge ``fresh`` into what is on disk now and replace the file atomically (temp + rename).

    Concurrent gates may race here; the loser's entries are simply missing next time (a re-read),
    never wrong, because every entry carries its own full stat key. A file at ``path`` that is not a hash
    cache of ds4ci's own format (a key, a link, anything else) is never replaced: nothing is written.
    """
    if (path.exists() or path.is_symlink()) and not carries_marker(path):
        as_logger(progress).warning(f"did not write the hash cache {path}: a file is there that is not a ds4ci hash "
                                    f"cache (\"format\": \"{CACHE_FORMAT}\"), and ds4ci never replaces a file it did "
                                    "not write; choose another gate.hash_cache_path")
        return
    merged = dict(load_cache(path, None))
    merged.update(fresh)
    if len(merged) > MAX_CACHE_ENTRIES:
        # Keep the newest files (by ctime): old entries most likely describe files long gone.
        keep = sorted(merged.items(), key=lambda kv: kv[1]["ctime_ns"], reverse=True)[:MAX_CACHE_ENTRIES]
        merged = dict(keep)
    text = json.dumps({"format": CACHE_FORMAT, "entries": merged}, indent=1, sort_keys=True) + "\n"
    try:
        write_text_atomic(path, text)
    except OSError as exc:
        # The cache only saves time; failing to write it must not fail the gate.
        as_logger(progress).warning(f"could not write hash cache {path} ({exc.strerror or exc})")
