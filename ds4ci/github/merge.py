"""Is a pull request ready to merge? Pure rules over facts already fetched from GitHub.

Everything here is judged on the PR's exact current head commit: a gate, check or approval
that is green only on an older commit does not count, and the message says so. ``evaluate``
turns :class:`MergeFacts` into a :class:`MergeReport` (one :class:`Condition` per requirement;
the PR is ready only when every condition holds). Fetching lives in ``ds4ci.github.mergefacts``;
``checklist_markdown`` renders the same conditions for a PR comment section.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ds4ci.github import statuses as found_statuses
from ds4ci.github.checkruns import app_of, own_run
from ds4ci.github.provenance import DEFAULT_WORKFLOW
from ds4ci.github.statuses import Status
from ds4ci.options import table as options
from ds4ci.report import markdown
from ds4ci.textsafe import neutralise

RUNNER_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
GATE_CONTEXT = "ds4ci/{runner}"
DEFAULT_APPROVALS: int = options.DEFAULT_APPROVALS
DEFAULT_PUBLISHER: str = options.DEFAULT_PUBLISHER
DEFAULT_CHECK_APP: str = options.DEFAULT_CHECK_APP
# Reviewers whose approval counts: GitHub's own required-review rule counts only people with
# write access; author_association is what the review itself says about that.
COUNTED_ASSOCIATIONS = frozenset({"OWNER", "MEMBER", "COLLABORATOR"})
# Review states that change a reviewer's verdict; COMMENTED and PENDING do not.
_DECISIVE = frozenset({"APPROVED", "CHANGES_REQUESTED", "DISMISSED"})


@dataclass(frozen=True)
class CheckSource:
    """Who may satisfy a required check: check runs of one GitHub App, statuses of one account."""

    name: str
    app: str = DEFAULT_CHECK_APP
    creator: str | None = None  # None: the publisher


@dataclass(frozen=True)
class Requirements:
    runners: tuple[str, ...]
    checks: tuple[str, ...] = ()
    approvals: int = DEFAULT_APPROVALS
    publisher: str = DEFAULT_PUBLISHER  # the only account whose ds4ci/<runner> statuses count
    sources: tuple[CheckSource, ...] = ()  # per-check sources; a check not listed: CheckSource(name)
    workflow: str = DEFAULT_WORKFLOW  # a gate status counts only when it links a run of this file (provenance)
    calibration_max_age_days: int = 0  # above 0: the run vouching for each gate runner records a calibration this recent
    vouch: str = "workflow"  # which record vouches for a green gate (ds4ci.github.vouch)
    vouch_app_id: int | None = None  # vouch "publisher": the GitHub App whose check runs vouch

    def source(self, check: str) -> CheckSource:
        return next((s for s in self.sources if s.name == check), CheckSource(check))


@dataclass(frozen=True)
class PullFacts:
    number: int
    head: str
    state: str  # "open" or "closed"
    merged: bool
    draft: bool
    mergeable: bool | None  # None: GitHub has not computed it yet
    mergeable_state: str | None
    mergeable_reads: int = 1  # how many times the PR was read while mergeable was None
    base_ref: str = ""  # the branch it merges into (its gate ran on the default branch, whatever this is)


@dataclass(frozen=True)
class CheckRun:
    name: str
    status: str  # queued | in_progress | completed | waiting | requested | pending
    conclusion: str | None  # success | failure | neutral | cancelled | skipped | timed_out | action_required
    head_sha: str
    app: str = DEFAULT_CHECK_APP  # app.slug: the GitHub App that created it
    id: int = 0
    app_id: int = 0  # app.id: the GitHub App that created it (what vouch = "publisher" names)
    title: str = ""  # output.title (ds4ci's own check runs: the status description)
    summary: str = ""  # output.summary (ds4ci's own: the runner's section; never judged: PR processes write in it)
    details_url: str = ""  # ds4ci's own check runs: the gate run's URL, like a status's target_url


@dataclass(frozen=True)
class Review:
    author: str
    state: str  # APPROVED | CHANGES_REQUESTED | COMMENTED | DISMISSED | PENDING
    commit_id: str | None
    association: str = "NONE"


@dataclass(frozen=True)
class ReviewThread:
    path: str
    line: int | None
    original_line: int | None = None
    resolved: bool = False
    outdated: bool = False

    @property
    def location(self) -> str:
        line = self.line if self.line is not None else self.original_line
        return f"{self.path}:{line}" if line is not None else self.path


@dataclass(frozen=True)
class Vouch:
    """Whether a record of GitHub's ties a runner's green to the trusted gate (ds4ci.github.vouch), and which."""

    green: bool
    detail: str  # the record that vouched, or why none did
    concluded: str | None = None  # what the vouching record concluded (success, failure, ...); None: none was found
    run: int | None = None  # vouch "workflow": the trusted gate's run whose verdict job vouched (its record)


NOT_VOUCHED = Vouch(False, "no record of GitHub's was read for it")


@dataclass(frozen=True)
class MergeFacts:
    pull: PullFacts
    statuses: tuple[Status, ...] = ()  # every status of the head, newest first, with its creator
    check_runs: tuple[CheckRun, ...] = ()
    reviews: tuple[Review, ...] = ()  # chronological, as GitHub lists them
    threads: tuple[ReviewThread, ...] = ()
    # runner -> the newest older PR commit whose ds4ci/<runner> is success (only for runners
    # that are not green on the head)
    gate_green_on: Mapping[str, str] = field(default_factory=dict)
    today: str = ""  # YYYY-MM-DD (UTC) when the facts were fetched: the age of a cited calibration
    vouches: Mapping[str, Vouch] = field(default_factory=dict)  # runner -> what vouched for (or against) it
    # run id -> the names of its artifacts, for each run that vouched (read where a calibration is required)
    run_artifacts: Mapping[int, tuple[str, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class Condition:
    name: str
    ok: bool
    detail: str

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "ok": self.ok, "detail": self.detail}


@dataclass(frozen=True)
class MergeReport:
    pr: int
    head: str
    conditions: tuple[Condition, ...]

    @property
    def ready(self) -> bool:
        return all(c.ok for c in self.conditions)

    @property
    def unmet(self) -> tuple[Condition, ...]:
        return tuple(c for c in self.conditions if not c.ok)

    def to_json(self) -> dict[str, Any]:
        return {
            "pr": self.pr,
            "head": self.head,
            "ready": self.ready,
            "conditions": [c.to_json() for c in self.conditions],
        }


def _short(sha: str | None) -> str:
    return sha[:12] if sha else "(unknown commit)"


# ----- the rules -------------------------------------------------------------------------------


def _pull_conditions(pull: PullFacts) -> list[Condition]:
    if pull.merged:
        open_ = Condition("open", False, f"pull request #{pull.number} is already merged")
    elif pull.state != "open":
        open_ = Condition("open", False, f"pull request #{pull.number} is {pull.state}, not open")
    else:
        open_ = Condition("open", True, "open")
    draft = Condition("not draft", not pull.draft,
                      "a draft: mark it ready for review first" if pull.draft else "ready for review")
    if pull.mergeable is True:
        mergeable = Condition("mergeable", True, f"mergeable ({pull.mergeable_state or 'state unknown'})")
    elif pull.mergeable is False:
        mergeable = Condition(
            "mergeable", False,
            f"not mergeable (mergeable_state {pull.mergeable_state or 'unknown'}): resolve the conflicts "
            "with the base branch",
        )
    else:
        mergeable = Condition(
            "mergeable", False,
            f"mergeability not yet computed: GitHub still answered mergeable=null after {pull.mergeable_reads} "
            "read(s); run merge-check again in a minute",
        )
    return [open_, draft, mergeable]


def _with(detail: str, ignored: str) -> str:
    return f"{detail}; {ignored}" if ignored else detail


def _gate_condition(runner: str, head: str, found: Sequence[Status], publisher: str, green_on: str | None,
                    all_runs: Sequence[CheckRun] = (), vouch: Vouch = NOT_VOUCHED) -> Condition:
    """Only the publisher's newest ds4ci/<runner> status and its app's check run of that name count.

    Either may stand alone (statuses, or check runs only); where both are on the head, both must be
    success. Anyone else's status or check run is listed as ignored. A success counts only when a record
    of GitHub's vouches for it (``vouch``); the detail says which, or why it was not counted.
    """
    context = GATE_CONTEXT.format(runner=runner)
    name = f"gate {context}"
    app = app_of(publisher)
    status = found_statuses.from_creator(found, publisher).get(context)
    run = own_run(all_runs, context, head, app)
    ignored_items = [f"{s.state} by {s.creator}" for s in found_statuses.ignored(found, context, publisher)]
    ignored_items += [f"check run by app {r.app}" for r in all_runs
                      if r.name == context and r.head_sha == head and r.app != app]
    ignored = "ignored (not posted by the publisher): " + ", ".join(ignored_items) if ignored_items else ""
    run_ok = run is not None and run.status == "completed" and run.conclusion == "success"
    if (status is not None or run is not None) and (status is None or status.state == "success") and (
            run is None or run_ok):
        what = "" if run is None else (" (status and check run)" if status is not None else " (check run)")
        if vouch.green:
            return Condition(name, True, _with(f"success on the head {_short(head)}{what}, vouched for by "
                                               f"{vouch.detail}", ignored))
        older = f"; it was success only on the older head {green_on}" if green_on else ""
        return Condition(name, False, _with(
            f"success on the current head {_short(head)} not counted: {vouch.detail}{older}", ignored))
    parts = []
    if status is not None:
        parts.append(status.state + (f" ({status.description})" if status.description else ""))
    if run is not None:
        parts.append(f"check run {run.conclusion or run.status}")
    on_head = "; ".join(parts) or "not set"
    if green_on:
        return Condition(
            name, False,
            _with(f"{on_head} on the current head {_short(head)}; it was success only on the older head "
                  f"{green_on}: re-run the gate on the current head", ignored),
        )
    return Condition(name, False, _with(
        f"{on_head} on the current head {_short(head)}; no success on any commit of this PR", ignored))


def _check_condition(source: CheckSource, head: str, found: Sequence[Status], publisher: str,
                     all_runs: Sequence[CheckRun]) -> Condition:
    """Check runs of the check's app and statuses of its creator count (every match must be success)."""
    check, creator = source.name, source.creator or publisher
    name = f"check {check}"
    runs = [r for r in all_runs if r.name == check and r.head_sha == head]
    matches = [r for r in runs if r.app == source.app]
    foreign = [f"check run by app {r.app}" for r in runs if r.app != source.app]
    foreign += [f"status {s.state} by {s.creator}" for s in found_statuses.ignored(found, check, creator)]
    ignored = f"ignored (not from app {source.app} or account {creator}): {', '.join(foreign)}" if foreign else ""
    status = found_statuses.from_creator(found, creator).get(check)
    if not matches and status is None:
        return Condition(name, False, _with(
            f"missing: no check run or commit status named {check!r} on the head {_short(head)} "
            f"(counted: check runs of app {source.app}, statuses by {creator})", ignored))
    problems = []
    for run in matches:
        if run.status != "completed":
            problems.append(f"check run pending ({run.status})")
        elif run.conclusion != "success":
            problems.append(f"check run concluded {run.conclusion or 'without a conclusion'}")
    if status is not None and status.state != "success":
        what = "pending" if status.state == "pending" else f"failed ({status.state})"
        problems.append(f"status {what}" + (f": {status.description}" if status.description else ""))
    if problems:
        return Condition(name, False, _with("; ".join(problems) + f" on the head {_short(head)}", ignored))
    return Condition(name, True, _with(f"success on the head {_short(head)}", ignored))


