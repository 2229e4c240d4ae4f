"""Exactly which commits a gate result is for: head, base, upstream, merge base, synthetic merge.

A green status is attached to a head SHA, but what lands is the merge of that head into the
base branch. Recording the merge base and a synthetic merge (``git merge-tree --write-tree``,
which merges without touching the work tree or the index) lets a reviewer see whether the
evidence still describes what would be merged, and which paths would conflict.

Refs may come from workflow inputs, so git always runs without a shell, with ``-C repo``, no
terminal prompts, a timeout, and refs that cannot be read as options.

git runs outside the sandbox, as the gate's user, on a repository that pull-request code may
have written to (a build writes its checkout), and several git config keys name programs that
git runs. So git never runs with what the repository, the host or the job configure beyond what
it reads as data (``safe_env``, ``SAFE_CONFIG``): no system or global config, no inherited
``GIT_*`` variable but the discovery limits (``GIT_DIR``, ``GIT_CONFIG_*``, ... are dropped), no replace refs,
no fsmonitor, hooks, pager, signature check, lazy fetch or submodule recursion, and every filter
driver the repository's own config defines set to none; a repository config that names a merge
driver (``git merge-tree`` would run it) or includes another file (which no one has read) is
refused (``program_keys``). The gate also records revisions before any pull-request process runs.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Callable
from pathlib import Path

from ds4ci.errors import NoVerdictError, UsageError
from ds4ci.records import Revision, RevisionsRecord, SyntheticMerge

MAX_TEXT = 4096  # the schema's "text" limit
MAX_CONFLICTS = 1000  # the schema's limit on listed conflicting paths
_SHA1 = re.compile(r"^[0-9a-f]{40}$")
# Control characters never appear in a usable ref and would garble messages and logs.
_BAD_REF_CHARS = re.compile(r"[\x00-\x1f\x7f]")


# Command-line config outranks every config file: each of these keys names a program git would run
# (or turns on something that does), or changes which objects a commit id shows.
SAFE_CONFIG = (
    "core.fsmonitor=false", "core.hooksPath=/dev/null", "core.pager=cat", "core.attributesFile=/dev/null",
    "core.untrackedCache=false", "log.showSignature=false", "protocol.allow=never", "submodule.recurse=false",
    "status.submoduleSummary=false", "credential.helper=", "gc.auto=0", "maintenance.auto=false",
)
# Keys of a repository config whose programs cannot be switched off from the command line.
_REFUSED_KEYS = re.compile(r"^(include\.|includeif\.|merge\..+\.driver$)", re.IGNORECASE)
# Inherited GIT_* variables that only limit where git looks for a repository (never what it runs).
_DISCOVERY_LIMITS = frozenset({"GIT_CEILING_DIRECTORIES", "GIT_DISCOVERY_ACROSS_FILESYSTEM"})
_FILTER_KEYS = re.compile(r"^filter\.(.+)\.(clean|smudge|process|required)$", re.IGNORECASE)


def safe_env() -> dict[str, str]:
    """The environment git runs in: the job's, without a ``GIT_*`` variable (but the discovery limits), and no
    system or global config."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_") or k in _DISCOVERY_LIMITS}
    env.update({
        "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_ATTR_NOSYSTEM": "1",
        "GIT_NO_REPLACE_OBJECTS": "1", "GIT_NO_LAZY_FETCH": "1", "GIT_PAGER": "cat", "PAGER": "cat",
        "GIT_TERMINAL_PROMPT": "0",  # never wait for credentials on a runner
        "GIT_OPTIONAL_LOCKS": "0",  # read-only inspection must not take the index lock
        "LC_ALL": "C",  # stable messages to recognise
    })
    return env


def safe_args(extra: tuple[str, ...] = ()) -> list[str]:
    """``-c`` options for every item of ``SAFE_CONFIG`` and ``extra``."""
    return [arg for item in (*SAFE_CONFIG, *extra) for arg in ("-c", item)]


