"""One scratch worktree for every step of a bisect: its HEAD moves, its build folder stays.

``git worktree add --detach`` in a temporary folder (never the user's working tree), then each step checks its
commit out there with ``--force`` (what a build changed in tracked files is reset; untracked build outputs stay,
so an in-tree build folder builds incrementally). The trusted config (the user's, never a step's own) is
written beside where the repository keeps its config, as the service does (``TRUSTED_NAME``, no link in the
step's tree followed), so its relative paths (``[build] cwd``, prompts) are read in the step's tree. On the way
out, however it ends, the worktree is removed and the folder deleted.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path, PurePosixPath
from types import TracebackType

from ds4ci.bisect.history import GIT_TIMEOUT_S
from ds4ci.errors import NoVerdictError, UsageError
from ds4ci.runner import revisions
from ds4ci.service.checkout import _write_beside


def toplevel(repo: Path) -> Path:
    proc = revisions.git(repo, ["rev-parse", "--show-toplevel"], GIT_TIMEOUT_S)
    if proc.returncode != 0:
        raise UsageError(f"{repo} is not a git work tree: {proc.stderr.decode('utf-8', 'replace').strip()[:300]}")
    return Path(proc.stdout.decode("utf-8", "replace").strip())


def config_folder(repo: Path, config: Path) -> PurePosixPath:
    """Where the config sits in the repository (its paths are relative to it), e.g. ``.`` or ``ci``."""
    top = toplevel(repo).resolve()
    try:
        return PurePosixPath(config.resolve().parent.relative_to(top).as_posix())
    except ValueError:
        raise UsageError(f"the config {config} is outside the repository {top}: bisect reads its relative paths "
                         "([build] cwd, prompts) in each step's checkout, so it must sit inside the repository") from None


class ScratchTree:
    """``with ScratchTree(repo, config_bytes, folder) as tree: tree.checkout(sha)``."""

    def __init__(self, repo: Path, config: bytes, folder: PurePosixPath) -> None:
        self.repo, self.config, self.folder = repo, config, folder
        self.temp = Path(tempfile.mkdtemp(prefix="ds4ci-bisect-"))
        self.path = self.temp / "tree"
        self.added = False

    def __enter__(self) -> ScratchTree:
        try:
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
        """Move the tree to ``sha`` and write the trusted config into it; the config's path."""
        self._git(self.path, "checkout", "--quiet", "--force", "--detach", sha)
        return _write_beside(self.path, self.folder, self.config)

    @staticmethod
    def _git(where: Path, *args: str) -> None:
        proc = revisions.git(where, list(args), GIT_TIMEOUT_S)
        if proc.returncode != 0:
            raise NoVerdictError(f"git {' '.join(args[:2])} failed in {where}: "
                                 f"{proc.stderr.decode('utf-8', 'replace').strip()[:300]}")