def _calibration_condition(runner: str, facts: MergeFacts, need: Requirements) -> Condition:
    """The run that vouched for ``runner``'s green must record (``calrecord``) a calibration at most N days old.

    Only that run's artifact names are read: its own jobs alone can upload them. No check run or status text
    counts, since a pull request's processes and workflows can put any words there."""
    from ds4ci.github import calrecord

    name, limit = f"calibration of {runner}", need.calibration_max_age_days
    wants = f"merge.calibration_max_age_days requires one from the last {limit} days"
    vouch = facts.vouches.get(runner, NOT_VOUCHED)
    if not vouch.green:
        return Condition(name, False, f"no calibration read: no run of the trusted gate vouched for the gate's green "
                                      f"on the head ({vouch.detail}); {wants}")
    if vouch.run is None:
        return Condition(name, False, f"no calibration read: {vouch.detail} vouched, but only a run of the trusted "
                                      f"gate records a calibration (merge.vouch = \"workflow\"); {wants}")
    names = facts.run_artifacts.get(vouch.run)
    if names is None:
        return Condition(name, False, f"no calibration read: the artifacts of run {vouch.run} were not read; {wants}")
    day, why = calrecord.day_of(names, runner, vouch.run)
    if day is None:
        return Condition(name, False, f"{why}; {wants}")
    age = (dt.date.fromisoformat(facts.today or dt.date.today().isoformat()) - day).days
    if age > limit:
        return Condition(name, False, f"calibrated {day.isoformat()} ({why}), {age} days ago: older than the {limit} "
                                      "days merge.calibration_max_age_days allows; calibrate the runner again")
    return Condition(name, True, f"calibrated {day.isoformat()} ({why}; {age} days ago, at most {limit})")


