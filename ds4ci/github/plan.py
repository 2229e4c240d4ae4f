"""The publish plan: every status, check run, comment and job summary, as one value made without writing.

:func:`make` is pure: from the verified documents (their :class:`~ds4ci.github.runnerview.RunnerView`) and the
:class:`~ds4ci.github.facts.Facts` read from GitHub it decides and renders everything publish sends. A dry run
prints the plan made from no facts (a first publish); ``ds4ci.github.apply`` carries a plan out, writing only
what differs from what the facts found (so the same plan applied twice changes nothing).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ds4ci.github import checkruns, commentrecord, merge, provenance, publish, statuses
from ds4ci.github.client import Comment
from ds4ci.github.facts import Facts, Settings
from ds4ci.github.runnerview import RunnerView
from ds4ci.options.table import DEFAULT_WIDTHS
from ds4ci.report import bisect, render
from ds4ci.report.docview import DocView
from ds4ci.report.docview.compare import BaseResult
from ds4ci.report.sections import Section, parse_sections

# Pending first, green last: a publish cut short never leaves a runner green beside a verdict not yet written.
_ORDER = {"pending": 0, "error": 1, "failure": 1, "success": 2}
FAILURES = "failures"  # [publish] comment_mode: a new comment only where a runner's status is not success


class BodyBuilder:
    """Renders the comment from our results plus the sections found in the existing comment."""

    def __init__(
        self,
        docs: Sequence[DocView],
        *,
        run_url: str | None,
        template_dir: Path | None,
        predecessors: dict[str, str],
        extra: Sequence[Section] = (),
        merge_status: Sequence[str] = (),
        calibrations: Mapping[str, str] | None = None,
        bases: Mapping[str, BaseResult] | None = None,
        repo: str | None = None,
        record_run: int | None = None,
        vouched: tuple[int, str] | None = None,
    ) -> None:
        self.record_run = record_run  # the run the body names as its writer (commentrecord.stamp)
        # (run, body): the run whose record vouches for our comment's current body; a body that changes names
        # record_run instead (that run records the new text), an unchanged one keeps naming the run that did
        self.vouched = vouched
        self.docs = list(docs)
        self.bases = dict(bases or {})
        self.repo = repo
        self.calibrations = dict(calibrations or {})
        self.merge_status = list(merge_status)
        self.run_url = run_url
        self.template_dir = template_dir
        self.predecessors = predecessors
        self.extra = list(extra)
        self.runners = {d.name for d in docs} | {s.runner for s in extra}

    def __call__(self, existing: Sequence[Section]) -> tuple[str, list[Section]]:
        body, sections = render.render(
            self.docs,
            kind="comment",
            run_url=self.run_url,
            template_dir=self.template_dir,
            predecessors=self.predecessors,
            existing=existing,
            extra=self.extra,
            merge_status=self.merge_status,
            calibrations=self.calibrations,
            bases=self.bases,
            repo=self.repo,
        )
        if self.vouched is not None and commentrecord.stamp(body, self.vouched[0]) == self.vouched[1]:
            return self.vouched[1], sections
        return commentrecord.stamp(body, self.record_run), sections


@dataclass(frozen=True)
class CheckRunAction:
    run: checkruns.CheckRunPlan
    existing: int | None  # the id of our check run of that name on the head (updated), else created
    unchanged: bool = False  # it says exactly this already: nothing is sent


@dataclass(frozen=True)
class CommentPlan:
    pr: int
    author: str
    body: str
    action: str  # created | updated | unchanged
    ours: tuple[Comment, ...]  # our sticky comments as found, oldest (the one kept) first
    seen_until: str | None
    build: BodyBuilder  # re-merges what a concurrent publisher wrote (apply retries)
    sections: tuple[Section, ...] = ()  # the sections of body
    # by record (commentrecord): the ids of the comments that are ours, the only ones read again or written;
    # None: by login (every marked comment of the author's)
    kept: frozenset[int] | None = None


@dataclass(frozen=True)
class PublishPlan:
    head: str
    repo: str | None
    pr: int | None
    statuses: tuple[publish.StatusPlan, ...]  # to send, in this order
    unchanged: tuple[publish.StatusPlan, ...]  # the publisher's status on the head says this already
    check_runs: tuple[CheckRunAction, ...]
    comment: CommentPlan | None
    comment_body: str | None  # the comment as rendered (also where it is not sent: no PR, or --no-comment)
    summary: str
    notes: tuple[str, ...]  # what publish says on stderr before writing
    verdicts: Mapping[str, str] = field(default_factory=dict)  # runner -> its decided state (gate.yml's verdict jobs)
    verdicts_out: Path | None = None  # where apply writes ``verdicts``, last, once every write succeeded
    comment_record: Path | None = None  # where apply writes the id of the comment it wrote
    # The writes ``apply`` has carried out (status:<context>, check-run:<name>, comment): applied again, the
    # plan sends only what is not done yet (a second apply sends nothing; one cut short resumes).
    done: set[str] = field(default_factory=set, compare=False, repr=False)

    def to_json(self) -> dict[str, Any]:
        return {
            "head": self.head,
            "statuses": [vars(s) for s in self.statuses],
            "unchanged_statuses": [s.context for s in self.unchanged],
            "check_runs": [{"name": a.run.name, "head_sha": a.run.head_sha, "conclusion": a.run.conclusion,
                            "details_url": a.run.details_url, "output": a.run.output(),
                            "action": "unchanged" if a.unchanged else "updated" if a.existing else "created"}
                           for a in self.check_runs],
            "comment": ({"pr": self.comment.pr, "action": self.comment.action, "body": self.comment.body}
                        if self.comment is not None else  # a dry run's: the comment a first publish creates
                        {"pr": self.pr, "action": "created", "body": self.comment_body}
                        if self.comment_body is not None else None),
            "summary": self.summary,
            "verdicts": dict(self.verdicts),
        }


def _status_plans(views: Sequence[RunnerView], settings: Settings, facts: Facts
                  ) -> tuple[tuple[publish.StatusPlan, ...], tuple[publish.StatusPlan, ...]]:
    wanted = [publish.StatusPlan(v.head, v.context, v.state, v.description, settings.target_url)
              for v in views if v.may_set_status] if settings.status else []
    found = facts.own_statuses or {}

    def same(p: publish.StatusPlan, s: statuses.Status | None) -> bool:
        return s is not None and (s.state, s.description, s.target_url) == (p.state, p.description, p.target_url or "")

    send = sorted((p for p in wanted if not same(p, found.get(p.context))), key=lambda p: _ORDER.get(p.state, 1))
    return tuple(send), tuple(p for p in wanted if same(p, found.get(p.context)))


def _check_runs(views: Sequence[RunnerView], settings: Settings, facts: Facts) -> tuple[CheckRunAction, ...]:
    if not settings.check_runs:
        return ()
    env = render.environment(settings.template_dir)
    out = []
    for v in (v for v in views if v.may_set_status):
        run = checkruns.plan(v.words, v.state, v.description, v.head, env=env, run_url=settings.target_url,
                             predecessor=facts.predecessors.get(v.name), signature=v.signature,
                             calibration=settings.calibrations.get(v.name), base=facts.bases.get(v.name),
                             repo=settings.repo)
        mine = facts.own_runs.get(run.name)
        out.append(CheckRunAction(run, int(mine["id"]) if mine else None, _says(mine, run)))
    return tuple(out)


def _says(found: Any, run: checkruns.CheckRunPlan) -> bool:
    """Whether our check run on the head already says exactly ``run``."""
    if not found:
        return False
    output = found.get("output") or {}
    return (found.get("status"), found.get("conclusion"), found.get("details_url"), output.get("title"),
            output.get("summary"), output.get("text"), output.get("annotations_count")) == (
        "completed", run.conclusion, run.details_url, run.title, run.summary, run.text, len(run.annotations))


def _needs_hardware(views: Sequence[RunnerView], settings: Settings, facts: Facts, head: str) -> list[Section]:
    present = {v.name for v in views}
    widths = next((list(w) for v in views if (w := v.words.configured_widths)), list(DEFAULT_WIDTHS))
    env = render.environment(settings.template_dir)
    out = []
    for runner in settings.expect_runners:
        if runner in present:
            continue
        older, commits, files = facts.missing.get(runner, (None, (), ()))
        out.append(render.needs_hardware_section(env, runner, head, widths, older, commits, files))
    return out


def _merge_status(plan_statuses: Sequence[publish.StatusPlan], runs: Sequence[CheckRunAction], facts: Facts,
                  head: str) -> list[str]:
    """The merge checklist as it will be once this plan is applied: its statuses and check runs laid on top."""
    if facts.merge is None:
        return []
    found, need = facts.merge
    creator = facts.publisher or ""
    new = tuple(statuses.Status(p.context, p.state, p.description, creator, p.target_url or "") for p in plan_statuses)
    ran = tuple(merge.CheckRun(a.run.name, "completed", a.run.conclusion, head, facts.app or "", a.existing or 0,
                               title=a.run.title, summary=a.run.summary, details_url=a.run.details_url or "")
                for a in runs if facts.app is not None)
    kept = tuple(r for r in found.check_runs if not any(n.name == r.name and n.app == r.app for n in ran))
    vouches = {**found.vouches, **{runner: by_state["success" if p.state == "success" else "other"]
                                   for p in plan_statuses
                                   if (by_state := facts.vouches_after.get(runner := p.context.removeprefix("ds4ci/")))}}
    return merge.checklist_markdown(merge.evaluate(replace(found, statuses=new + found.statuses,
                                                           check_runs=ran + kept, vouches=vouches), need))


def update_only(settings: Settings, views: Sequence[RunnerView]) -> bool:
    """comment_mode = failures and every runner's status success: no new comment (an existing one is updated)."""
    return settings.comment_mode == FAILURES and all(publish.status_state(v.words) == "success" for v in views)


