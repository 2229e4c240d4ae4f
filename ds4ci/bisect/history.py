"""The range a bisect searches: the good and the bad end resolved, and the first-parent commits between them.

git runs through ``ds4ci.runner.revisions.git`` (no shell, no config but the repository's data, no hook, filter
or pager). The good end defaults to the merge base of the bad end with the base ref (``--base-ref``, else the
config's ``gate.base_ref``), the bad end to HEAD: on a pull request's checkout, its own commits.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from ds4ci.errors import UsageError
from ds4ci.records import BisectCommit
from ds4ci.runner import revisions

GIT_TIMEOUT_S: Final = 120.0
MAX_COMMITS: Final = 100_000


def ends(repo: Path, good: str | None, bad: str | None, base_ref: str | None) -> tuple[str, str]:
    """The good and bad ends as commit SHAs."""
    revisions.check_repo(repo, GIT_TIMEOUT_S)
    bad_sha = revisions.resolve(repo, bad or "HEAD", "--bad", GIT_TIMEOUT_S)["sha"]
    if good is not None:
        return revisions.resolve(repo, good, "--good", GIT_TIMEOUT_S)["sha"], bad_sha
    if base_ref is None:
        raise UsageError("no --good and no base ref to take the merge base with: give --good REV, or --base-ref REF "
                         "(or gate.base_ref in the config)")
    base_sha = revisions.resolve(repo, base_ref, "base ref", GIT_TIMEOUT_S)["sha"]
    merge_base = revisions.merge_base(repo, bad_sha, base_sha, GIT_TIMEOUT_S)
    if merge_base is None:
        raise UsageError(f"{bad or 'HEAD'} and the base ref {base_ref!r} have no common ancestor in {repo} (a shallow "
                         "clone? fetch-depth: 0); give --good REV")
    return merge_base, bad_sha


def first_parents(repo: Path, good: str, bad: str) -> list[BisectCommit]:
    """``[good, ..., bad]``: the bad end's first-parent line back to the good end, oldest first."""
    proc = revisions.git(repo, ["log", "--first-parent", "--reverse", "--format=%H%x00%s%x00%P", "--end-of-options",
                                f"{good}..{bad}"], GIT_TIMEOUT_S)
    if proc.returncode != 0:
        raise UsageError(f"git log {good[:12]}..{bad[:12]} failed in {repo}: "
                         f"{proc.stderr.decode('utf-8', 'replace').strip()[:300]}")
    rows = [line.split("\0") for line in proc.stdout.decode("utf-8", "replace").splitlines() if line]
    if not rows:
        raise UsageError(f"the bad end {bad[:12]} has no commit after the good end {good[:12]} (the same commit, or "
                         "an ancestor of it): nothing to search")
    if len(rows) > MAX_COMMITS:
        raise UsageError(f"{len(rows)} commits between the ends; at most {MAX_COMMITS}")
    parents = rows[0][2].split()
    if not parents or parents[0] != good:
        raise UsageError(f"the good end {good[:12]} is not on the first-parent line of the bad end {bad[:12]} (expected "
                         "an ancestor that the bad end's history reaches through first parents, e.g. the merge base)")
    subject = revisions.resolve(repo, good, "--good", GIT_TIMEOUT_S).get("subject", "")
    later: list[BisectCommit] = [{"sha": sha, "subject": text} for sha, text, _ in rows]
    return [{"sha": good, "subject": subject}, *later]