def _latest_verdicts(reviews: Sequence[Review]) -> dict[str, Review]:
    latest: dict[str, Review] = {}
    for review in reviews:  # chronological: a later decisive review replaces an earlier one
        if review.state in _DECISIVE:
            latest[review.author] = review
    return latest


def _review_conditions(reviews: Sequence[Review], head: str, required: int) -> list[Condition]:
    latest = _latest_verdicts(reviews)
    current, stale, ignored = [], [], []
    for author, review in latest.items():
        if review.state != "APPROVED":
            continue
        if review.association not in COUNTED_ASSOCIATIONS:
            ignored.append(f"{author} ({review.association.lower()}: not a member or collaborator)")
        elif review.commit_id == head:
            current.append(author)
        else:
            stale.append(f"{author} approved the older commit {_short(review.commit_id)}")
    notes = []
    if stale:
        notes.append("stale, not counted: " + ", ".join(stale) + " (re-approval needed on the current head)")
    if ignored:
        notes.append("not counted: " + ", ".join(ignored))
    count = f"{len(current)} of {required} required approval(s) on the head {_short(head)}"
    if current:
        count += f" ({', '.join(current)})"
    approvals = Condition("approvals", len(current) >= required, "; ".join([count, *notes]))
    blocking = [f"{a} (on {_short(r.commit_id)})" for a, r in latest.items() if r.state == "CHANGES_REQUESTED"]
    changes = Condition(
        "no changes requested", not blocking,
        "changes requested by " + ", ".join(blocking) if blocking else "no outstanding change requests",
    )
    return [approvals, changes]


