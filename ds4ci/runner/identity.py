"""SHA-256 identities of the gate's input files, pin verification and a stat-keyed hash cache.

The gate's verdict is only worth something if the files it ran are the pinned ones, so every
pinned file is hashed in full and compared **before** any server starts (the gate guarantees the
order; this module guarantees the exception). Model files are tens of GB, hence:

* streaming reads into one reusable 8 MiB buffer per thread (``hashlib`` releases the GIL for
  large updates, so a thread pool hashes several files truly in parallel);
* a JSON cache keyed on (realpath, st_dev, st_ino, st_size, st_mtime_ns, st_ctime_ns): an
  unchanged 86 GB file is not re-read. Any write to a file changes its ctime, and ctime cannot be
  set from user space, so a hit means "the same inode, untouched since it was hashed".

The cache is advisory. Anything odd about it (unreadable, not JSON, wrong shape, wrong version)
makes it ignored entirely, never partially trusted; the worst a lost or stale-looking cache can
cost is a re-read.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ds4ci import records
from ds4ci.errors import NoVerdictError, UsageError
from ds4ci.fileio import NotOpened, open_regular, tree_of, write_text_atomic
from ds4ci.log import ByteProgress, Logger, as_logger
from ds4ci.options.config import PinnedFile
from ds4ci.runner.filelimit import FileLimit

BUFFER_SIZE = 8 * 1024 * 1024
CACHE_FORMAT = "ds4ci/hash-cache/v1"
MAX_CACHE_BYTES = 16 * 1024 * 1024
MAX_CACHE_ENTRIES = 4096
# File timestamps come from a coarse kernel clock (a jiffy locally, up to seconds on some network
# file systems). A file written within that tick after we stat it keeps the same stat key, so a
# file whose mtime/ctime is this recent is hashed but not cached (git calls this "racily clean").
RACY_WINDOW_NS = 2_000_000_000
# Files at least this big get periodic "hashing target: 12.4 GiB of 86.0 GiB (14%), 1.9 GiB/s" lines.
HASH_PROGRESS_MIN_BYTES = 256 * 1024 * 1024

Progress = Callable[[str], None]


@dataclass(frozen=True)
class FileIdentity:
    role: str
    path: Path
    size: int
    sha256: str
    pinned: str | None
    verified: bool

    def to_json(self) -> records.FileIdentity:
        """The schema's ``file_identity`` object."""
        return {
            "role": self.role,
            "path": str(self.path),
            "size": self.size,
            "sha256": self.sha256,
            "pinned": self.pinned,
            "verified": self.verified,
        }


@dataclass(frozen=True)
class StatKey:
    """What must be unchanged for a cached digest to still describe the file."""

    realpath: str
    dev: int
    ino: int
    size: int
    mtime_ns: int
    ctime_ns: int

    @classmethod
    def of(cls, realpath: str, st: os.stat_result) -> StatKey:
        return cls(realpath, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)

    def fields(self) -> dict[str, int]:
        return {
            "dev": self.dev,
            "ino": self.ino,
            "size": self.size,
            "mtime_ns": self.mtime_ns,
            "ctime_ns": self.ctime_ns,
        }


@dataclass(frozen=True)
class _Digest:
    sha256: str
    key: StatKey
    cacheable: bool  # read now and not "racily clean": safe to remember


def default_cache_path() -> Path:
    """``$XDG_CACHE_HOME/ds4ci/hash-cache.json``, else ``~/.cache/ds4ci/hash-cache.json``."""
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    # The XDG spec says relative values are invalid and must be ignored.
    base = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".cache"
    return base / "ds4ci" / "hash-cache.json"


def human_size(size: int) -> str:
    value = float(size)
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if value < 1000 or unit == "TB":
            return f"{size} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    raise AssertionError("unreachable")  # pragma: no cover


def _describe(st: os.stat_result) -> str:
    return f"size={st.st_size} mtime_ns={st.st_mtime_ns} ctime_ns={st.st_ctime_ns} inode={st.st_ino}"


