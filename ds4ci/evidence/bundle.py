"""Evidence bundles as single files: a ``.tar.gz`` of a promoted attempt, written and opened safely.

Written from regular files only (never a symlink or special file). Opened as untrusted input:
every member must be a regular file or a directory with a plain relative name inside the one top
directory; links, devices, absolute paths and ``..`` are refused, and size and count are bounded,
before anything is extracted into a fresh temporary directory.
"""

from __future__ import annotations

import contextlib
import shutil
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

from ds4ci.errors import UsageError

MAX_MEMBERS = 100_000
MAX_TOTAL_BYTES = 16 << 30  # server logs are capped at 512 MiB a stream by default


class BundleError(Exception):
    """An archive that is not a safe evidence bundle."""


def write_archive(directory: Path, out: Path, regular_files: list[str]) -> None:
    """Write ``directory``'s listed regular files (relative paths) as ``out`` (.tar.gz) under its own name."""
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(f".{out.name}.partial")
    # gzip level 6 (zlib's default) instead of tarfile's 9: server logs compress about as well, in
    # a fraction of the time.
    with tarfile.open(partial, "w:gz", compresslevel=6) as tar:
        for rel in sorted(regular_files):
            tar.add(directory / rel, arcname=f"{directory.name}/{rel}", recursive=False)
    partial.replace(out)


def _checked_members(tar: tarfile.TarFile) -> tuple[str, list[tarfile.TarInfo]]:
    members = tar.getmembers()
    if len(members) > MAX_MEMBERS:
        raise BundleError(f"{len(members)} members is more than an evidence bundle can hold ({MAX_MEMBERS})")
    tops: set[str] = set()
    total = 0
    for member in members:
        name = PurePosixPath(member.name)
        if name.is_absolute() or ".." in name.parts or not name.parts:
            raise BundleError(f"member {member.name!r} has an unsafe path")
        if not (member.isfile() or member.isdir()):
            raise BundleError(f"member {member.name!r} is not a regular file or directory (links are refused)")
        tops.add(name.parts[0])
        total += member.size
    if len(tops) != 1:
        raise BundleError(f"expected one top directory (the attempt), found {len(tops)}")
    if total > MAX_TOTAL_BYTES:
        raise BundleError(f"{total} bytes unpacked is over the {MAX_TOTAL_BYTES}-byte limit")
    return tops.pop(), members


@contextlib.contextmanager
def opened(path: Path) -> Iterator[Path]:
    """The bundle's attempt directory: the directory itself, or an archive's safe extraction."""
    if path.is_dir():
        yield path
        return
    if not path.is_file():
        raise UsageError(f"bundle {path} does not exist (expected an evidence directory or a .tar.gz of one)")
    scratch = Path(tempfile.mkdtemp(prefix="ds4ci-bundle-"))
    try:
        try:
            with tarfile.open(path, "r:gz") as tar:
                top, members = _checked_members(tar)
                for member in members:
                    member.mode = 0o700 if member.isdir() else 0o600
                if hasattr(tarfile, "data_filter"):  # Python >= 3.10.12 / 3.11.4: a second line of defence
                    tar.extractall(scratch, members=members, filter="data")
                else:  # pragma: no cover - older patch releases; the members were checked above
                    tar.extractall(scratch, members=members)  # noqa: S202
        except (tarfile.TarError, OSError, EOFError) as exc:
            raise BundleError(f"{path} is not a readable .tar.gz ({exc})") from exc
        yield scratch / top
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
