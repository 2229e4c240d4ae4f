"""Evidence directories: one fresh directory per attempt, a manifest, and atomic promotion.

Layout under ``--evidence-dir``::

    attempts/<id>/   work in progress (what a kill -9 leaves behind, never mistaken for a result)
    runs/<id>/       promoted attempts whose verdict was pass
    failed/<id>/     promoted attempts whose verdict was fail or error (diagnostics kept)
    .gitignore       ``*``: the folder ignores itself (written once, never replaced, in no manifest)

Evidence is sealed in parts as the gate goes (``Seals``): when the build ends, when the checks end,
and when each server stops, every file written so far is hashed and the part's folders are closed.
The manifest is built only if every sealed file still has the size and SHA-256 it had then and no
file appeared in a closed folder: nothing a later process does can change what was judged, and the
signature over the manifest covers only bytes sealed when the process that wrote them had ended.

An attempt is promoted by a single ``rename`` that refuses to replace an existing path
(``renameat2(RENAME_NOREPLACE)`` on Linux), so two gates running at once in one directory, or a
re-run, can never overwrite earlier evidence; ids are unique per attempt anyway.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import secrets
import stat
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ds4ci.errors import NoVerdictError
from ds4ci.evidence.convert import CURRENT
from ds4ci.records import FileIdentity

ATTEMPTS = "attempts"
RUNS = "runs"
FAILED = "failed"
MANIFEST = "manifest.json"
MANIFEST_SCHEMA = "ds4ci/manifest/v1"  # with schema_version: the evidence schema it was sealed with (convert.CURRENT)
RESULTS = "results.json"
GITIGNORE = ".gitignore"  # the evidence folder's own, outside every attempt
ATTESTATION = "attestation.json"  # the runner key's signature (evidence/attestation.py), beside the manifest
MAX_ATTESTATION_BYTES = 1 << 20
_AT_FDCWD = -100
_RENAME_NOREPLACE = 1


def write_json(path: Path, doc: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2, sort_keys=True, allow_nan=False) + "\n", encoding="utf-8")


def rename_noreplace(src: Path, dst: Path) -> None:
    """Atomically move src to dst, failing with FileExistsError if dst exists (even an empty dir)."""
    libc = ctypes.CDLL(None, use_errno=True)
    renameat2 = getattr(libc, "renameat2", None)
    if renameat2 is not None:
        rc = renameat2(_AT_FDCWD, os.fsencode(src), _AT_FDCWD, os.fsencode(dst), _RENAME_NOREPLACE)
        if rc == 0:
            return
        err = ctypes.get_errno()
        if err == errno.EEXIST:
            raise FileExistsError(errno.EEXIST, "destination exists", str(dst))
        if err not in (errno.EINVAL, errno.ENOSYS):  # filesystem without NOREPLACE support: fall back
            raise OSError(err, os.strerror(err), str(dst))
    # Fallback: a fresh empty placeholder made with mkdir (exclusive) reserves the name, then
    # rename replaces only that empty placeholder that we created ourselves.
    dst.mkdir()
    src.rename(dst)


@dataclass(frozen=True)
class Attempt:
    root: Path  # the --evidence-dir
    attempt_id: str
    path: Path  # attempts/<id>

    def final_path(self, verdict: str) -> Path:
        return self.root / (RUNS if verdict == "pass" else FAILED) / self.attempt_id


def ours_only(evidence_dir: Path) -> bool:
    """Whether ``evidence_dir`` is absent or holds nothing but the gate's own folders (so it may ignore itself)."""
    try:
        return all(entry.name in (ATTEMPTS, RUNS, FAILED) for entry in evidence_dir.iterdir())
    except FileNotFoundError:
        return True
    except OSError:
        return False