def _open_input(role: str, path: Path, trees: Sequence[Path]) -> tuple[int, str]:
    """One input opened (``fileio.open_regular``: below a tree pull-request code wrote, no link followed) with its
    real path. Refused inside such a tree: no verdict; elsewhere (a path the trusted config names): a usage error."""
    try:
        return open_regular(path, trees)
    except NotOpened as exc:
        if tree_of(path, trees) is not None:
            raise NoVerdictError(f"{role} file: {exc}; refusing to read it") from exc
        raise UsageError(f"{role} file {path}: expected an existing regular file, found none ({exc})") from exc


def _stat_regular(role: str, path: Path, trees: Sequence[Path] = ()) -> tuple[str, os.stat_result]:
    """Open and stat one input; anything but an existing readable regular file is refused (``_open_input``)."""
    fd, real = _open_input(role, path, trees)
    try:
        return real, os.fstat(fd)
    finally:
        os.close(fd)


class _Cancelled(Exception):
    """Another file failed; stop reading this one instead of finishing a pointless 86 GB read."""


def _read_digest(
    role: str, path: Path, buffer: bytearray, cancel: threading.Event | None = None,
    on_bytes: Callable[[int], None] | None = None, limit: FileLimit | None = None, trees: Sequence[Path] = (),
) -> tuple[str, StatKey, os.stat_result]:
    """Hash the file at ``path`` (opened by ``_open_input``) and prove it did not change while it was read
    (``on_bytes`` sees each chunk). With a ``limit`` (a file a build wrote): its size and holes checked first,
    the read held to its deadline."""
    fd, real = _open_input(role, path, trees)
    try:
        before = os.fstat(fd)
        deadline = limit.checked(role, path, fd) if limit is not None else None
        if hasattr(os, "posix_fadvise"):
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)  # read-ahead hint for huge files
        digest = hashlib.sha256()
        view = memoryview(buffer)
        total = 0
        with os.fdopen(os.dup(fd), "rb", buffering=0) as fh:
            while True:
                n = fh.readinto(view)
                if not n:
                    break
                if cancel is not None and cancel.is_set():
                    raise _Cancelled
                if limit is not None and deadline is not None:
                    limit.past(deadline, role, path, total)
                digest.update(view[:n])
                total += n
                if on_bytes is not None:
                    on_bytes(n)
        after = os.fstat(fd)
    except OSError as exc:
        # The file opened, so it is configured right; failing mid-read is the runner's storage.
        raise NoVerdictError(f"{role} file {path}: read failed ({exc.strerror or exc}); check the disk") from exc
    finally:
        os.close(fd)
    try:
        at_path = Path(real).lstat()  # a link put in its place is a change, never followed
    except OSError as exc:
        raise NoVerdictError(
            f"{role} file {path} disappeared while it was being hashed; nothing may modify input files "
            "during a gate run"
        ) from exc
    key = StatKey.of(real, before)
    if (
        StatKey.of(real, after) != key
        or StatKey.of(real, at_path) != key
        or total != before.st_size
    ):
        raise NoVerdictError(
            f"{role} file {path} changed while it was being hashed (before: {_describe(before)}; "
            f"after: {_describe(at_path)}; bytes read {total}); nothing may modify input files during "
            "a gate run; re-run once the file is stable"
        )
    return digest.hexdigest(), key, before


def hash_file(path: Path, limit: FileLimit | None = None, role: str = "input") -> str:
    """SHA-256 (hex) of one regular file, streamed; raises UsageError/NoVerdictError like identify
    (``limit``: a file a build wrote, see ``filelimit``)."""
    _, st = _stat_regular(role, path)
    # A buffer the size of the file (up to 8 MiB): sealing hashes dozens of small evidence files, and
    # zeroing 8 MiB for each of them cost more than reading them.
    buffer = bytearray(min(BUFFER_SIZE, max(st.st_size + 1, 64 * 1024)))
    sha, _, _ = _read_digest(role, path, buffer, limit=limit)
    return sha


# --- the cache ----------------------------------------------------------------------------------


def _valid_entry(value: Any) -> bool:
    if not isinstance(value, dict) or set(value) != {"dev", "ino", "size", "mtime_ns", "ctime_ns", "sha256"}:
        return False
    sha = value["sha256"]
    numbers = [value[k] for k in ("dev", "ino", "size", "mtime_ns", "ctime_ns")]
    ints_ok = all(isinstance(v, int) and not isinstance(v, bool) for v in numbers)
    return ints_ok and isinstance(sha, str) and len(sha) == 64 and all(c in "0123456789abcdef" for c in sha)


