"""Was a workflow run made by the trusted gate definition? Judged from GitHub's record of the run.

A run's workflow file is chosen by its event: ``pull_request_target`` always runs the base branch's
file, ``workflow_dispatch`` the file of the branch it was dispatched on. A pull request can change
neither, but it can add a workflow of its own (``on: pull_request``, the runner's labels) or a
maintainer can dispatch the gate on the pull request's branch, whose copy the pull request edited.
So a run counts as the trusted gate only when GitHub says: its ``path`` is the trusted workflow
file, its event is one of the two above, a dispatch ran on the pull request's base branch, the
repository is this one, and its title (``run-name:`` in gate.yml, set by the trusted file) names
the head commit. Anything else, or a field of the wrong shape, is a reason, never a guess.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

DEFAULT_WORKFLOW = ".github/workflows/gate.yml"
TRUSTED_EVENTS = ("pull_request_target", "workflow_dispatch")
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


def problem(run: RunRecord, *, repo: str, workflow: str, base_branch: str, head: str | None) -> str | None:
    """Why ``run`` is not a run of the trusted gate for ``head`` (None: it is)."""
    if run.id == 0:
        return "GitHub has no such run of this repository"
    if run.repo.lower() != repo.lower():
        return f"run {run.id} belongs to {run.repo or 'no repository'}, not {repo}"
    path, _, ref = run.path.partition("@")
    if path != workflow:
        return f"run {run.id} is {run.path or 'no workflow file'}, not the trusted gate ({workflow})"
    if run.event not in TRUSTED_EVENTS:
        return (f"run {run.id} was started by {run.event or 'no event'}: only {' and '.join(TRUSTED_EVENTS)} run "
                f"{workflow} as the base branch has it (a pull_request run uses the pull request's own copy)")
    if run.event == "workflow_dispatch" and run.head_branch != base_branch:
        return (f"run {run.id} was dispatched on {run.head_branch or 'no branch'}, whose {workflow} may differ from "
                f"the base branch {base_branch}'s: dispatch it on {base_branch}")
    if ref and run.event == "workflow_dispatch" and ref not in (base_branch, f"refs/heads/{base_branch}"):
        return f"run {run.id} ran {workflow} at {ref}, not at the base branch {base_branch}"
    if head is not None and head not in run.title.split():
        return f"run {run.id} was a gate of another commit ({run.title[:120]!r} does not name {head})"
    return None
