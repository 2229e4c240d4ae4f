"""What ``ds4ci init`` arranges in the adopter's git repository besides its own files: the ``.gitignore``
entries (the evidence folder, the simulator's files, the folder ``[build]`` writes), and the refusal to
write a ``[build]`` whose output folder holds files git tracks (ignoring it would hide them, and a
committed build folder breaks the next CI build: "The current CMakeCache.txt directory … is different").
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path, PurePosixPath

from ds4ci.errors import UsageError

SHOWN_TRACKED = 5  # tracked files named in the refusal


def build_folder(server_bin: str) -> str | None:
    """The top folder (or file) below the repository that the build writes, from ``[build].server_bin``
    (``build/bin/dflash_server`` -> ``build/``); None when the binary lies outside the repository."""
    path = PurePosixPath(server_bin)
    if path.is_absolute() or not path.parts or path.parts[0] in ("..", ".") or "${" in server_bin:
        return None
    return f"{path.parts[0]}/" if len(path.parts) > 1 else path.parts[0]


def tracked(directory: Path, entry: str) -> list[str]:
    """The files git tracks under ``entry`` in the repository at ``directory`` (none outside a git repository)."""
    try:
        proc = subprocess.run(["git", "-C", str(directory), "ls-files", "-z", "--", entry.rstrip("/")],
                              capture_output=True, check=False, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise UsageError(f"cannot ask git which files {entry} holds in {directory}: {exc}") from None
    if proc.returncode != 0:  # not a git repository: nothing is tracked
        return []
    return [name for name in proc.stdout.decode("utf-8", "replace").split("\0") if name]


def refuse_tracked_build_folder(directory: Path, entry: str) -> None:
    found = tracked(directory, entry)
    if found:
        more = len(found) - SHOWN_TRACKED
        shown = ", ".join(found[:SHOWN_TRACKED]) + (f" and {more} more" if more > 0 else "")
        raise UsageError(
            f"[build] would write {entry}, which holds files git tracks ({shown}): init ignores the build's output "
            "folder, and that would hide them. Expected an output folder of its own: name a binary in one "
            "(--server-bin build/bin/dflash_server with --build-command), or `git rm -r --cached "
            f"{entry.rstrip('/')}` if those files are build output; nothing was written"
        )


def _ignored(present: Sequence[str], entry: str) -> bool:
    bare = entry.strip("/")
    return any(line.strip() in (bare, f"/{bare}", f"{bare}/", f"/{bare}/") for line in present)


def ignore(directory: Path, entries: Sequence[str], written: list[str]) -> None:
    """Add each entry (a path below ``directory``: ``name/`` a folder) to its ``.gitignore``, anchored at the root,
    unless a line already names it."""
    gitignore = directory / ".gitignore"
    text = gitignore.read_text(encoding="utf-8") if gitignore.is_file() else ""
    present = text.splitlines()
    wanted = [f"/{e}" for e in entries if not _ignored(present, e)]
    if not wanted:
        return
    prefix = "" if not text or text.endswith("\n") else "\n"
    lines = "".join(f"{e}\n" for e in wanted)
    gitignore.write_text(f"{text}{prefix}# ds4ci: evidence of every attempt (large), simulator files, build output\n"
                         f"{lines}", encoding="utf-8")
    written.append(f"{gitignore} (+ {' '.join(wanted)})")