def load_cache(path: Path, progress: Progress | Logger | None) -> dict[str, dict[str, Any]]:
    """Entries keyed by realpath; ``{}`` (with a warning) for anything not exactly our format."""

    def ignore(why: str) -> dict[str, dict[str, Any]]:
        as_logger(progress).warning(f"ignoring hash cache {path}: {why}; files will be re-read")
        return {}

    try:
        with path.open("rb") as fh:
            data = fh.read(MAX_CACHE_BYTES + 1)
    except FileNotFoundError:
        return {}
    except OSError as exc:
        return ignore(f"cannot read it ({exc.strerror or exc})")
    if len(data) > MAX_CACHE_BYTES:
        return ignore(f"larger than {MAX_CACHE_BYTES} bytes")
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:  # RecursionError: nested too deeply
        return ignore(f"not valid JSON ({str(exc)[:200]})")
    entries = doc.get("entries") if isinstance(doc, dict) else None
    if not isinstance(doc, dict) or doc.get("format") != CACHE_FORMAT or not isinstance(entries, dict):
        return ignore(f"expected an object with \"format\": \"{CACHE_FORMAT}\" and \"entries\"")
    for real, entry in entries.items():
        if not _valid_entry(entry):
            return ignore(f"malformed entry for {real!r}")
    return entries


def _lookup(entries: dict[str, dict[str, Any]], key: StatKey) -> str | None:
    entry = entries.get(key.realpath)
    if entry is None or any(entry[k] != v for k, v in key.fields().items()):
        return None
    sha: str = entry["sha256"]
    return sha


def save_cache(path: Path, fresh: dict[str, dict[str, Any]], progress: Progress | Logger | None) -> None:
    """Merge ``fresh`` into what is on disk now and replace the file atomically (temp + rename).

    Concurrent gates may race here; the loser's entries are simply missing next time (a re-read),
    never wrong, because every entry carries its own full stat key.
    """
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


# --- identify -----------------------------------------------------------------------------------


def _short(sha: str) -> str:
    return sha[:16] + "…"


def _cache_file(cache_path: Path | None, say: Logger) -> Path | None:
    if cache_path is not None:
        return cache_path
    try:
        return default_cache_path()
    except (RuntimeError, KeyError):  # no home directory to be found: hash without a cache
        say.warning("no home directory for the hash cache; every file will be read")
        return None


@dataclass
class _Hasher:
    """One hashing job per distinct file: a cache hit, or a read with progress for big files."""

    unique: dict[str, PinnedFile]
    entries: dict[str, dict[str, Any]]
    use_cache: bool
    say: Logger
    progress_min_bytes: int
    limits: Mapping[str, FileLimit] = field(default_factory=dict)  # by role: the files a build wrote
    trees: Sequence[Path] = ()  # folders pull-request code wrote: a file inside is opened below them, no link followed
    stop: threading.Event = field(default_factory=threading.Event)
    local: threading.local = field(default_factory=threading.local)

    def job(self, real: str) -> _Digest:
        item = self.unique[real]
        _, st = _stat_regular(item.role, item.path, self.trees)
        key = StatKey.of(real, st)
        self.say(f"hashing {item.role} {item.path} ({human_size(st.st_size)}) ...")
        hit = _lookup(self.entries, key) if self.use_cache else None
        if hit is not None:
            self.say(f"  {item.role}: sha256 {_short(hit)} (cache hit)")
            return _Digest(hit, key, cacheable=False)
        buffer = getattr(self.local, "buffer", None)
        if buffer is None:
            buffer = self.local.buffer = bytearray(BUFFER_SIZE)
        started_ns = time.time_ns()
        t0 = time.perf_counter()
        big = st.st_size >= self.progress_min_bytes
        bar = ByteProgress(f"hashing {item.role}", st.st_size, self.say) if big else None
        sha, key, before = _read_digest(
            item.role, item.path, buffer, self.stop, bar.advance if bar else None, self.limits.get(item.role), self.trees)
        if bar is not None:
            bar.done()
        seconds = time.perf_counter() - t0
        rate = before.st_size / seconds / 1e6 if seconds > 0 else float("inf")
        racy = max(before.st_mtime_ns, before.st_ctime_ns) > started_ns - RACY_WINDOW_NS
        note = " (modified moments ago: not cached)" if racy else ""
        self.say(f"  {item.role}: sha256 {_short(sha)} {rate:.1f} MB/s{note}")
        return _Digest(sha, key, cacheable=not racy)

    def run(self, workers: int | None) -> dict[str, _Digest]:
        count = workers if workers is not None else min(len(self.unique), os.cpu_count() or 1)
        with ThreadPoolExecutor(max_workers=max(1, count), thread_name_prefix="ds4ci-hash") as pool:
            futures = {pool.submit(self.job, real): real for real in self.unique}
            digests: dict[str, _Digest] = {}
            try:
                # as_completed: the first real failure surfaces first, before the _Cancelled it causes.
                for fut in as_completed(futures):
                    digests[futures[fut]] = fut.result()
            except BaseException:
                self.stop.set()
                for fut in futures:
                    fut.cancel()
                raise
        return digests


