"""The service's private checkout of the pinned head, and the trusted config from the trusted branch's tip.

Nothing of the caller's worktree is used: git fetches the head's objects from the caller's
repository into a repository the service just made (``git upload-pack`` reads the caller's
repository as data and honours none of its hooks or programs) and checks the head out there. The
config file is read from the tip of the trusted branch of the trusted repository (the service's own
``--trusted-repo``/``--trusted-branch``, fetched for every request), never from a commit the caller
names: the caller's base must be a commit of that branch (for the revisions record) but chooses
nothing about the settings. Git runs with no system config, a global config of the service's own and
hooks turned off.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Final

from ds4ci.errors import NoVerdictError, UsageError
from ds4ci.service.protocol import GateRequest, RequestRefused

TRUSTED_NAME: Final = ".ds4ci-trusted.toml"
MAX_CONFIG: Final = 1024 * 1024
GIT_TIMEOUT_S: Final = 900.0
_TRUSTED_REF: Final = "refs/ds4ci/trusted"


@dataclass(frozen=True)
class Trusted:
    """The trusted repository (path or URL) and branch: the config comes from its tip, every base lies on it."""

    repository: str
    branch: str


@dataclass(frozen=True)
class Prepared:
    source: Path  # the private checkout of the head
    config: Path  # the trusted branch tip's config, written beside where the head keeps its own
    config_sha256: str
    config_commit: str  # the trusted branch's tip the config was read from
    note: str | None  # said when the head's config differs (the head's is not used)


def trusted_source(repository: str | None, branch: str) -> Trusted:
    """``--trusted-repo``/``--trusted-branch``: required, since the gate's config is read from nowhere else."""
    if not repository or repository.startswith("-") or any(c in repository for c in "\0\n\r"):
        found = "none" if repository is None else repr(repository)
        raise UsageError(f"--trusted-repo: expected the repository (a path or URL the service's user can fetch) whose "
                         "--trusted-branch holds the gate's config, e.g. --trusted-repo https://github.com/OWNER/REPO.git "
                         f"--trusted-branch main; found {found}. The service reads the config only from that "
                         "branch's tip, never from a commit a caller names (docs/service.md)")
    if (not branch or branch.startswith(("-", "/")) or branch.endswith(("/", ".lock")) or ".." in branch
            or any(c in branch for c in " ~^:?*[\\\0\n\r\t")):
        raise UsageError(f"--trusted-branch: expected a branch name such as main, found {branch!r}")
    return Trusted(repository, branch)


def git_env(home: Path, *safe: str) -> dict[str, str]:
    """git with no system config, a global config of the service's own (``home/gitconfig``), no prompts, hooks and
    fsmonitor off; ``safe``: the caller's repository and a trusted repository given as a path (owned by other
    users), which git otherwise refuses to read.

    The settings sit in a config file, not in ``GIT_CONFIG_COUNT``: git clears the command-line config for the
    ``upload-pack`` it starts on a local repository, and that is the process that checks the owner."""
    def quoted(value: str) -> str:
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'

    folders = [path.rstrip("/") for path in safe if path.startswith("/")]
    lines = ["[safe]", *(f"\tdirectory = {quoted(name)}" for folder in folders for name in (folder, folder + "/.git")),
             "[protocol \"file\"]", "\tallow = always", "[core]", "\thooksPath = /dev/null", "\tfsmonitor = false",
             "[advice]", "\tdetachedHead = false", "[init]", "\tdefaultBranch = ds4ci"]
    config = home / "gitconfig"
    config.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "LC_ALL": "C",
            "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": str(config), "GIT_TERMINAL_PROMPT": "0"}


