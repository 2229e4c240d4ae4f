"""One scratch worktree for every step of a bisect: its HEAD moves, its build folder stays.

``git worktree add --detach`` in a temporary folder (never the user's working tree), then each step checks its
commit out there with ``--force`` (what a build changed in tracked files is reset; untracked build outputs stay,
so an in-tree build folder builds incrementally). The trusted config (the user's, never a step's own) is read
once, before the first step, and kept as a private copy beside the tree, never inside it: no step's build can
rewrite what the next step's gate reads. Each step's gate is pointed at the folder of the tree where the
repository keeps its config (``--config-base``, no link in the step's tree followed), so the config's relative
paths (``[build] cwd``, prompts) are read in the step's tree. On the way out, however it ends, the worktree is
removed and the folder deleted.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path, PurePosixPath
from types import TracebackType

from ds4ci.bisect.history import GIT_TIMEOUT_S
from ds4ci.errors import NoVerdictError, UsageError
from ds4ci.fileio import write_new
from ds4ci.runner import revisions


def toplevel(repo: Path) -> Path:
    proc = revisions.git(repo, ["rev-parse", "--show-toplevel"], GIT_TIMEOUT_S)
    if proc.returncode != 0:
        raise UsageError(f"{repo} is not a git work tree: {proc.stderr.decode('utf-8', 'replace').strip()[:300]}")
    return Path(proc.stdout.decode("utf-8", "replace").strip())


def config_folder(repo: Path, config: Path, base: Path | None = None) -> PurePosixPath:
    """Where the config's relative paths start in the repository, e.g. ``.`` or ``ci``: ``base``
    (``--config-base``), else the config file's own folder, which must then lie inside the repository."""
    top = toplevel(repo).resolve()
    where = base.resolve() if base is not None else config.resolve().parent
    try:
        return PurePosixPath(where.relative_to(top).as_posix())
    except ValueError:
        if base is not None:
            raise UsageError(f"--config-base {base} is outside the repository {top}: bisect reads the config's relative "
                             "paths ([build] cwd, prompts) in each step's checkout of it") from None
        raise UsageError(f"the config {config} is outside the repository {top}: bisect reads its relative paths "
                         "([build] cwd, prompts) in each step's checkout, so name the repository's folder they are "
                         "relative to with --config-base (e.g. --config-base .)") from None


def _folder_in_tree(tree: Path, folder: PurePosixPath) -> Path:
    """``tree/folder``, each component a real folder (made when the commit lacks it), none a link the commit holds."""
    fd = os.open(tree, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        for part in (p for p in folder.parts if p != "."):
            try:
                inner = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            except FileNotFoundError:
                os.mkdir(part, 0o755, dir_fd=fd)
                inner = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            except OSError as exc:
                raise NoVerdictError(f"{folder} in this commit's tree is not a folder (a link?): {exc.strerror}") from exc
            os.close(fd)
            fd = inner
    finally:
        os.close(fd)
    return tree.joinpath(*folder.parts)


class ScratchTree:
    """``with ScratchTree(repo, config_bytes, folder) as tree: tree.checkout(sha)``."""

    def __init__(self, repo: Path, config: bytes, folder: PurePosixPath) -> None:
        self.repo, self.config, self.folder = repo, config, folder
        self.temp = Path(tempfile.mkdtemp(prefix="ds4ci-bisect-"))
        self.path = self.temp / "tree"
        self.config_file = self.temp / "trusted" / "ds4ci.toml"  # beside the tree, never in it
        self.added = False

    def __enter__(self) -> ScratchTree:
        try:
            write_new(self.config_file, self.config)
            self._git(self.repo, "worktree", "add", "--detach", "--no-checkout", "--end-of-options", str(self.path),
                      "HEAD")
        except BaseException:
            shutil.rmtree(self.temp, ignore_errors=True)
            raise
        self.added = True
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        try:
            if self.added:
                revisions.git(self.repo, ["worktree", "remove", "--force", "--force", str(self.path)], GIT_TIMEOUT_S)
        finally:
            shutil.rmtree(self.temp, ignore_errors=True)
            if self.added:
                revisions.git(self.repo, ["worktree", "prune"], GIT_TIMEOUT_S)

    def checkout(self, sha: str) -> Path:
        """Move the tree to ``sha``; the folder of it the trusted config's relative paths start from."""
        self._git(self.path, "checkout", "--quiet", "--force", "--detach", sha)
        return _folder_in_tree(self.path, self.folder)

    @staticmethod
    def _git(where: Path, *args: str) -> None:
        proc = revisions.git(where, list(args), GIT_TIMEOUT_S)
        if proc.returncode != 0:
            raise NoVerdictError(f"git {' '.join(args[:2])} failed in {where}: "
                                 f"{proc.stderr.decode('utf-8', 'replace').strip()[:300]}")
