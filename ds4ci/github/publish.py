"""Publishing's decisions: each runner's commit status, a focused rerun's, the predecessors in the PR's history.

Safety rules (each enforced before any request that could turn something green):
only a result whose verdict is ``pass`` *and* is internally consistent becomes ``success``
(a negative control's: every check passed, no width claimed; decided once, by the view builder,
``ds4ci.report.docview.judged``); statuses go to the SHA the
results were produced for (``revisions.head.sha``, which the trust step in ``verified`` has
checked against the bundle's sealed revisions), and nothing is posted when that SHA is
missing, differs from ``--sha``, or is no longer the PR's head. In the PR's history only
statuses the publisher itself posted count (predecessors, the full pass under a focused rerun).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from ds4ci.errors import UsageError
from ds4ci.github import statuses
from ds4ci.github.client import Client
from ds4ci.report import markdown
from ds4ci.report.docview import DocView

if TYPE_CHECKING:
    from ds4ci.github.merge import Vouch

    Vouched = Callable[[str, str], Vouch]  # (commit, runner) -> whether a record of GitHub's vouches for its green

SHA_RE = re.compile(r"^[0-9a-f]{40}$")
REPO_RE = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")
RUNNER_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
PREDECESSOR_WALK = 100  # newest PR commits inspected for the last validated predecessor


class StaleResultsError(UsageError):
    """The results are for a different commit than the one we were asked to mark."""


@dataclass(frozen=True)
class StatusPlan:
    sha: str
    context: str
    state: str
    description: str
    target_url: str | None


def status_state(view: DocView) -> str:
    """The commit status a runner's document earns (decided once, by the view builder: ``docview.judged``)."""
    return view.state


def describe(view: DocView, state: str) -> str:
    """The status description of a runner whose status is ``state``."""
    said = view.headline
    control = view.role == "negative-control"
    prefix = "negative control: " if control else ""
    if state == "success" and control:
        beside = view.negative_control_for
        text = said + (f" (parity: ds4ci/{beside})" if beside else "")
    elif state == "success":
        text = f"pass: {said}"
    elif view.verdict == "pass":
        text = "error: results claim pass but contradict themselves"
    else:
        text = f"{view.verdict.replace('_', ' ')}: {said}"
    return _fit(view, prefix + text)


_description = describe


def _fit(view: DocView, text: str) -> str:
    """A status description of at most 140 characters that says "built from a modified tree" when it was: first,
    or last after a focused pass (whose description must start with FOCUSED_PREFIX), never cut off."""
    tree = view.tree_note
    clean = " ".join(markdown.clean(text).split())
    if tree is None or tree in clean:
        return clean if len(clean) <= 140 else clean[:139] + "…"
    room = 140 - len(tree) - 2
    body = clean if len(clean) <= room else clean[:room - 1] + "…"
    return f"{body}; {tree}" if clean.startswith(FOCUSED_PREFIX) else f"{tree}; {body}"


def results_head(docs: Sequence[DocView], sha: str | None) -> str:
    """The one commit all results were produced for; refuse anything ambiguous or stale."""
    heads = []
    for doc in docs:
        head = doc.head
        if head is None:
            raise UsageError(
                f"results of runner {doc.name!r} record no revisions/head: refusing to publish "
                "(a status must name the exact commit the evidence is for; run the gate with --source-dir)"
            )
        heads.append(head)
    if len(set(heads)) > 1:
        raise UsageError(f"results are for different commits ({', '.join(sorted(set(heads)))}); publish them separately")
    head = heads[0]
    if sha is not None and sha != head:
        raise StaleResultsError(
            f"--sha {sha} but the results were produced for {head}: refusing to mark a commit the evidence is not for"
        )
    return head


def decide(view: DocView, head: str, target_url: str | None) -> StatusPlan:
    """A runner's commit status on ``head``."""
    return StatusPlan(head, f"ds4ci/{view.name}", view.state, describe(view, view.state), target_url)


def plan_statuses(docs: Sequence[DocView], head: str, target_url: str | None) -> list[StatusPlan]:
    return [decide(doc, head, target_url) for doc in docs]


FOCUSED_PREFIX = "focused pass"
FOCUSED_SWITCH = "--allow-focused-reruns"  # publish's switch; gate.yml's allow-focused-reruns input passes it