def _comment(build: BodyBuilder, settings: Settings, facts: Facts, only_update: bool = False) -> CommentPlan | None:
    if settings.pr is None or not settings.comment or facts.publisher is None:
        return None
    ours = facts.comments
    if only_update and not ours:
        return None
    body, sections = build([s for c in ours for s in parse_sections(c.body)])
    action = "created" if not ours else "unchanged" if ours[0].body == body and len(ours) == 1 else "updated"
    kept = frozenset(c.id for c in ours) if facts.publisher == commentrecord.SHARED_LOGIN else None
    return CommentPlan(settings.pr, facts.publisher, body, action, ours,
                       facts.seen_until, build, tuple(sections), kept)


def record_run(settings: Settings, facts: Facts) -> int | None:
    """The run a comment this publish writes names as its writer (``commentrecord``): the run this publish runs
    in, which records the comment's id and text once written; else the run whose record vouches for our comment;
    None where neither is known."""
    own = settings.own_run if settings.own_run is not None else provenance.run_id(settings.target_url,
                                                                                  settings.repo or "")
    return own if own is not None else facts.comment_run if facts.comments else None


def vouched(facts: Facts) -> tuple[int, str] | None:
    """(the run whose record vouches for our comment, its body): a body left as it is keeps naming that run."""
    if facts.comments and facts.comment_run is not None:
        return facts.comment_run, facts.comments[0].body
    return None