def _git(repo: Path, env: dict[str, str], *args: str, refuse: str | None = None) -> bytes:
    """git's stdout; a failure is RequestRefused(``refuse`` + git's words) when the caller's input caused it."""
    try:
        proc = subprocess.run(["git", "-C", str(repo), *args], env=env, capture_output=True, check=False,
                              timeout=GIT_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as exc:
        raise NoVerdictError(f"git {args[0]} ran past {GIT_TIMEOUT_S:.0f} s") from exc
    except OSError as exc:
        raise NoVerdictError(f"cannot run git: {exc}") from exc
    if proc.returncode != 0:
        said = proc.stderr.decode("utf-8", "replace").strip()[-1500:]
        if refuse is not None:
            raise RequestRefused(f"{refuse}: git {args[0]} exited {proc.returncode}: {said}")
        raise NoVerdictError(f"git {' '.join(args[:2])} exited {proc.returncode}: {said}")
    return proc.stdout


def _config_path(name: str) -> PurePosixPath:
    path = PurePosixPath(name)
    if path.is_absolute() or not path.parts or any(p in ("..", ".", "") for p in path.parts):
        raise UsageError(f"--config-path: expected a relative path inside the repository, found {name!r}")
    return path


def prepare(request: GateRequest, work: Path, config_name: str, trusted: Trusted) -> Prepared:
    """Fetch, verify and check out ``request.head`` under ``work/src``; the trusted tip's config beside its own."""
    import hashlib

    rel = _config_path(config_name)
    source = work / "src"
    source.mkdir(mode=0o700)
    env = git_env(work, request.checkout, trusted.repository)
    _git(source, env, "init", "-q")
    origin = request.checkout  # a local path: git's local transport (upload-pack), no URL decoding
    _git(source, env, "fetch", "-q", "--no-tags", "--no-recurse-submodules", origin, request.head,
         refuse=f"cannot fetch {request.head} from {request.checkout}")
    _git(source, env, "fetch", "-q", "--no-tags", "--no-recurse-submodules", trusted.repository,
         f"+refs/heads/{trusted.branch}:{_TRUSTED_REF}")
    tip = _git(source, env, "rev-parse", "--verify", f"{_TRUSTED_REF}^{{commit}}").decode().strip()
    _git(source, env, "merge-base", "--is-ancestor", request.base, tip,
         refuse=f"base {request.base} is not a commit of the trusted branch {trusted.branch} of "
                f"{trusted.repository}; the base must be a commit of that branch")
    for sha in (request.head, request.base):
        found = _git(source, env, "rev-parse", "--verify", "--quiet", f"{sha}^{{commit}}",
                     refuse=f"{sha} is not a commit of {request.checkout}").decode().strip()
        if found != sha:
            raise RequestRefused(f"{sha} resolves to {found} in the fetched objects; expected the commit itself")
    _git(source, env, "checkout", "-q", "--detach", request.head)
    data = _trusted_config(source, env, tip, rel)
    target = _write_beside(source, rel.parent, data)
    head_blob = subprocess.run(["git", "-C", str(source), "rev-parse", "--verify", "--quiet", f"{request.head}:{rel}"],
                               env=env, capture_output=True, check=False, timeout=GIT_TIMEOUT_S).stdout.strip()
    tip_blob = _git(source, env, "rev-parse", f"{tip}:{rel}").strip()
    note = None
    if head_blob != tip_blob:
        note = (f"this pull request's {rel} differs from the trusted branch's; this run uses the trusted settings of "
                f"{trusted.branch} at {tip[:12]}, not the pull request's (a change takes effect once merged)")
    return Prepared(source, target, hashlib.sha256(data).hexdigest(), tip, note)


def _trusted_config(source: Path, env: dict[str, str], tip: str, rel: PurePosixPath) -> bytes:
    spec = f"{tip}:{rel}"
    where = f"the trusted branch's tip {tip[:12]}"
    kind = _git(source, env, "cat-file", "-t", spec, refuse=f"{where} has no {rel}").decode().strip()
    if kind != "blob":
        raise RequestRefused(f"{rel} in {where} is a {kind}; expected a regular file")
    mode = _git(source, env, "ls-tree", tip, "--", str(rel)).decode().split(" ", 1)[0]
    if mode not in ("100644", "100755"):
        raise RequestRefused(f"{rel} in {where} has mode {mode}; expected a regular file, not a link")
    size = int(_git(source, env, "cat-file", "-s", spec))
    if size > MAX_CONFIG:
        raise RequestRefused(f"{rel} in {where} is {size} bytes; expected at most {MAX_CONFIG}")
    return _git(source, env, "cat-file", "blob", spec)


def _write_beside(source: Path, folder: PurePosixPath, data: bytes) -> Path:
    """Write ``data`` as TRUSTED_NAME in ``folder`` of the checkout, following no link the head's tree holds:
    each folder is opened with O_NOFOLLOW, and whatever the head put at the name is removed first."""
    fd = os.open(source, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        for part in folder.parts:
            try:
                inner = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            except FileNotFoundError:
                os.mkdir(part, 0o700, dir_fd=fd)
                inner = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            except OSError as exc:
                raise RequestRefused(f"{folder} in the head's tree is not a folder (a link?): {exc}") from exc
            os.close(fd)
            fd = inner
        try:
            os.unlink(TRUSTED_NAME, dir_fd=fd)
        except FileNotFoundError:
            pass
        except IsADirectoryError as exc:
            raise RequestRefused(f"the head's tree holds a folder at {folder / TRUSTED_NAME}; expected nothing "
                                 "there") from exc
        out = os.open(TRUSTED_NAME, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=fd)
        with os.fdopen(out, "wb") as fh:
            fh.write(data)
    finally:
        os.close(fd)
    return source.joinpath(*folder.parts, TRUSTED_NAME)
