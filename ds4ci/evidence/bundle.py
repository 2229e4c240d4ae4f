"""Evidence bundles as single files: a ``.tar.gz`` of a promoted attempt, written and opened safely.

Written from regular files only (never a symlink or special file), ``manifest.json`` first. Opened
as untrusted input, in two passes. The first reads the tar headers only, writing nothing: every
member must be a regular file or a directory with a plain relative name inside the one top directory
(links, devices, absolute paths, ``..`` and repeated names are refused); the first file must be the
manifest, read size-limited; every later file must be one the manifest lists (or ``results.json`` or
the signed ``attestation.json``, each with a size limit of its own), no larger than the manifest
says. The manifest is the attacker's, so it never sets the budget: the files together may hold at most
the extraction budget ds4ci sets (:data:`EXTRACT_BUDGET_BYTES` unless the caller gives another, ``ds4ci
verify --max-extract-mib``), and the archive at most :data:`MAX_MEMBERS` members. Only then does the
second pass extract the checked members into a fresh temporary directory. The first failure stops the
scan, before the member that would pass the budget is decompressed, so a small archive cannot make
ds4ci decompress or write more than its budget, whatever its manifest declares.
"""

from __future__ import annotations

import contextlib
import shutil
import tarfile
import tempfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import BinaryIO

from ds4ci.errors import UsageError
from ds4ci.evidence.results import MAX_RESULTS_BYTES
from ds4ci.evidence.store import ATTESTATION, MANIFEST, MAX_ATTESTATION_BYTES, RESULTS
from ds4ci.judging import strictjson

MAX_MEMBERS = 100_000
EXTRACT_BUDGET_BYTES = 512 << 20  # the files of one bundle together, extracted (the default log cap is one stream's)
MAX_MANIFEST_BYTES = 8 << 20
GZIP_MAGIC = b"\x1f\x8b"


class BundleError(Exception):
    """An archive that is not a safe evidence bundle."""


def write_archive(directory: Path, out: Path, regular_files: list[str]) -> None:
    """Write ``directory``'s listed regular files (relative paths) as ``out`` (.tar.gz) under its own name.

    The manifest goes first: a reader bounds every later member by what it lists.
    """
    from ds4ci.fileio import write_with

    def fill(fh: BinaryIO) -> None:
        # gzip level 6 (zlib's default) instead of tarfile's 9: server logs compress about as well, in
        # a fraction of the time.
        with tarfile.open(fileobj=fh, mode="w:gz", compresslevel=6) as tar:
            for rel in sorted(regular_files, key=lambda r: (r != MANIFEST, r)):
                tar.add(directory / rel, arcname=f"{directory.name}/{rel}", recursive=False)

    write_with(out, fill)  # a new file beside it, renamed over the name: never written through a link


@dataclass
class _Scan:
    """What the header pass has learnt so far."""

    top: str | None = None
    members: list[tarfile.TarInfo] = field(default_factory=list)
    files: dict[str, int] = field(default_factory=dict)  # relative path -> size in its header
    allowed: dict[str, int] | None = None  # from the manifest, once read
    budget: int = EXTRACT_BUDGET_BYTES
    total: int = 0


def _relative(scan: _Scan, member: tarfile.TarInfo) -> str:
    """The member's path below the top directory, after checking its name and type."""
    name = PurePosixPath(member.name)
    if name.is_absolute() or not name.parts or any(p in ("", ".", "..") for p in name.parts) or "\\" in member.name:
        raise BundleError(f"member {member.name[:200]!r} has an unsafe path")
    if not (member.isfile() or member.isdir()) or member.issparse():
        raise BundleError(f"member {member.name[:200]!r} is not a regular file or directory "
                          "(links are refused, devices and sparse members too)")
    if scan.top is None:
        scan.top = name.parts[0]
    elif name.parts[0] != scan.top:
        raise BundleError(f"expected one top directory (the attempt), found {scan.top!r} and {name.parts[0]!r}")
    return "/".join(name.parts[1:])


def _bound(scan: _Scan, rel: str, size: int) -> None:
    """A file member's size against the manifest (once known) and the running total."""
    if scan.allowed is not None:
        if rel not in scan.allowed:
            raise BundleError(f"member {rel[:200]!r} is not listed in the archive's manifest.json (refused before extraction)")
        if size > scan.allowed[rel]:
            raise BundleError(f"member {rel[:200]!r} is {size} bytes in the archive, more than the {scan.allowed[rel]} "
                              "its manifest lists (refused before extraction)")
    if scan.total > scan.budget:
        raise BundleError(
            f"the archive's files pass ds4ci's extraction budget of {scan.budget} bytes at member {rel[:200]!r} "
            f"({size} bytes, {scan.total} in all so far; the manifest's sizes never raise the budget): refused before "
            "extraction; verify the bundle directory instead, or raise the budget with --max-extract-mib"
        )


