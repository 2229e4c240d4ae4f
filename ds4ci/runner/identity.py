"""SHA-256 identities of the gate's input files, pin verification and a stat-keyed hash cache.

The gate's verdict is only worth something if the files it ran are the pinned ones, so every
pinned file is hashed in full and compared **before** any server starts (the gate guarantees the
order; this module guarantees the exception). Model files are tens of GB, hence:

* streaming reads into one reusable 8 MiB buffer per thread (``hashlib`` releases the GIL for
  large updates, so a thread pool hashes several files truly in parallel);
* a JSON cache (``hashcache``) keyed on (realpath, st_dev, st_ino, st_size, st_mtime_ns, st_ctime_ns): an
  unchanged 86 GB file is not re-read. Any write to a file changes its ctime, and ctime cannot be
  set from user space, so a hit means "the same inode, untouched since it was hashed".

The cache is advisory. Anything odd about it (unreadable, not JSON, wrong shape, wrong version)
makes it ignored entirely, never partially trusted; the worst a lost or stale-looking cache can
cost is a re-read.
"""

from __future__ import annotations

import hashlib
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
from ds4ci.fileio import NotOpened, open_regular, tree_of
from ds4ci.log import ByteProgress, Logger, as_logger
from ds4ci.options.config import PinnedFile
from ds4ci.options.protected import Protected, refuse_file
from ds4ci.runner.filelimit import FileLimit
from ds4ci.runner.hashcache import default_cache_path, load_cache, save_cache

BUFFER_SIZE = 8 * 1024 * 1024
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


# --- the cache (ds4ci.runner.hashcache) ---------------------------------------------------------


def _lookup(entries: dict[str, dict[str, Any]], key: StatKey) -> str | None:
    entry = entries.get(key.realpath)
    if entry is None or any(entry[k] != v for k, v in key.fields().items()):
        return None
    sha: str = entry["sha256"]
    return sha


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
    show_digests: bool = True  # False for the gate service: its caller reads no digest of a file it cannot read
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
            self.say(f"  {item.role}: {self._digest_words(hit)} (cache hit)")
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
        self.say(f"  {item.role}: {self._digest_words(sha)} {rate:.1f} MB/s{note}")
        return _Digest(sha, key, cacheable=not racy)

    def _digest_words(self, sha: str) -> str:
        return f"sha256 {_short(sha)}" if self.show_digests else "hashed"

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


def _verified(files: Sequence[PinnedFile], reals: Sequence[str], digests: dict[str, _Digest],
              show_found: bool = True) -> list[FileIdentity]:
    """Identities in input order; every pin checked, all mismatches in one error (with the digests found, unless
    ``show_found`` is False: the gate service's caller may not read the file)."""
    out: list[FileIdentity] = []
    mismatches: list[str] = []
    for item, real in zip(files, reals, strict=True):
        digest = digests[real]
        pinned = item.sha256.lower() if item.sha256 is not None else None
        verified = pinned is not None and pinned == digest.sha256
        if pinned is not None and not verified:
            found = digest.sha256 if show_found else "another digest (not shown under the gate service)"
            mismatches.append(f"  {item.role} {item.path}: expected {pinned}, found {found}")
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
    guard: Protected | None = None,
    trees: Sequence[Path] = (),
) -> list[FileIdentity]:
    """Hash every file (in parallel), then verify every pin; return identities in input order.

    ``guard``: folders no file may resolve into at the moment it is read (``ds4ci.options.protected``); with the
    gate service's state among them, no digest of a file read is printed before it matched its pin.

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
    for item, real in zip(files, reals, strict=True):
        if guard is not None:
            refuse_file(f"{item.role} file {item.path}", Path(real), guard)
    show = guard is None or not guard.quiet
    cache_file = _cache_file(cache_path, say)
    entries = load_cache(cache_file, say) if use_cache and cache_file is not None else {}
    # One job per distinct realpath: two roles naming the same file are read once.
    unique: dict[str, PinnedFile] = {}
    for item, real in zip(files, reals, strict=True):
        unique.setdefault(real, item)
    digests = _Hasher(unique, entries, use_cache, say, progress_min_bytes, dict(limits or {}), show,
                      trees).run(workers)
    fresh = {d.key.realpath: {**d.key.fields(), "sha256": d.sha256} for d in digests.values() if d.cacheable}
    # use_cache=False still refreshes the cache: a forced re-read is the most trustworthy entry.
    if fresh and cache_file is not None:
        save_cache(cache_file, fresh, say)
    return _verified(files, reals, digests, show)