def lookalikes(facts: Facts) -> tuple[list[str], str]:
    """What publish says of each look-alike comment it left alone: stderr notes, and the job summary's lines."""
    said = [f"comment {c.id} by {c.author} looks like ds4ci's comment but is not ds4ci's ({why}): left alone, "
            "never edited, none of its sections taken" for c, why in facts.lookalikes]
    if said and not facts.comments:
        said.append("no comment is ds4ci's by record: publish writes a new one, and the sections of runners this "
                    "publish does not cover are not carried over from any comment left alone")
    summary = "".join(f"\n> [!WARNING]\n> {text}\n" for text in said)
    return said, summary


def _bisect_sections(settings: Settings, kind: str) -> list[Section]:
    """A section per runner's bisect result (``kind="summary"``: with every step); they set no status."""
    env = render.environment(settings.template_dir)
    return [bisect.section(env, doc, settings.target_url, kind) for doc in settings.bisects]


def job_summary(docs: Sequence[DocView], settings: Settings, bases: Mapping[str, BaseResult] | None = None) -> str:
    """The job summary: every runner's document at full detail (written also where publishing stopped short)."""
    body, _ = render.render(docs, kind="summary", run_url=settings.target_url, template_dir=settings.template_dir,
                            calibrations=settings.calibrations, extra=_bisect_sections(settings, "summary"),
                            bases=bases, repo=settings.repo)
    return body


