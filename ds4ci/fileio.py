"""Small file helpers shared by several modules, and the one way to open a file pull-request code wrote."""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import BinaryIO, NoReturn

from ds4ci.textsafe import neutralise


def write_text_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` via a synced temporary file and a rename: never half-written (:func:`write_new`)."""
    write_new(path, text.encode("utf-8"))


class NotWritten(OSError):
    """An output file that was not written, and why (a link or another kind of file at its name, a linked folder)."""


_WRITE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NOCTTY


def write_new(path: Path, data: bytes) -> None:
    """``data`` as ``path``, never through a link (:func:`write_with`)."""
    write_with(path, lambda fh: fh.write(data))


def write_with(path: Path, fill: Callable[[BinaryIO], object]) -> None:
    """What ``fill`` writes to the open file, as ``path``, never through a link: the one way ds4ci writes a file
    of its own.

    The folder is made when missing, then opened with ``O_NOFOLLOW`` (a link there is refused); what is at the
    name must be nothing or a regular file (a symbolic link, even a dangling one, is refused: ``NotWritten``).
    The bytes go to a new temporary file beside it (``O_CREAT | O_EXCL | O_NOFOLLOW``), are synced, and the file
    is renamed over the name, so a reader sees the old file or the whole new one, and a link made at the name
    meanwhile is replaced, never written through."""
    folder = path.absolute().parent
    folder.mkdir(parents=True, exist_ok=True)
    try:
        dir_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        if folder.is_symlink():
            raise NotWritten(errno.ELOOP, f"{folder} is a symbolic link (to {_target(folder)}); ds4ci writes its "
                             "output only into a real folder") from exc
        raise
    try:
        try:
            st = os.stat(path.name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            pass
        else:
            if not stat.S_ISREG(st.st_mode):
                said = f" (to {_target(path)})" if stat.S_ISLNK(st.st_mode) else ""
                raise NotWritten(errno.EEXIST, f"{path} is {file_kind(st.st_mode)}{said}; ds4ci replaces only a "
                                 "regular file there and never writes through a link")
        tmp = f".{path.name[:100]}.{os.urandom(6).hex()}.tmp"
        fd = os.open(tmp, _WRITE_FLAGS, 0o644, dir_fd=dir_fd)
        try:
            with os.fdopen(fd, "wb") as fh:
                fill(fh)
                fh.flush()
                os.fsync(fh.fileno())
            os.rename(tmp, path.name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dir_fd)
            raise
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def checkout_holding(path: Path) -> Path | None:
    """The git work tree ``path`` would be written in: the nearest folder above it (it included) holding a
    ``.git`` entry (a folder, or a worktree's file), found without running git; None outside every checkout.
    The path is made absolute and normalised, never resolved: the names are looked at as given."""
    here = Path(os.path.normpath(path.absolute()))
    for folder in (here, *here.parents):
        if os.path.lexists(folder / ".git"):
            return folder
    return None


def refuse_inside_checkout(path: Path, option: str, checkouts: Sequence[Path] = ()) -> None:
    """``option`` names where ds4ci writes its own output: refused (``UsageError``) inside a git checkout or one of
    ``checkouts`` (the tree under test, the config's folder): pull-request code writes there, and a link it left
    at the name, or a file it rewrites later, would decide what is written or what a later step reads."""
    from ds4ci.errors import UsageError

    plain = Path(os.path.normpath(path.absolute()))
    inside = next((Path(os.path.normpath(c.absolute())) for c in checkouts
                   if plain.is_relative_to(os.path.normpath(c.absolute()))), None)
    inside = inside or checkout_holding(plain.parent)
    if inside is not None:
        raise UsageError(f"{option} {path}: inside the checkout {inside}, where pull-request code writes; ds4ci "
                         "writes its own output outside every checkout (under GitHub Actions, in $RUNNER_TEMP)")


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