def _run(argv: list[str], timeout_s: float, what: str) -> subprocess.CompletedProcess[bytes]:
    try:
        return subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, env=safe_env(), timeout=timeout_s,
                              check=False)
    except FileNotFoundError as exc:
        raise UsageError("git is not installed or not on PATH; ds4ci revisions needs git >= 2.38") from exc
    except subprocess.TimeoutExpired as exc:
        raise NoVerdictError(f"git {what} did not finish within {timeout_s:g} s") from exc


def _config_files(repo_dir: Path, timeout_s: float) -> list[Path]:
    """The repository's own config files (its common dir's ``config``, a worktree's ``config.worktree``)."""
    proc = _run(["git", *safe_args(), "-C", str(repo_dir), "rev-parse", "--path-format=absolute",
                 "--git-common-dir", "--git-dir"], timeout_s, f"rev-parse in {repo_dir}")
    lines = _text(proc.stdout).splitlines()
    if proc.returncode != 0 or len(lines) != 2:
        return []  # not a repository: the caller's own git call says so
    return [Path(lines[0]) / "config", Path(lines[1]) / "config.worktree"]


def program_keys(repo_dir: Path, timeout_s: float) -> tuple[str, ...]:
    """``-c`` items that switch off every filter driver the repository's config defines.

    Each config file is read as data (``git config --file F --no-includes``, outside any repository);
    a merge driver or an include is refused (UsageError), since nothing on the command line turns it off.
    """
    off: dict[str, None] = {}
    for path in _config_files(repo_dir, timeout_s):
        if not path.is_file():
            continue
        proc = _run(["git", *safe_args(), "-C", "/", "config", "--file", str(path), "--no-includes",
                     "--name-only", "--list"], timeout_s, f"config --file {path}")
        if proc.returncode != 0:
            raise UsageError(f"cannot read the git config {path} as data: {_text(proc.stderr).strip()[:300]}")
        for name in _text(proc.stdout).splitlines():
            if _REFUSED_KEYS.match(name):
                raise UsageError(
                    f"the git config {path} sets {name[:200]}: git would run a program it names (or read a file "
                    "no one checked) outside the sandbox; ds4ci does not run git there: use a fresh checkout "
                    "(actions/checkout with persist-credentials: false writes neither)"
                )
            found = _FILTER_KEYS.match(name)
            if found and ("=" in found.group(1) or not found.group(1).isprintable()):
                raise UsageError(f"the git config {path} names a filter driver {found.group(1)[:200]!r} that no "
                                 "command-line value can name, so none can switch it off; ds4ci does not run git there")
            if found:
                driver = found.group(1)
                off.update(dict.fromkeys(f"filter.{driver}.{key}=" for key in ("clean", "smudge", "process")))
                off[f"filter.{driver}.required=false"] = None
    return tuple(off)


def git(
    repo_dir: Path, args: list[str], timeout_s: float, *, drivers_off: bool = True
) -> subprocess.CompletedProcess[bytes]:
    """Run ``git -C repo_dir ARGS`` (no shell, stdin closed, ``safe_env`` and ``SAFE_CONFIG``, and unless
    ``drivers_off`` is False, for a command that reads no file content, every filter driver the repository
    defines off); the caller judges the exit code."""
    extra = program_keys(repo_dir, timeout_s) if drivers_off else ()
    argv = ["git", *safe_args(extra), "-C", str(repo_dir), *args]
    return _run(argv, timeout_s, f"{' '.join(args[:2])} in {repo_dir}")


