"""The one way a trusted step reaches a path inside the pull request's folders: opened once, no link followed.

A path a trusted setting names is either inside one of the *trees* (the checkout and every folder
pull-request code may write: the build's folder, the built server's folder, a check's folder and its
report's folder, ``[sandbox] rw_paths``) or outside all of them (the runner's own layout: models, a
toolchain, an absolute ``ro_paths`` entry).

- Inside a tree it is opened beneath the outermost tree that holds it, one open for the whole path
  (``fileio.open_beneath``: openat2 with ``RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS``, or an ``O_NOFOLLOW``
  walk where the kernel lacks openat2). A symbolic link anywhere on the way, the tree's own root and the
  last component included, is refused (:class:`PathRefused` names the setting, the path and the link).
- Outside every tree it is resolved where it stands (a runner may keep models in a cache of links) and
  opened at its resolved place without following a link.

Either way the caller gets an ``O_PATH`` descriptor (:class:`Opened`): the sandbox binds that descriptor
(bubblewrap's ``--bind-fd`` / ``--ro-bind-fd``) and a trusted read or write goes on from it, so the
pull request cannot change what a name means between the moment it is checked and the moment it is used.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ds4ci.fileio import obstacle, open_beneath, tree_of
from ds4ci.supervisor.child import SupervisorError

_PATH_FLAGS = os.O_PATH | os.O_CLOEXEC
_ROOT_FLAGS = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class PathRefused(SupervisorError):
    """A configured path that was not opened: a link on the way, missing, or not a folder where one is needed."""


@dataclass(frozen=True)
class Opened:
    """A configured path, open: ``fd`` an ``O_PATH`` descriptor the caller closes (:meth:`close`)."""

    key: str  # the setting that named it ("build.cwd", "sandbox.ro_paths", ...)
    named: Path  # as the setting named it, made absolute (``.`` and ``..`` taken out by name)
    fd: int

    @property
    def real(self) -> Path:
        """Where the descriptor lies now (what a bind of it shows)."""
        return Path(f"/proc/self/fd/{self.fd}").readlink()

    def is_dir(self) -> bool:
        return os.path.isdir(f"/proc/self/fd/{self.fd}")  # noqa: PTH112 - the descriptor's own file

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)


def plain(path: Path) -> Path:
    """``path`` made absolute with ``.`` and ``..`` taken out by name only (how the configuration spelt it)."""
    return Path(os.path.normpath(os.path.abspath(path)))  # noqa: PTH100


def _refused(key: str, named: Path, top: Path | None, exc: OSError) -> PathRefused:
    found = obstacle(top, named) if top is not None else None
    if found is not None:
        kind, words = found
        if kind == "link":
            words = words.split(";", 1)[0] + ("; a link inside the pull request's folders never chooses what ds4ci "
                                              "opens or what the sandbox shows")
        return PathRefused(f"{key} = {named}: {words}")
    if exc.errno == errno.ELOOP:
        return PathRefused(f"{key} = {named}: a symbolic link loop; refused")
    return PathRefused(f"{key} = {named} cannot be opened ({exc.strerror or exc})")


def _missing(exc: OSError, named: Path, top: Path | None) -> bool:
    if exc.errno != errno.ENOENT:
        return False
    found = obstacle(top, named) if top is not None else None
    return found is None or found[0] == "missing"


def open_path(key: str, path: Path, trees: Sequence[Path], *, missing_ok: bool = False) -> Opened | None:
    """``path`` opened (``O_PATH``) as the module's text says; None when it is missing and ``missing_ok``.
    PathRefused names ``key`` and what was found instead."""
    named = plain(path)
    top = tree_of(named, trees, inclusive=True)
    try:
        if top is None:
            fd = os.open(os.path.realpath(named, strict=True), _PATH_FLAGS | os.O_NOFOLLOW)
        else:
            root = os.open(top, _ROOT_FLAGS)  # the tree's own root is no link either
            if named == top:
                fd = root
            else:
                try:
                    fd = open_beneath(root, named.relative_to(top).parts, _PATH_FLAGS)
                finally:
                    os.close(root)
    except OSError as exc:
        if missing_ok and _missing(exc, named, top):
            return None
        raise _refused(key, named, top, exc) from exc
    return Opened(key, named, fd)


def check_path(key: str, path: Path, trees: Sequence[Path]) -> str | None:
    """Why ``path`` could not be opened as far as it exists (a link on the way), or None: the check made before
    any pull-request process starts, for a folder the build or a check may create later."""
    try:
        opened = open_path(key, path, trees, missing_ok=True)
    except PathRefused as exc:
        return str(exc)
    if opened is not None:
        opened.close()
    return None


def make_folder(key: str, path: Path, trees: Sequence[Path]) -> None:
    """``path`` created where missing, each component beneath the outermost tree holding it, none a link
    (outside every tree: ``mkdir -p`` at its resolved place). PathRefused when a component is a link or a file."""
    named = plain(path)
    top = tree_of(named, trees, inclusive=True)
    if top is None:
        Path(os.path.realpath(named)).mkdir(parents=True, exist_ok=True)
        return
    try:
        here = os.open(top, _ROOT_FLAGS)
    except OSError as exc:
        raise _refused(key, named, top, exc) from exc
    try:
        for part in named.relative_to(top).parts:
            with contextlib.suppress(FileExistsError):
                os.mkdir(part, 0o755, dir_fd=here)
            try:
                inner = open_beneath(here, (part,), _ROOT_FLAGS)
            except OSError as exc:
                raise _refused(key, named, top, exc) from exc
            os.close(here)
            here = inner
    finally:
        os.close(here)