def _verified(files: Sequence[PinnedFile], reals: Sequence[str], digests: dict[str, _Digest]) -> list[FileIdentity]:
    """Identities in input order; every pin checked, all mismatches in one error."""
    out: list[FileIdentity] = []
    mismatches: list[str] = []
    for item, real in zip(files, reals, strict=True):
        digest = digests[real]
        pinned = item.sha256.lower() if item.sha256 is not None else None
        verified = pinned is not None and pinned == digest.sha256
        if pinned is not None and not verified:
            mismatches.append(f"  {item.role} {item.path}: expected {pinned}, found {digest.sha256}")
        out.append(FileIdentity(item.role, item.path, digest.key.size, digest.sha256, pinned, verified))
    if mismatches:
        raise NoVerdictError(
            f"pinned SHA-256 mismatch for {len(mismatches)} file(s); refusing to start any server:\n"
            + "\n".join(mismatches)
            + "\nStage the expected files or, if the new files are intended, update the pins."
        )
    return out


def identify(
    files: Sequence[PinnedFile],
    *,
    cache_path: Path | None,
    use_cache: bool,
    progress: Progress | Logger | None = None,
    workers: int | None = None,
    progress_min_bytes: int = HASH_PROGRESS_MIN_BYTES,
    limits: Mapping[str, FileLimit] | None = None,
    trees: Sequence[Path] = (),
) -> list[FileIdentity]:
    """Hash every file (in parallel), then verify every pin; return identities in input order.

    A file of at least ``progress_min_bytes`` reports its progress and throughput while it is read.
    A role in ``limits`` (a file a build wrote: ``server_bin``) is held to its size, hole and deadline
    limits (``filelimit``) when it is read.

    Raises UsageError for a missing/unreadable/non-regular file (before anything is read),
    NoVerdictError if a file changes while hashed or if any pin does not match (all mismatches
    are listed in one message).
    """
    if not files:
        return []
    say = as_logger(progress)  # thread-safe: lines from the hashing threads never interleave
    # Stat everything first so a typo in the last path fails in milliseconds, not after 86 GB.
    reals = [_stat_regular(f.role, f.path, trees)[0] for f in files]
    cache_file = _cache_file(cache_path, say)
    entries = load_cache(cache_file, say) if use_cache and cache_file is not None else {}
    # One job per distinct realpath: two roles naming the same file are read once.
    unique: dict[str, PinnedFile] = {}
    for item, real in zip(files, reals, strict=True):
        unique.setdefault(real, item)
    digests = _Hasher(unique, entries, use_cache, say, progress_min_bytes, dict(limits or {}), trees).run(workers)
    fresh = {d.key.realpath: {**d.key.fields(), "sha256": d.sha256} for d in digests.values() if d.cacheable}
    # use_cache=False still refreshes the cache: a forced re-read is the most trustworthy entry.
    if fresh and cache_file is not None:
        save_cache(cache_file, fresh, say)
    return _verified(files, reals, digests)