def _limits(tar: tarfile.TarFile, member: tarfile.TarInfo) -> dict[str, int]:
    """Every path the manifest member allows, with its size (the manifest, results.json and attestation.json included)."""
    if member.size > MAX_MANIFEST_BYTES:
        raise BundleError(f"manifest.json is {member.size} bytes, over the {MAX_MANIFEST_BYTES}-byte limit")
    handle = tar.extractfile(member)
    data = handle.read(MAX_MANIFEST_BYTES + 1) if handle is not None else b""
    try:
        doc = strictjson.loads(data, "manifest.json")
    except ValueError as exc:
        raise BundleError(f"the archive's manifest.json is not JSON ({str(exc)[:200]})") from exc
    entries = doc.get("evidence") if isinstance(doc, dict) else None
    if not isinstance(entries, list):
        raise BundleError("the archive's manifest.json is not a manifest (no evidence list)")
    allowed = {MANIFEST: member.size, RESULTS: MAX_RESULTS_BYTES, ATTESTATION: MAX_ATTESTATION_BYTES}
    for entry in entries:
        path, size = (entry.get("path"), entry.get("size")) if isinstance(entry, dict) else (None, None)
        if not isinstance(path, str) or not isinstance(size, int) or isinstance(size, bool) or size < 0 or path in allowed:
            raise BundleError(f"the archive's manifest.json has a malformed or repeated entry {str(entry)[:200]}")
        allowed[path] = size
    return allowed


def _scan_headers(tar: tarfile.TarFile, budget: int) -> _Scan:
    """Pass one: every header checked, nothing written."""
    scan = _Scan(budget=budget)
    while (member := tar.next()) is not None:
        if len(scan.members) >= MAX_MEMBERS:
            raise BundleError(f"more than {MAX_MEMBERS} members: more than an evidence bundle holds")
        rel = _relative(scan, member)
        scan.members.append(member)
        if not member.isfile():
            continue
        if rel in scan.files:
            raise BundleError(f"member {rel[:200]!r} appears twice in the archive")
        scan.files[rel] = member.size
        scan.total += member.size
        if scan.allowed is None:
            if rel != MANIFEST:
                raise BundleError(
                    f"the archive's first file is {rel[:200]!r}, not manifest.json (gate --bundle-out writes the "
                    "manifest first, so every later member is bounded by it): verify the bundle directory instead, "
                    "or archive it again with gate --bundle-out"
                )
            scan.allowed = _limits(tar, member)
        _bound(scan, rel, member.size)
    if scan.top is None or scan.allowed is None:
        raise BundleError("the archive holds no manifest.json below one top directory: not an evidence bundle")
    return scan


def _not_an_archive(path: Path) -> str | None:
    """Why a file given as a bundle is plainly not one (a results.json, or not gzip), else None."""
    with path.open("rb") as fh:
        start = fh.read(64)
    if start.startswith(GZIP_MAGIC):
        return None
    if path.name.endswith(".json") or start.lstrip().startswith(b"{"):
        return (f"{path} is a JSON file (a results.json?), not an evidence bundle: give the bundle directory "
                "(runs/<id> or failed/<id> under --evidence-dir) or the .tar.gz from gate --bundle-out")
    return (f"{path} is not an evidence bundle (neither a directory nor a .tar.gz): give the bundle directory "
            "or the .tar.gz from gate --bundle-out")


def _extract(path: Path, scratch: Path, budget: int) -> str:
    """Check the archive's headers, then extract it into ``scratch``; the top directory's name."""
    try:
        reason = _not_an_archive(path)
        if reason is not None:
            raise BundleError(reason)
        with tarfile.open(path, "r:gz") as tar:
            scan = _scan_headers(tar, budget)
            for member in scan.members:
                member.mode = 0o700 if member.isdir() else 0o600
            if hasattr(tarfile, "data_filter"):  # Python >= 3.10.12 / 3.11.4: a second line of defence
                tar.extractall(scratch, members=scan.members, filter="data")
            else:  # pragma: no cover - older patch releases; the members were checked above
                tar.extractall(scratch, members=scan.members)  # noqa: S202
    except (tarfile.TarError, OSError, EOFError, ValueError, zlib.error) as exc:  # zlib: a corrupt deflate stream
        raise BundleError(f"{path} is not a readable .tar.gz ({str(exc)[:200]})") from exc
    assert scan.top is not None  # _scan_headers refuses an archive without one
    return scan.top


@contextlib.contextmanager
def opened(path: Path, budget: int = EXTRACT_BUDGET_BYTES) -> Iterator[Path]:
    """The bundle's attempt directory: the directory itself, or an archive's safe extraction (at most
    ``budget`` bytes of files, whatever its manifest says)."""
    if path.is_dir():
        yield path
        return
    if not path.is_file():
        raise UsageError(f"bundle {path} does not exist (expected an evidence directory or a .tar.gz of one)")
    scratch = Path(tempfile.mkdtemp(prefix="ds4ci-bundle-"))
    try:
        top = _extract(path, scratch, budget)
        yield scratch / top
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