def _text(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


def _clip(text: str) -> str:
    return text if len(text) <= MAX_TEXT else text[: MAX_TEXT - 1] + "…"


def validate_ref(ref: str, what: str) -> str:
    if not isinstance(ref, str) or not ref.strip():
        raise UsageError(f"{what}: expected a git ref such as HEAD or origin/main, found {ref!r}")
    if ref.startswith("-"):
        raise UsageError(f"{what}: a ref may not start with '-' (it would be read as an option), found {ref!r}")
    if _BAD_REF_CHARS.search(ref) or len(ref) > 1024:
        raise UsageError(f"{what}: expected a git ref, found {ref!r} (control characters or over 1024 chars)")
    return ref


def check_repo(repo_dir: Path, timeout_s: float) -> None:
    if not repo_dir.is_dir():
        raise UsageError(f"repository directory {repo_dir} does not exist or is not a directory")
    proc = git(repo_dir, ["rev-parse", "--git-dir"], timeout_s)
    if proc.returncode != 0:
        detail = _text(proc.stderr).strip().splitlines()
        raise UsageError(
            f"{repo_dir} is not a usable git repository ({detail[0] if detail else f'exit {proc.returncode}'}); "
            "point --repo-dir (or gate.source_dir) at the checkout of the code under test"
        )


def resolve(repo_dir: Path, ref: str, what: str, timeout_s: float) -> Revision:
    """The schema's ``revision`` object for one ref: {"ref", "sha", "subject"}."""
    validate_ref(ref, what)
    proc = git(repo_dir, ["rev-parse", "--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}"], timeout_s)
    sha = _text(proc.stdout).strip()
    if proc.returncode != 0 or not _SHA1.match(sha):
        raise UsageError(
            f"{what} {ref!r} does not name a commit in {repo_dir}; fetch it first "
            "(actions/checkout needs fetch-depth: 0 for base and upstream refs)"
        )
    shown = git(repo_dir, ["show", "-s", "--format=%s", sha], timeout_s)
    if shown.returncode != 0:
        raise UsageError(f"cannot read commit {sha} ({what}) in {repo_dir}: {_text(shown.stderr).strip()[:300]}")
    return {"ref": _clip(ref), "sha": sha, "subject": _clip(_text(shown.stdout).strip())}


def merge_base(repo_dir: Path, a: str, b: str, timeout_s: float) -> str | None:
    """Best common ancestor, or None when there is none (unrelated or shallow histories)."""
    proc = git(repo_dir, ["merge-base", a, b], timeout_s)
    sha = _text(proc.stdout).strip()
    if proc.returncode == 0 and _SHA1.match(sha):
        return sha
    if proc.returncode == 1:
        return None
    raise UsageError(f"git merge-base {a} {b} failed in {repo_dir}: {_text(proc.stderr).strip()[:300]}")


def current_branch(repo_dir: Path, timeout_s: float) -> str | None:
    """The branch HEAD is on (``feature/x``), or None when HEAD is detached (a CI checkout of a PR)."""
    proc = git(repo_dir, ["symbolic-ref", "--quiet", "--short", "HEAD"], timeout_s)
    branch = _text(proc.stdout).strip()
    return _clip(branch) if proc.returncode == 0 and branch and not _BAD_REF_CHARS.search(branch) else None


def not_computed() -> SyntheticMerge:
    return {"status": "not_computed", "tree": None, "conflicts": []}


def synthetic_merge(repo_dir: Path, head_sha: str, other_sha: str, timeout_s: float) -> SyntheticMerge:
    """Merge ``other`` into ``head`` in memory only: clean with its tree, or the conflicting paths."""
    proc = git(
        repo_dir,
        ["merge-tree", "--write-tree", "--name-only", "--no-messages", "-z", head_sha, other_sha],
        timeout_s,
    )
    stderr = _text(proc.stderr)
    if proc.returncode not in (0, 1):
        if "usage: git merge-tree" in stderr or "unknown option" in stderr:
            return not_computed()  # git older than 2.38 has no --write-tree; record that honestly
        raise UsageError(f"git merge-tree failed in {repo_dir} (exit {proc.returncode}): {stderr.strip()[:300]}")
    # -z output: "<tree>\0" then, on conflict, "<path>\0" per conflicting path (listed once each).
    fields = proc.stdout.split(b"\0")
    tree = _text(fields[0]).strip()
    if not _SHA1.match(tree):
        raise UsageError(f"git merge-tree printed no tree id in {repo_dir}; found {_text(proc.stdout[:200])!r}")
    if proc.returncode == 0:
        return {"status": "clean", "tree": tree, "conflicts": []}
    paths = sorted({_clip(_text(f)) for f in fields[1:] if f})
    if len(paths) > MAX_CONFLICTS:
        paths = [*paths[: MAX_CONFLICTS - 1], f"(and {len(paths) - MAX_CONFLICTS + 1} more conflicting paths)"]
    # The tree of a conflicted merge holds conflict markers: it is not a candidate for the result.
    return {"status": "conflict", "tree": None, "conflicts": paths}


def is_work_tree(directory: Path, timeout_s: float = 10.0) -> bool:
    """Whether ``directory`` is inside a git work tree (False when git is missing or says no)."""
    try:
        proc = git(directory, ["rev-parse", "--is-inside-work-tree"], timeout_s, drivers_off=False)
    except (UsageError, NoVerdictError):
        return False
    return proc.returncode == 0 and _text(proc.stdout).strip() == "true"


def has_commit(directory: Path, timeout_s: float = 10.0) -> bool:
    """Whether HEAD names a commit (False in a repository with no commit yet, e.g. right after ``git init``)."""
    try:
        proc = git(directory, ["rev-parse", "--verify", "--quiet", "HEAD^{commit}"], timeout_s, drivers_off=False)
    except (UsageError, NoVerdictError):
        return False
    return proc.returncode == 0


def is_dirty(repo_dir: Path, timeout_s: float) -> bool | None:
    """Uncommitted changes to tracked files (untracked files do not count); None if git cannot tell."""
    proc = git(repo_dir, ["status", "--porcelain", "--untracked-files=no", "--ignore-submodules=all", "--no-renames"],
               timeout_s)
    return bool(proc.stdout.strip()) if proc.returncode == 0 else None


def collect(
    repo_dir: Path,
    *,
    head_ref: str = "HEAD",
    base_ref: str | None,
    upstream_ref: str | None,
    timeout_s: float = 60.0,
) -> RevisionsRecord:
    """The schema's ``revisions`` object for ``repo_dir``.

    merge_base and the synthetic merge pair head with base, or with upstream when no base is
    given; with neither they are null / not_computed. last_validated_predecessor is left null
    (publishing fills it from earlier statuses).
    """
    check_repo(repo_dir, timeout_s)
    head = resolve(repo_dir, head_ref, "head ref", timeout_s)
    if head_ref == "HEAD":
        head["ref"] = current_branch(repo_dir, timeout_s) or head_ref
    base = resolve(repo_dir, base_ref, "base ref", timeout_s) if base_ref is not None else None
    upstream = resolve(repo_dir, upstream_ref, "upstream ref", timeout_s) if upstream_ref is not None else None
    other = base if base is not None else upstream
    mb: str | None = None
    merge = not_computed()
    if other is not None:
        mb = merge_base(repo_dir, head["sha"], other["sha"], timeout_s)
        # Without a common ancestor (unrelated or too shallow a clone) a merge says nothing useful.
        if mb is not None:
            merge = synthetic_merge(repo_dir, head["sha"], other["sha"], timeout_s)
    return {
        "head": head,
        "base": base,
        "upstream": upstream,
        "merge_base": mb,
        "synthetic_merge": merge,
        "last_validated_predecessor": None,
        "dirty": is_dirty(repo_dir, timeout_s),
    }


def checkout_here(progress: Callable[[str], None]) -> Path | None:
    """The working folder when it is a git checkout with a commit; else None, said through ``progress`` at once."""
    here = Path.cwd()
    if is_work_tree(here) and has_commit(here):
        return here
    progress(f"revisions: {here} is no git checkout with a commit: no head is recorded")
    return None
