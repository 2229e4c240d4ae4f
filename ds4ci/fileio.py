"""Small file helpers shared by several modules, and the one way to open a file pull-request code wrote."""

from __future__ import annotations

import errno
import os
import stat
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from ds4ci.textsafe import neutralise


def write_text_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` via a synced temporary file and a rename: never half-written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}-", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        Path(tmp).replace(path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def quit_on_broken_pipe(code: int) -> NoReturn:
    """Standard output's reader went away (``ds4ci-sim --list-faults | head``): exit quietly, no traceback.

    Standard output is pointed at /dev/null first, so the interpreter's own flush at exit cannot fail again.
    """
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    sys.exit(code)


# --- opening files that pull-request code wrote, never following a link it made --------------------------------

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY
_SHOWN_TARGET = 200  # characters of a link's target a message shows


class NotOpened(Exception):
    """A file that was not opened, and what was found where it was named: its kind, never a byte of it."""


def open_below(root: Path, parts: Sequence[str]) -> int:
    """``root/parts[0]/.../parts[-1]`` opened for reading one component at a time, each from the folder before it
    with ``O_NOFOLLOW``: a symbolic link anywhere below ``root`` fails the open (``ELOOP``, ``ENOTDIR``) instead of
    being followed. ``root`` itself is opened as named. ``O_NONBLOCK``: a FIFO cannot hang the open; the caller
    checks the descriptor's type. ``parts`` are plain names (no ``.``, ``..``, ``/`` or empty part)."""
    if not parts or any(p in ("", ".", "..") or "/" in p or "\0" in p for p in parts):
        raise ValueError(f"not a plain relative path: {'/'.join(parts)[:200]!r}")
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in parts[:-1]:
            child = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = child
        return os.open(parts[-1], _FILE_FLAGS, dir_fd=fd)
    finally:
        os.close(fd)


def file_kind(mode: int) -> str:
    """What a file of this ``st_mode`` is, in words ("a directory", "a FIFO", ...)."""
    for test, name in ((stat.S_ISREG, "a regular file"), (stat.S_ISDIR, "a directory"), (stat.S_ISLNK, "a symbolic link"),
                       (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def tree_of(path: Path, trees: Sequence[Path]) -> Path | None:
    """The first of ``trees`` that holds ``path`` (both made absolute and normalised, never resolved), or None."""
    plain = Path(os.path.normpath(path.absolute()))
    for tree in trees:
        top = Path(os.path.normpath(tree.absolute()))
        if plain.is_relative_to(top) and plain != top:
            return top
    return None


def open_regular(path: Path, trees: Sequence[Path] = ()) -> tuple[int, str]:
    """``path`` opened for reading as a regular file: (descriptor, blocking; its real path).

    Inside one of ``trees`` (folders pull-request code wrote: the checkout, the build's folder) it is opened below
    that tree one component at a time, no symbolic link followed (:func:`open_below`). Elsewhere (a path a
    trusted config names, where a runner's own layout may use links such as ``/opt/engine/current``) it is
    resolved first, then opened without following a link. NotOpened says what was found instead (a link and
    where it points, a folder, a FIFO, nothing), never what a file holds."""
    top = tree_of(path, trees)
    try:
        if top is None:
            real = os.path.realpath(path, strict=True)
            fd = os.open(real, _FILE_FLAGS)
        else:
            rel = Path(os.path.normpath(path.absolute())).relative_to(top)
            real = os.path.join(os.path.realpath(top), rel)  # noqa: PTH118 - no link below the tree: this is its place
            fd = open_below(top, rel.parts)
    except OSError as exc:
        raise NotOpened(_found_instead(path, top, exc)) from exc
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotOpened(f"{path} is {file_kind(mode)}, not a regular file")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd, real


def _found_instead(path: Path, top: Path | None, exc: OSError) -> str:
    """Why ``path`` did not open: the first component below ``top`` that is a link, missing or not a folder."""
    if exc.errno == errno.ELOOP and top is None:
        return f"{path} is a symbolic link loop (a link that leads back to itself); refused"
    if top is not None:
        plain = Path(os.path.normpath(path.absolute()))
        here = top
        for part in plain.relative_to(top).parts:
            here = here / part
            try:
                st = here.lstat()
            except OSError:
                return f"{path}: {here} does not exist"
            if stat.S_ISLNK(st.st_mode):
                return f"{here} is a symbolic link (to {_target(here)}); a file pull-request code made is never followed"
            if here != plain and not stat.S_ISDIR(st.st_mode):
                return f"{path}: {here} is {file_kind(st.st_mode)}, not a folder"
    return f"{path} cannot be opened ({exc.strerror or exc})"


def _target(link: Path) -> str:
    try:
        said = str(link.readlink())
    except OSError:
        return "a target that cannot be read"
    shown = neutralise(said[:_SHOWN_TARGET]).replace("\n", "\\n")
    return shown + ("…" if len(said) > _SHOWN_TARGET else "")