def ignore_itself(evidence_dir: Path) -> None:
    """``.gitignore`` holding ``*`` in an evidence folder of the gate's own, so ``git add -A`` never takes it.

    It sits beside attempts/, runs/ and failed/, outside every sealed attempt (so in no manifest). An
    existing one is never replaced, and a folder holding anything else is left as it is."""
    if (evidence_dir / GITIGNORE).exists() or (evidence_dir / GITIGNORE).is_symlink() or not ours_only(evidence_dir):
        return
    try:
        fd = os.open(evidence_dir / GITIGNORE, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    except FileExistsError:  # another gate wrote it meanwhile
        return
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write("# made by ds4ci: this evidence folder ignores itself\n*\n")


def start_attempt(evidence_dir: Path, runner: str) -> Attempt:
    """Create a fresh, uniquely named attempt directory (never reuses an existing one)."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    attempt_id = f"{stamp}-{runner}-{os.getpid()}-{secrets.token_hex(4)}"
    path = evidence_dir / ATTEMPTS / attempt_id
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        ignore_itself(evidence_dir)
        path.mkdir()
    except OSError as exc:
        raise NoVerdictError(
            f"cannot create the attempt directory {path}: {exc.strerror or exc}; "
            "--evidence-dir must be a writable directory"
        ) from exc
    return Attempt(evidence_dir, attempt_id, path)


def regular_files(root: Path) -> tuple[dict[str, Path], list[str]]:
    """Every regular file under root by relative path, and a problem for every entry that is not one.

    Symbolic links are never followed (into the manifest, an archive, or a verification): a process
    that planted one in the evidence could otherwise make ds4ci seal or read a file outside it.
    """
    files: dict[str, Path] = {}
    problems: list[str] = []
    for directory, dirnames, filenames in os.walk(root, followlinks=False):
        for name in sorted([*dirnames, *filenames]):
            path = Path(directory) / name
            rel = path.relative_to(root).as_posix()
            mode = path.lstat().st_mode
            if stat.S_ISLNK(mode):
                problems.append(f"{rel} is a symbolic link (never followed)")
            elif stat.S_ISREG(mode):
                files[rel] = path
            elif not stat.S_ISDIR(mode):
                problems.append(f"{rel} is not a regular file")
    return files, problems


def _evidence_files(attempt_dir: Path) -> dict[str, Path]:
    found, problems = regular_files(attempt_dir)
    if problems:
        raise NoVerdictError("the evidence holds entries that are not regular files: " + "; ".join(problems[:10]))
    return {rel: path for rel, path in sorted(found.items()) if rel not in (MANIFEST, RESULTS)}


@dataclass(frozen=True)
class Seals:
    """Evidence sealed before the attempt is: each file's size and SHA-256 when the part that wrote it
    ended, and the folders nothing may be added to since (see the module's docstring)."""

    files: dict[str, tuple[int, str, str]] = field(default_factory=dict)  # path -> (size, sha256, when)
    closed: dict[str, str] = field(default_factory=dict)  # folder -> when

    def close(self, attempt_dir: Path, when: str, folders: Sequence[str] = (), only: bool = False) -> None:
        """Seal every file not sealed yet (``when``: what had just ended), and close ``folders``.

        ``only``: seal the files under ``folders`` alone (arms running side by side: another arm's files still grow).
        """
        for rel, path in _evidence_files(attempt_dir).items():
            if only and not any(rel.startswith(folder + "/") for folder in folders):
                continue
            if rel not in self.files:
                self.files[rel] = (path.stat().st_size, _hash_file(path), when)
        for folder in folders:
            self.closed.setdefault(folder, when)

    def problems(self, found: dict[str, tuple[int, str]]) -> list[str]:
        """What changed since it was sealed, given every evidence file's (size, sha256) now."""
        out = []
        for rel, (size, sha, when) in self.files.items():
            now = found.get(rel)
            if now is None:
                out.append(f"{rel} (sealed when {when}) is gone")
            elif now != (size, sha):
                out.append(f"{rel} (sealed when {when}: {size} bytes, sha256 {sha[:16]}…) is now {now[0]} bytes, "
                           f"sha256 {now[1][:16]}…")
        for rel in found:
            folder = next((f for f in self.closed if rel.startswith(f + "/")), None)
            if folder is not None and rel not in self.files:
                out.append(f"{rel} appeared in {folder}/ after it was sealed (when {self.closed[folder]})")
        return out


def build_manifest(attempt_dir: Path, inputs: Sequence[FileIdentity], seals: Seals | None = None) -> dict[str, Any]:
    """Path, size and SHA-256 of every input and of every evidence file (except the manifest and results).

    With ``seals``: NoVerdictError unless every file sealed earlier is unchanged and no closed folder grew.
    """
    found = {rel: (path.stat().st_size, _hash_file(path)) for rel, path in _evidence_files(attempt_dir).items()}
    files = [{"path": rel, "size": size, "sha256": sha} for rel, (size, sha) in found.items()]
    changed = (seals or Seals()).problems(found)
    if changed:
        raise NoVerdictError(
            f"the evidence changed after it was sealed, so no verdict can stand ({len(changed)} change(s)): "
            + "; ".join(changed[:10]) + "; the attempt is kept as it is"
        )
    return {"schema": MANIFEST_SCHEMA, "schema_version": CURRENT, "inputs": inputs, "evidence": files}


def seal(attempt: Attempt, inputs: Sequence[FileIdentity], seals: Seals | None = None) -> str:
    """Write manifest.json into the attempt and return its SHA-256 (the evidence bundle digest)."""
    manifest_path = attempt.path / MANIFEST
    write_json(manifest_path, build_manifest(attempt.path, inputs, seals))
    return _hash_file(manifest_path)


def sealed_files(directory: Path) -> list[str]:
    """The files of a sealed attempt: the manifest's evidence plus the manifest and results themselves."""
    manifest = json.loads((directory / MANIFEST).read_text(encoding="utf-8"))
    signed = [ATTESTATION] if (directory / ATTESTATION).is_file() else []
    return [*(entry["path"] for entry in manifest["evidence"]), MANIFEST, RESULTS, *signed]


def promote(attempt: Attempt, verdict: str) -> Path:
    """Move the finished attempt to runs/ or failed/ in one rename that never replaces anything."""
    final = attempt.final_path(verdict)
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
        rename_noreplace(attempt.path, final)
    except FileExistsError as exc:
        raise NoVerdictError(f"refusing to promote {attempt.path}: {final} already exists") from exc
    except OSError as exc:
        raise NoVerdictError(
            f"could not promote {attempt.path} to {final}: {exc.strerror or exc}; the attempt stays where it is"
        ) from exc
    return final


def _hash_file(path: Path) -> str:
    from ds4ci.runner.identity import hash_file  # at sealing time: thread pools and the cache code are not needed before

    return hash_file(path)
