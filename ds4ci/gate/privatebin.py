"""The server binary that starts is the binary that was hashed: a private, read-only copy.

``server_bin`` lies where pull-request code wrote it (the build's output folder, the checkout). Once
its pin is verified, the gate copies those bytes, hashing them as they are copied, into a folder of
its own (``mkdtemp``, mode 0700, outside every folder a PR process is shown writable), makes the copy
read-only, and starts the copy, never the original. The copy's SHA-256 must equal the recorded
identity, and it is hashed again right before each server starts, so a file swapped after hashing
(by anything: a process outside the sandbox, a server at the fallback levels, which can write what the
runner's user can) is refused instead of run. Each server's ``lifecycle.json`` records the path and
the SHA-256 checked right before it started; ``command.json`` names the copy as ``argv[0]``.

The copy has the original's file name in a folder of its own, so a server that finds files relative
to its own path (an ``$ORIGIN`` run path, ``/proc/self/exe``) finds them through absolute paths only.

The folder (``ds4ci-server-bin-<pid>-<random>``) is told to the sandbox watchdog before it is made, so
it is removed when ds4ci ends, a SIGKILL included; and each copy first sweeps the folders of this user
whose ds4ci (the pid in the name) is gone, in case a watchdog was killed too.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ds4ci.errors import NoVerdictError
from ds4ci.fileio import NotOpened, open_regular
from ds4ci.gate import views
from ds4ci.options.config import GateConfig
from ds4ci.records import Identities
from ds4ci.runner import filelimit
from ds4ci.runner.identity import hash_file
from ds4ci.supervisor import watchdog

_CHUNK = 8 * 1024 * 1024
_HEAD = 256  # bytes read to tell an ELF executable or a script's #! line
ELF_MAGIC = b"\x7fELF"
_PREFIX = "ds4ci-server-bin-"
_NAME = re.compile(rf"{_PREFIX}([0-9]+)-[0-9a-f]+")


@dataclass(frozen=True)
class PrivateBinary:
    """The copy that is started, and the SHA-256 its bytes must have."""

    path: Path
    sha256: str

    @property
    def folder(self) -> Path:
        return self.path.parent

    def verified(self) -> str:
        """Hash the copy again (right before a start); its SHA-256, or NoVerdictError when it changed."""
        found = hash_file(self.path, filelimit.SERVER_BIN, "server_bin")
        if found != self.sha256:
            raise NoVerdictError(
                f"the private copy {self.path} of server_bin changed after it was hashed (expected sha256 "
                f"{self.sha256}, found {found}); refusing to start it"
            )
        return found

    def remove(self) -> None:
        """Delete the copy and its folder (at the end of the run)."""
        remove(self.folder)


def copy_server(cfg: GateConfig, identities: Identities | None) -> PrivateBinary:
    """The configured server's private copy: opened inside the folders pull-request code wrote without following a
    link, and run only when it is a program (:func:`copy`)."""
    return copy(cfg.server_bin.path, identities, views.pr_trees(cfg), views.interpreters(cfg))


def copy(
    source: Path, identities: Identities | None, trees: Sequence[Path] = (), interpreters: Sequence[str] | None = None,
) -> PrivateBinary:
    """Copy ``source`` into a fresh private folder, hashing what is copied; NoVerdictError unless it has
    the SHA-256 of the ``server_bin`` identity recorded when the pins were verified.

    ``source`` is opened once (inside ``trees``, the folders pull-request code wrote: no link followed) and
    checked, hashed and copied from that one descriptor. With ``interpreters`` (None: ds4ci's own Python runs
    it) it must be a program: an ELF executable, or a script whose ``#!`` names one of them."""
    hashed = identities["server_bin"] if identities is not None else None
    if hashed is None:
        raise NoVerdictError("server_bin was not hashed: no server can start")
    expected_sha256 = hashed["sha256"]
    sweep_orphans()
    folder = watchdog.new_private_folder(f"{_PREFIX}{os.getpid()}-")
    target = folder / source.name
    try:
        digest = _copy_hashing(source, target, trees, interpreters)
    except BaseException:
        remove(folder)
        raise
    if digest != expected_sha256:
        remove(folder)
        raise NoVerdictError(
            f"server_bin {source} changed after it was hashed (recorded sha256 {expected_sha256}, its bytes now "
            f"{digest}); refusing to start it"
        )
    return PrivateBinary(target, digest)


def not_a_program(head: bytes, interpreters: Sequence[str]) -> str | None:
    """Why a file that starts with ``head`` is no server to run, in words that quote none of its bytes; None: an ELF
    executable, or a script (``#!``) whose interpreter is one of ``interpreters`` (the trusted config's)."""
    if head.startswith(ELF_MAGIC):
        return None
    if not head.startswith(b"#!"):
        return "is not an ELF executable nor a script (#!): no program; refused before it runs"
    words = head[2:].split(b"\n", 1)[0].split()
    if words and words[0].decode("utf-8", errors="replace") in interpreters:
        return None
    allowed = ", ".join(interpreters) or "none: ELF executables only"
    return (f"is a script whose #! interpreter is not one gate.server_interpreters names ({allowed}); "
            "refused before it runs")


def _copy_hashing(source: Path, target: Path, trees: Sequence[Path], interpreters: Sequence[str] | None) -> str:
    try:
        src, _ = open_regular(source, trees)
    except NotOpened as exc:
        raise NoVerdictError(f"server_bin: {exc}; refusing to start it") from exc
    try:
        limit = filelimit.SERVER_BIN
        deadline = limit.checked("server_bin", source, src)  # a sparse file is never copied densely
        refused = not_a_program(os.pread(src, _HEAD, 0), interpreters) if interpreters is not None else None
        if refused is not None:
            raise NoVerdictError(f"server_bin {source} {refused}")
        dst = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o700)
        digest = hashlib.sha256()
        copied = 0
        try:
            while chunk := os.read(src, _CHUNK):
                limit.past(deadline, "server_bin", source, copied)
                copied += len(chunk)
                digest.update(chunk)
                view = memoryview(chunk)
                while view:
                    view = view[os.write(dst, view):]
            os.fchmod(dst, 0o500)  # read and run: not even ds4ci writes it again
        finally:
            os.close(dst)
    finally:
        os.close(src)
    return digest.hexdigest()


def sweep_orphans() -> list[Path]:
    """Remove every private folder of this user whose ds4ci process is gone; the folders removed."""
    swept: list[Path] = []
    with contextlib.suppress(OSError):
        for entry in os.scandir(tempfile.gettempdir()):
            found = _NAME.fullmatch(entry.name)
            if found is None or not entry.is_dir(follow_symlinks=False):
                continue
            if entry.stat(follow_symlinks=False).st_uid != os.geteuid() or _alive(int(found.group(1))):
                continue
            watchdog.remove_scratch(Path(entry.path))
            swept.append(Path(entry.path))
    return swept


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: alive, someone else's
        return True
    return True


def remove(folder: Path) -> None:
    """Delete a private folder (its read-only copy included); nothing to do when it is gone."""
    with contextlib.suppress(OSError):
        folder.chmod(0o700)
    shutil.rmtree(folder, ignore_errors=True)