def _thread_conditions(threads: Sequence[ReviewThread]) -> list[Condition]:
    open_threads = [t for t in threads if not t.resolved]
    if not open_threads:
        return [Condition("review threads", True, f"all {len(threads)} review thread(s) resolved")]
    return [
        Condition(f"review thread {t.location}", False,
                  "unresolved review thread" + (" (outdated)" if t.outdated else ""))
        for t in open_threads
    ]


def evaluate(facts: MergeFacts, requirements: Requirements) -> MergeReport:
    """Every requirement as a condition, in a fixed order; ready iff all hold."""
    head, need = facts.pull.head, requirements
    conditions = _pull_conditions(facts.pull)
    conditions += [_gate_condition(r, head, facts.statuses, need.publisher, facts.gate_green_on.get(r),
                                   facts.check_runs, facts.vouches.get(r, NOT_VOUCHED))
                   for r in need.runners]
    conditions += [_check_condition(need.source(c), head, facts.statuses, need.publisher, facts.check_runs)
                   for c in need.checks]
    if need.calibration_max_age_days > 0:
        conditions += [_calibration_condition(r, facts, need) for r in need.runners]
    conditions += _review_conditions(facts.reviews, head, requirements.approvals)
    conditions += _thread_conditions(facts.threads)
    return MergeReport(facts.pull.number, head, tuple(conditions))


# ----- rendering -------------------------------------------------------------------------------


def render_text(report: MergeReport) -> str:
    """The terminal view: a verdict line, one line per unmet condition, then what vouched for each green gate."""
    if report.ready:
        lines = [f"#{report.pr} at {report.head}: ready to merge ({len(report.conditions)} conditions hold)"]
    else:
        lines = [f"#{report.pr} at {report.head}: not ready ({len(report.unmet)} of {len(report.conditions)} "
                 "conditions unmet)"]
        lines += [f"  - {c.name}: {c.detail}" for c in report.unmet]
    lines += [f"  + {c.name}: {c.detail}" for c in report.conditions if c.ok and c.name.startswith("gate ")]
    return neutralise("\n".join(lines)) + "\n"  # details quote GitHub statuses: anyone's text


def checklist_markdown(report: MergeReport) -> list[str]:
    """The conditions as a Markdown task list (escaped: names and details come from GitHub)."""
    verdict = "ready to merge" if report.ready else f"not ready: {len(report.unmet)} condition(s) unmet"
    lines = [f"**Review and merge status** on {markdown.code(report.head[:12])}: {verdict}", ""]
    for c in report.conditions:
        lines.append(f"- [{'x' if c.ok else ' '}] {markdown.text(c.name, 200)}: {markdown.text(c.detail, 500)}")
    return lines


# ----- settings --------------------------------------------------------------------------------
