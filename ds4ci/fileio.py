"""Small file helpers shared by several modules, and the one way to open a file pull-request code wrote."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import platform
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


# openat2(2): the kernel resolves every component itself, beneath the folder, refusing any link on the way
# (Linux 5.6 and later; elsewhere, or where a seccomp filter answers ENOSYS, the O_NOFOLLOW walk below)
_SYS_OPENAT2 = {"x86_64": 437, "aarch64": 437, "armv7l": 437, "ppc64le": 437, "s390x": 437, "riscv64": 437}
_RESOLVE_NO_SYMLINKS, _RESOLVE_BENEATH = 0x04, 0x08
_openat2_missing: list[bool] = []  # [True] once the kernel said ENOSYS: the walk from then on


class _OpenHow(ctypes.Structure):
    _fields_ = (("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64))


def _openat2(dir_fd: int, rel: str, flags: int) -> int | None:
    """``rel`` opened beneath ``dir_fd`` by openat2 with no link followed; None where the kernel lacks openat2."""
    number = _SYS_OPENAT2.get(platform.machine())
    if number is None or _openat2_missing:
        return None
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    how = _OpenHow(flags & ~os.O_NOFOLLOW, 0, _RESOLVE_BENEATH | _RESOLVE_NO_SYMLINKS)  # O_NOFOLLOW would open a last link
    fd = libc.syscall(ctypes.c_long(number), ctypes.c_int(dir_fd), os.fsencode(rel), ctypes.byref(how),
                      ctypes.c_size_t(ctypes.sizeof(how)))
    if fd >= 0:
        return int(fd)
    err = ctypes.get_errno()
    if err == errno.ENOSYS:
        _openat2_missing.append(True)
        return None
    raise OSError(err, os.strerror(err), rel)


def _plain_parts(parts: Sequence[str]) -> None:
    if not parts or any(p in ("", ".", "..") or "/" in p or "\0" in p for p in parts):
        raise ValueError(f"not a plain relative path: {'/'.join(parts)[:200]!r}")


def open_beneath(dir_fd: int, parts: Sequence[str], flags: int) -> int:
    """``parts`` (plain names: no ``.``, ``..``, ``/`` or empty part) opened with ``flags`` beneath the folder
    ``dir_fd``, no symbolic link followed anywhere on the way, the last component included: openat2 with
    ``RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`` where the kernel has it, else one component at a time with
    ``O_NOFOLLOW``. A link fails the open (``ELOOP``, or ``ENOTDIR`` for a link where a folder was needed)."""
    _plain_parts(parts)
    fd = _openat2(dir_fd, "/".join(parts), flags)
    if fd is None:
        here = dir_fd
        try:
            for part in parts[:-1]:
                child = os.open(part, _DIR_FLAGS, dir_fd=here)
                if here != dir_fd:
                    os.close(here)
                here = child
            fd = os.open(parts[-1], flags | os.O_NOFOLLOW, dir_fd=here)
        finally:
            if here != dir_fd:
                os.close(here)
    if flags & os.O_PATH and stat.S_ISLNK(os.fstat(fd).st_mode):  # O_PATH | O_NOFOLLOW opens the link itself
        os.close(fd)
        raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), "/".join(parts))
    return fd


def open_file_beneath(dir_fd: int, parts: Sequence[str]) -> int:
    """A file for reading beneath the folder ``dir_fd``, no link followed, without blocking on a FIFO."""
    return open_beneath(dir_fd, parts, _FILE_FLAGS)


def open_below(root: Path, parts: Sequence[str]) -> int:
    """``root/parts[0]/.../parts[-1]`` opened for reading beneath ``root``, no symbolic link followed
    (:func:`open_beneath`): a link anywhere below ``root`` fails the open (``ELOOP``, ``ENOTDIR``) instead of
    being followed. ``root`` itself is opened as named. ``O_NONBLOCK``: a FIFO cannot hang the open; the caller
    checks the descriptor's type."""
    _plain_parts(parts)
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        return open_file_beneath(fd, parts)
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


def tree_of(path: Path, trees: Sequence[Path], *, inclusive: bool = False) -> Path | None:
    """The outermost of ``trees`` that holds ``path`` (or is it, when ``inclusive``), both made absolute and
    normalised, never resolved; or None."""
    plain = Path(os.path.normpath(path.absolute()))
    tops = [Path(os.path.normpath(tree.absolute())) for tree in trees]
    holding = [top for top in tops if plain.is_relative_to(top) and (inclusive or plain != top)]
    return min(holding, key=lambda top: len(top.parts)) if holding else None


def open_regular(path: Path, trees: Sequence[Path] = ()) -> tuple[int, str]:
    """``path`` opened for reading as a regular file: (descriptor, blocking; its real path).

    Inside one of ``trees`` (folders pull-request code wrote: the checkout, the build's folder) it is opened beneath
    the outermost tree holding it, no symbolic link followed, the tree's root included (:func:`open_beneath`). Elsewhere (a path a
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
            root = os.open(top, _DIR_FLAGS)  # the tree's own root is no link either
            try:
                fd = open_file_beneath(root, rel.parts)
            finally:
                os.close(root)
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
        found = obstacle(top, Path(os.path.normpath(path.absolute())))
        if found is not None:
            return f"{path}: {found[1]}" if found[0] != "link" else found[1]
    return f"{path} cannot be opened ({exc.strerror or exc})"


def obstacle(top: Path, path: Path) -> tuple[str, str] | None:
    """The first component from ``top`` (itself included) down to ``path`` that is a symbolic link, missing, or
    not a folder where one is needed, as (``"link"``, ``"missing"`` or ``"kind"``; words that say so), else None.
    Only names are looked at (``lstat``), never a byte of a file."""
    here = top
    for part in ("", *path.relative_to(top).parts):
        here = here / part if part else here
        try:
            st = here.lstat()
        except OSError:
            return "missing", f"{here} does not exist"
        if stat.S_ISLNK(st.st_mode):
            return "link", f"{here} is a symbolic link (to {_target(here)}); a file pull-request code made is never followed"
        if here != path and not stat.S_ISDIR(st.st_mode):
            return "kind", f"{here} is {file_kind(st.st_mode)}, not a folder"
    return None


def _target(link: Path) -> str:
    try:
        said = str(link.readlink())
    except OSError:
        return "a target that cannot be read"
    shown = neutralise(said[:_SHOWN_TARGET]).replace("\n", "\\n")
    return shown + ("…" if len(said) > _SHOWN_TARGET else "")
