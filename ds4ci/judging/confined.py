"""Reading a file of an untrusted evidence bundle: confined to the bundle, regular files only, bounded.

Every path named inside sealed JSON (a lifecycle's request and response paths, the manifest's
entries, log names) comes from the bundle, so it is untrusted. A path is accepted only in plain
relative form (no absolute path, no ``.`` or ``..``, no empty part) and opened one component at a
time below the bundle's own directory with ``O_NOFOLLOW``: a symbolic link anywhere on the way is
refused, never followed. The file is opened with ``O_NONBLOCK`` (so a FIFO cannot hang the reader)
and ``fstat``-checked to be a regular file before a byte is read; whole-file reads are size-limited.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from pathlib import Path, PurePosixPath
from typing import BinaryIO

from ds4ci.fileio import file_kind, open_below, open_file_beneath

MAX_JSON_BYTES = 8 * 1024 * 1024  # a lifecycle record, a request or a response, a manifest
_CHUNK = 1 << 20


class ConfinedError(Exception):
    """A bundle path that is unsafe, missing, not a regular file or too large: never read.

    ``cause``: the error of the ``open`` that failed, where one did (``ENOENT``: missing; ``ELOOP``: a link)."""

    def __init__(self, message: str, cause: OSError | None = None) -> None:
        super().__init__(message)
        self.cause = cause


class NotRegularError(ConfinedError):
    """The path names a FIFO, device, folder or socket: opened without blocking, never read."""


def parts_of(rel: object) -> tuple[str, ...]:
    """The components of a plain relative path inside a bundle, or ConfinedError saying why not."""
    if not isinstance(rel, str) or not rel:
        raise ConfinedError(f"expected a relative path inside the bundle, found {rel!r}")
    parts = tuple(rel.split("/"))
    if rel.startswith("/") or "\0" in rel or any(p in ("", ".", "..") for p in parts):
        raise ConfinedError(f"path {rel[:200]!r} is not a plain relative path inside the bundle (refused, never opened)")
    return parts


def open_regular(root: Path | int, rel: object) -> BinaryIO:
    """``root/rel`` opened for reading, after proving it is a regular file inside ``root`` (a folder, or a
    descriptor of one the resolver opened)."""
    name = str(rel)[:200]
    try:
        fd = open_file_beneath(root, parts_of(rel)) if isinstance(root, int) else open_below(root, parts_of(rel))
    except ConfinedError:
        raise
    except OSError as exc:
        raise ConfinedError(_why(name, exc), exc) from exc
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotRegularError(f"{name} is not a regular file ({file_kind(mode)}; refused, never read)")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_bytes(root: Path, rel: object, limit: int = MAX_JSON_BYTES) -> bytes:
    """The whole of a regular file inside ``root``, refused when it holds more than ``limit`` bytes."""
    with open_regular(root, rel) as fh:
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise ConfinedError(f"{str(rel)[:200]} is larger than the {limit}-byte limit for it (refused)")
    return data


def digest(root: Path, rel: object) -> tuple[int, str]:
    """(size, SHA-256) of a regular file inside ``root``, read in chunks."""
    h = hashlib.sha256()
    size = 0
    with open_regular(root, rel) as fh:
        while chunk := fh.read(_CHUNK):
            h.update(chunk)
            size += len(chunk)
    return size, h.hexdigest()


def relative(root: Path, path: Path) -> str:
    """``path`` (somewhere below ``root``) as the relative form the functions above take."""
    return PurePosixPath(path.relative_to(root)).as_posix()


def _why(name: str, exc: OSError) -> str:
    if exc.errno == errno.ENOENT:
        return f"{name} is missing from the bundle"
    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
        return f"{name}: a symbolic link or a non-directory on the way (never followed)"
    return f"{name} cannot be opened ({exc.strerror or exc})"

