"""Carry out a :class:`~ds4ci.github.plan.PublishPlan`: only writes, in a safe order, nothing decided here.

Statuses first (pending ones first, green ones last), then the check runs, then the sticky comment, and last
(only once every write succeeded) each runner's decided state to ``--verdicts-out``. What the
plan found already said on GitHub is not sent again, so applying the same plan twice changes nothing. The
comment converges under concurrent publishers: after a write the comments changed since the plan's read are
read again; a duplicate is folded into the oldest, and sections another publisher's edit replaced are merged
again (with the plan's own renderer). Where the comment is ours by record (``ds4ci.github.commentrecord``) only
the comment the plan found, or the one this apply created, is read again or written: a look-alike is never
edited, deleted or merged from.
"""

from __future__ import annotations

import json
import random
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ds4ci.errors import PublishError, UsageError
from ds4ci.github.client import Client, Comment, ReadOnlyTokenError
from ds4ci.github.facts import ours_of, second_before
from ds4ci.github.plan import CheckRunAction, CommentPlan, PublishPlan
from ds4ci.report.sections import Section, parse_sections

UPSERT_ATTEMPTS = 6


@dataclass(frozen=True)
class UpsertOutcome:
    comment_id: int
    action: str  # "created", "updated" or "unchanged"
    deleted: int
    body: str  # the comment's body as GitHub returned it after the last write (or read: unchanged)


def _say(text: str) -> None:
    print(f"ds4ci: {text}", file=sys.stderr)


def apply(plan: PublishPlan, client: Client) -> None:
    for note in plan.notes:
        _say(note)
    for status in plan.statuses:
        if f"status:{status.context}" not in plan.done:
            client.create_status(status.sha, status.state, status.context, status.description, status.target_url)
            plan.done.add(f"status:{status.context}")
            _say(f"status {status.context}={status.state} on {status.sha}")
    for status in plan.unchanged:
        _say(f"status {status.context}={status.state} on {status.sha} (already set)")
    for action in plan.check_runs:
        if f"check-run:{action.run.name}" not in plan.done:
            _check_run(client, action)
            plan.done.add(f"check-run:{action.run.name}")
    if plan.comment is not None and "comment" not in plan.done:
        outcome = upsert(client, plan.comment)
        plan.done.add("comment")
        _say(f"comment {outcome.comment_id} {outcome.action} on #{plan.comment.pr}")
        if plan.comment_record is not None:
            write_record(plan.comment_record, outcome.comment_id, outcome.body)
    if plan.verdicts_out is not None:  # last: a publish that failed on the way leaves no verdict (fail closed)
        write_verdicts(plan.verdicts_out, plan.verdicts)


def write_verdicts(path: Path, verdicts: Mapping[str, str]) -> None:
    """{runner: state} as one JSON line: what gate.yml's job `verdict <runner>` succeeds or fails on."""
    from ds4ci.fileio import write_new

    try:
        write_new(path, (json.dumps(dict(verdicts), sort_keys=True) + "\n").encode("utf-8"))
    except OSError as exc:
        raise UsageError(f"--verdicts-out {path}: cannot write it: {exc.strerror or exc}") from exc


def write_record(path: Path, comment_id: int, body: str) -> None:
    """The comment's id, its body's SHA-256 and its record's artifact name, as one JSON line (``commentrecord``)."""
    from ds4ci.fileio import write_text_atomic
    from ds4ci.github.commentrecord import artifact_name, digest

    record = {"comment_id": comment_id, "sha256": digest(body), "artifact": artifact_name(comment_id, body)}
    try:
        write_text_atomic(path, json.dumps(record) + "\n")
    except OSError as exc:
        raise UsageError(f"--comment-record {path}: cannot write it: {exc.strerror or exc}") from exc


def _check_run(client: Client, action: CheckRunAction) -> None:
    run = action.run
    if action.unchanged:
        _say(f"check run {run.name}={run.conclusion} unchanged ({action.existing}) on {run.head_sha}")
        return
    try:
        if action.existing is not None:
            client.update_check_run(action.existing, run.name, run.conclusion, run.details_url, run.output())
            how = f"updated ({action.existing})"
        else:
            made, _ = client.create_check_run(run.name, run.head_sha, run.conclusion, run.details_url, run.output())
            how = f"created ({made})"
    except ReadOnlyTokenError:
        raise PublishError(
            f"GitHub refused check run {run.name}: the token may not write checks (the statuses were set). Give "
            "the publishing job `permissions: checks: write`, or set [publish] check_runs = false "
            "(--no-check-runs); a fork's read-only token publishes through report.yml instead"
        ) from None
    _say(f"check run {run.name}={run.conclusion} {how} on {run.head_sha}")


def _write(client: Client, comment: CommentPlan, ours: list[Comment], body: str) -> tuple[Comment | None, str, int]:
    """One write of the merged body: (the comment it went to, or None when nothing changed; action; deleted)."""
    if not ours:
        return client.create_comment(comment.pr, body), "created", 0
    keeper = ours[0]
    for dup in ours[1:]:
        client.delete_comment(dup.id)
    if keeper.body == body:
        return (None if len(ours) == 1 else keeper), "unchanged", len(ours) - 1
    return client.edit_comment(keeper.id, body), "updated", len(ours) - 1


def _own(comments: list[Comment], comment: CommentPlan, kept: set[int] | None) -> list[Comment]:
    """Ours among ``comments``: by record, only the ids kept (never a look-alike); by login, every marked one."""
    return [c for c in ours_of(comments, comment.author) if kept is None or c.id in kept]


def upsert(client: Client, comment: CommentPlan) -> UpsertOutcome:
    """Create or edit the one sticky comment as planned; converge on races (see the module's docstring)."""
    ours = list(comment.ours)
    kept = set(comment.kept) if comment.kept is not None else None
    body, sections = comment.body, list(comment.sections)
    action, deleted = "unchanged", 0
    for attempt in range(UPSERT_ATTEMPTS):
        if attempt:
            ours = _own(client.list_comments(comment.pr), comment, kept)
            body, sections = comment.build([s for c in ours for s in parse_sections(c.body)])
        wrote, how, gone = _write(client, comment, ours, body)
        deleted += gone
        if how == "created" or action == "unchanged":
            action = how  # a comment created stays "created" whatever later attempts did
        if wrote is None:
            assert ours
            return UpsertOutcome(ours[0].id, action, deleted, ours[0].body)
        if kept is not None:
            kept.add(wrote.id)
        wanted = [s for s in sections if s.runner in comment.build.runners]
        since = second_before(comment.seen_until) if attempt == 0 and how != "unchanged" else None
        after = _own(client.list_comments(comment.pr, since=since), comment, kept)
        if len(after) == 1 and after[0].id == wrote.id and _landed(after[0].body, wanted):
            return UpsertOutcome(after[0].id, action, deleted, wrote.body)
        time.sleep(random.uniform(0.05, 0.3) * (attempt + 1))
    raise PublishError(
        f"the ds4ci comment on #{comment.pr} kept changing under concurrent publishers after "
        f"{UPSERT_ATTEMPTS} attempts"
    )


def _landed(body: str, wanted: list[Section]) -> bool:
    present = {(s.runner, s.state, s.digest) for s in parse_sections(body)}
    return all((s.runner, s.state, s.digest) in present for s in wanted)