def _publisher_states(client: Client, sha: str, publisher: str) -> dict[str, statuses.Status]:
    return statuses.from_creator(statuses.parse(client.commit_statuses(sha), sha), publisher)


def _publisher_run(client: Client, sha: str, context: str, publisher: str) -> tuple[str, str] | None:
    """(conclusion, title) of the publisher app's own check run ``context`` on ``sha``, if there is one."""
    from ds4ci.github import checkruns, shapes

    app = checkruns.app_of(publisher)
    if app is None:
        return None
    run = checkruns.own_run(shapes.check_runs(client.check_runs(sha), sha), context, sha, app)
    return None if run is None or run.status != "completed" else (str(run.conclusion), run.title)


def _walk(client: Client, pr: int, head: str, runner: str, publisher: str, full_only: bool,
          vouched: Vouched | None = None) -> str | None:
    """The newest PR commit before ``head`` whose ds4ci/<runner> success was posted by ``publisher``.

    The publisher's status decides; a commit without one counts by the publisher app's check run of that name
    (a repository that publishes check runs only), never by anyone else's. With ``vouched`` (ds4ci.github.vouch),
    a success counts only where a record of GitHub's vouches for it on that commit.
    """
    commits = client.pr_commits(pr)
    if head in commits:
        commits = commits[: commits.index(head)]
    context = f"ds4ci/{runner}"
    for sha in reversed(commits[-PREDECESSOR_WALK:]):
        status = _publisher_states(client, sha, publisher).get(context)
        if status is not None:
            state, text = status.state, status.description
        else:
            run = _publisher_run(client, sha, context, publisher)
            if run is None:
                continue
            state, text = run
        if state == "success" and not (full_only and text.startswith(FOCUSED_PREFIX)) and (
                vouched is None or vouched(sha, runner).green):
            return sha
    return None


def last_full_pass(client: Client, pr: int, head: str, runner: str, publisher: str,
                   vouched: Vouched | None = None) -> str | None:
    """The newest PR commit before ``head`` (so an ancestor) with a full (not focused) ds4ci/<runner> pass."""
    return _walk(client, pr, head, runner, publisher, full_only=True, vouched=vouched)


def focused_plan(plan: StatusPlan, doc: DocView, full_pass: str | None, allowed: bool) -> StatusPlan:
    """A focused rerun's pass is green only on top of a full pass on an ancestor, where policy allows."""
    widths = ",".join(map(str, doc.qs))
    if plan.state != "success":
        return plan
    if allowed and full_pass is not None:
        text = f"{FOCUSED_PREFIX} at q={widths} on top of the full pass at {full_pass[:12]}"
        return replace(plan, description=_fit(doc, text))
    why = f"focused reruns need publish {FOCUSED_SWITCH}" if not allowed else "no full pass on an ancestor"
    return replace(plan, state="pending", description=_fit(doc, f"{FOCUSED_PREFIX} at q={widths}; full run required: {why}"))


def last_validated_predecessor(client: Client, pr: int, head: str, runner: str, publisher: str,
                               vouched: Vouched | None = None) -> str | None:
    """The newest PR commit before ``head`` whose ds4ci/<runner> status from ``publisher`` is success."""
    return _walk(client, pr, head, runner, publisher, full_only=False, vouched=vouched)


def validate_runners(expected: Sequence[str]) -> None:
    """``--expect-runner`` names: each a runner name."""
    for runner in expected:
        if not RUNNER_RE.match(runner):
            raise UsageError(f"--expect-runner {runner!r}: expected letters, digits, '.', '_' or '-'")


def validate_target(repo: str | None, pr: int | None, sha: str | None, dry_run: bool) -> None:
    if repo is not None and not REPO_RE.match(repo):
        raise UsageError(f"--repo {repo!r}: expected OWNER/NAME")
    if not dry_run and repo is None:
        raise UsageError("--repo OWNER/NAME is required (or use --dry-run)")
    if not dry_run and pr is None and sha is None:
        raise UsageError("give --pr N (comment + statuses on its head) or --sha SHA (statuses only)")
    if pr is not None and pr < 1:
        raise UsageError(f"--pr {pr}: expected a pull request number >= 1")
    if sha is not None and not SHA_RE.match(sha):
        raise UsageError(f"--sha {sha!r}: expected a full 40-hex lowercase commit SHA")