def make(views: Sequence[RunnerView], settings: Settings, facts: Facts) -> PublishPlan:
    """Everything publish would send for ``views`` on their head, given ``facts``."""
    head = views[0].head
    docs = [v.words for v in views]
    send, unchanged = _status_plans(views, settings, facts)
    runs = _check_runs(views, settings, facts)
    notes = [f"no status for {v.name}: its result is unverified" for v in views if not v.may_set_status]
    if runs and facts.publisher is not None and facts.app is None:
        notes.append(f"no check runs: {facts.publisher} is not a GitHub App's account (a personal token cannot "
                     "create check runs; the statuses were set); set [publish] check_runs = false to stop this note")
        runs = ()
    summary = job_summary(docs, settings, facts.bases)
    build = BodyBuilder(docs, run_url=settings.target_url, template_dir=settings.template_dir,
                        predecessors=dict(facts.predecessors), bases=facts.bases, repo=settings.repo,
                        merge_status=_merge_status((*send, *unchanged), runs, facts, head),
                        extra=[*_needs_hardware(views, settings, facts, head), *_bisect_sections(settings, "comment")],
                        calibrations=settings.calibrations, record_run=record_run(settings, facts),
                        vouched=vouched(facts))
    said, flagged = lookalikes(facts)
    notes += said
    summary += flagged
    quiet = update_only(settings, views)
    comment = _comment(build, settings, facts, quiet)
    if quiet and comment is None and settings.pr is not None:
        notes.append(f"no comment on #{settings.pr}: every runner's status is success (comment_mode = failures)")
    shown = comment.body if comment is not None else (
        build([])[0] if settings.pr is not None and settings.comment and not quiet else None)
    verdicts = {v.name: v.state for v in views if v.may_set_status}
    return PublishPlan(head, settings.repo, settings.pr, send, unchanged, runs, comment, shown, summary, tuple(notes),
                       verdicts, settings.verdicts_out, settings.comment_record)


def pending(runner: str, sha: str, settings: Settings, facts: Facts) -> PublishPlan:
    """A gate that has started on ``sha`` and not finished: its pending status and its comment placeholder."""
    status = publish.StatusPlan(sha, f"ds4ci/{runner}", "pending", f"running the parity gate on {runner}",
                                settings.target_url)
    section = render.pending_section(render.environment(settings.template_dir), runner, sha, settings.target_url)
    build = BodyBuilder([], run_url=settings.target_url, template_dir=settings.template_dir, predecessors={},
                        extra=[section], record_run=record_run(settings, facts), vouched=vouched(facts))
    comment = _comment(build, settings, facts)
    said, _ = lookalikes(facts)
    return PublishPlan(sha, settings.repo, settings.pr, (status,), (), (), comment,
                       None if comment is None else comment.body, "", tuple(said))


def _check_run_file(run: checkruns.CheckRunPlan) -> str:
    return f"check-run-{run.name.removeprefix('ds4ci/')}.md"


def files(made: PublishPlan) -> list[tuple[str, str]]:
    """The plan as the dry run's files: plan.json, the job summary, the comment, each check run (Markdown)."""
    out = [("plan.json", json.dumps(made.to_json(), indent=2, ensure_ascii=False) + "\n"), ("summary.md", made.summary)]
    if made.comment_body is not None:
        out.append(("comment.md", made.comment_body))
    for action in made.check_runs:
        run = action.run
        out.append((_check_run_file(run), f"# {run.name}: {run.conclusion}\n\n**Title**: {run.title}\n\n## Summary\n\n"
                                          f"{run.summary}\n\n## Text\n\n{run.text}\n"))
    return out


def listing(made: PublishPlan, folder: Path) -> str:
    """What the dry run prints: the comment, then each status and check run it would send, and where its files are."""
    lines = []
    body = made.comment_body
    if body is not None:
        lines.append(f"--- would create or update the ds4ci comment on {made.repo or '(repo)'}#{made.pr}: "
                     f"{folder / 'comment.md'} ({len(body.splitlines())} lines) ---\n{body}")
    for status in made.statuses:
        lines.append(f"--- would set status {status.context}={status.state} on {status.sha}: {status.description}\n")
    for action in made.check_runs:
        run = action.run
        lines.append(f"--- would create or update check run {run.name}={run.conclusion} on {run.head_sha}: "
                     f"{run.title} ({len(run.annotations)} annotation(s)): {folder / _check_run_file(run)}\n")
    lines.append(f"--- would write the job summary: {folder / 'summary.md'} ---\n")
    lines.append(f"--- the plan as JSON: {folder / 'plan.json'} ---\n")
    lines.append("--- dry run: nothing was sent (the PR's current head is not checked) ---\n")
    return "".join(lines)
