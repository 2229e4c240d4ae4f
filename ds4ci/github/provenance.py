"""Was a workflow run made by the trusted gate definition? Judged from GitHub's record of the run.

A run's workflow file is chosen by its event. ``pull_request_target`` runs the file of the repository's
**default** branch whatever the pull request's base (GitHub, since 2025-12-08): its record says
``head_branch`` = the default branch and ``head_sha`` = that branch's tip. ``workflow_dispatch`` runs the
file of the branch it was dispatched on; ``merge_group`` the file of the queue's merge commit, on a
``gh-readonly-queue/<branch>/...`` branch. A pull request can change none of these, but it can add a
workflow of its own (``on: pull_request``, the runner's labels) or a maintainer can dispatch the gate on
the pull request's branch, whose copy the pull request edited. So a run counts as the trusted gate only
when GitHub says: its ``path`` is the trusted workflow file, its event is one of the three above, it ran
on the default branch (a merge group: a queue of the default branch), the repository is this one, and its
title (``run-name:`` in gate.yml, set by the trusted file) names the commit it gated. Anything else, or a
field of the wrong shape, is a reason, never a guess.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

DEFAULT_WORKFLOW = ".github/workflows/gate.yml"
TRUSTED_EVENTS = ("pull_request_target", "workflow_dispatch", "merge_group")
QUEUE_BRANCH = "gh-readonly-queue/{branch}/"  # where GitHub makes a merge queue's commits
_RUN_URL = re.compile(r"^https?://[^/\s]+(?:/[^/\s]+)*?/(?P<repo>[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+)/actions/runs/"
                      r"(?P<id>[1-9][0-9]{0,19})(?:/(?:job|attempts)/[0-9]+)?/?$")
_HEX40 = re.compile(r"^[0-9a-f]{40}$")


@dataclass(frozen=True)
class RunRecord:
    """The fields of ``GET /repos/{repo}/actions/runs/{id}`` that say which definition ran, and for what."""

    id: int
    path: str  # the workflow file, e.g. .github/workflows/gate.yml (newer answers may add @ref)
    event: str
    head_branch: str
    repo: str
    title: str  # display_title: gate.yml's run-name names the head commit
    head_sha: str = ""  # the commit whose workflow file ran (pull_request_target: the base branch's)
    attempt: int = 0  # run_attempt: the latest attempt (a re-run adds one)
    started: str = ""  # run_started_at of the latest attempt (ISO 8601): which of two runs is newer


def run_id(target_url: str | None, repo: str) -> int | None:
    """The run a status's ``target_url`` names in ``repo`` (``.../OWNER/NAME/actions/runs/ID``), else None."""
    m = _RUN_URL.match(target_url or "")
    if m is None or m.group("repo").lower() != repo.lower():
        return None
    return int(m.group("id"))


def _text(doc: Any, *keys: str) -> str:
    value: Any = doc
    for key in keys:
        value = value.get(key) if isinstance(value, dict) else None
    return value if isinstance(value, str) else ""


def parse_run(doc: Any, wanted: int) -> RunRecord:
    """GitHub's answer as a record; a missing or odd field becomes "" (and so a reason below)."""
    found = doc.get("id") if isinstance(doc, dict) else None
    return RunRecord(
        id=found if isinstance(found, int) and not isinstance(found, bool) else 0,
        path=_text(doc, "path"),
        event=_text(doc, "event"),
        head_branch=_text(doc, "head_branch"),
        repo=_text(doc, "repository", "full_name"),
        title=_text(doc, "display_title"),
        head_sha=_text(doc, "head_sha"),
        attempt=_number(doc, "run_attempt"),
        started=_text(doc, "run_started_at"),
    ) if found == wanted else RunRecord(0, "", "", "", "", "")


def _number(doc: Any, key: str) -> int:
    value = doc.get(key) if isinstance(doc, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def problem(run: RunRecord, *, repo: str, workflow: str, default_branch: str, head: str | None) -> str | None:
    """Why ``run`` is not a run of the trusted gate for ``head`` (None: it is): the gate definition that runs is
    the default branch's (``default_branch``), whatever branch the pull request merges into."""
    if run.id == 0:
        return "GitHub has no such run of this repository"
    if run.repo.lower() != repo.lower():
        return f"run {run.id} belongs to {run.repo or 'no repository'}, not {repo}"
    path, _, ref = run.path.partition("@")
    if path != workflow:
        return f"run {run.id} is {run.path or 'no workflow file'}, not the trusted gate ({workflow})"
    if run.event not in TRUSTED_EVENTS:
        return (f"run {run.id} was started by {run.event or 'no event'}: only {', '.join(TRUSTED_EVENTS)} run "
                f"{workflow} as a trusted branch has it (a pull_request run uses the pull request's own copy)")
    if not default_branch:
        return f"run {run.id} cannot be judged: the repository's default branch is unknown"
    queue = QUEUE_BRANCH.format(branch=default_branch)
    if run.event == "merge_group":
        if not run.head_branch.startswith(queue):
            return (f"run {run.id} ran for the merge queue branch {run.head_branch or '(none)'}, not a queue of the "
                    f"default branch {default_branch} ({queue}...)")
    elif run.head_branch != default_branch:
        how = "was dispatched on" if run.event == "workflow_dispatch" else "ran on"
        return (f"run {run.id} {how} the branch {run.head_branch or '(none)'}, not on the default branch "
                f"{default_branch}: GitHub runs {workflow} of the default branch for pull_request_target, and a "
                f"dispatch must be made on {default_branch}")
    if ref and run.event != "merge_group" and ref not in (default_branch, f"refs/heads/{default_branch}"):
        return f"run {run.id} ran {workflow} at {ref}, not at the default branch {default_branch}"
    if head is not None and head not in run.title.split():
        return f"run {run.id} was a gate of another commit ({run.title[:120]!r} does not name {head})"
    return None
