"""What publishing reads from GitHub, read once and before any write: the facts a :class:`PublishPlan` is made from.

Every read happens here (the publisher's identity, the pull request's head, the publisher's statuses and check
runs on the head, the sticky comment, the history a focused rerun or a failing runner needs, the review state
for the merge checklist); the plan (``ds4ci.github.plan``) is a pure function of these facts and the verified
documents, and ``ds4ci.github.apply`` only writes.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ds4ci.errors import PublishError
from ds4ci.github import checkruns, commentrecord, publish, statuses
from ds4ci.github.client import Client, Comment
from ds4ci.github.merge import MergeFacts, Requirements, Vouch
from ds4ci.github.runnerview import is_focused
from ds4ci.report.docview.compare import BaseResult
from ds4ci.report.sections import MARKER

if TYPE_CHECKING:
    from ds4ci.github.publish import Vouched
    from ds4ci.records import BisectResult
    from ds4ci.report.docview import DocView


@dataclass(frozen=True)
class Facts:
    """GitHub as the publisher found it. The default (nothing read) is a dry run's: a first publish."""

    publisher: str | None = None  # whose statuses, check runs and comment are ours
    app: str | None = None  # the publisher's GitHub App (check runs); None: a person's token
    own_statuses: Mapping[str, statuses.Status] | None = None  # context -> our newest on the head; None: not read
    own_runs: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # name -> our newest check run (JSON)
    comments: tuple[Comment, ...] = ()  # our sticky comments, oldest first (by record: at most one)
    comment_run: int | None = None  # the run whose record vouches that comments[0] is ours (commentrecord)
    lookalikes: tuple[tuple[Comment, str], ...] = ()  # marked comments by the publisher's login not ours, and why
    seen_until: str | None = None  # the newest updated_at of all the comments read
    full_passes: Mapping[str, str | None] = field(default_factory=dict)  # focused runner -> ancestor's full pass
    predecessors: Mapping[str, str] = field(default_factory=dict)  # runner -> last hardware-validated commit
    missing: Mapping[str, tuple[str | None, tuple[str, ...], tuple[str, ...]]] = field(default_factory=dict)
    merge: tuple[MergeFacts, Requirements] | None = None
    # runner -> what will vouch for its ds4ci/<runner> once this publish's status (linking the run at
    # target_url) is set: by state, "success" or "other" (the merge checklist's gate rows, laid by the plan)
    vouches_after: Mapping[str, Mapping[str, Vouch]] = field(default_factory=dict)
    bases: Mapping[str, BaseResult] = field(default_factory=dict)  # runner -> the base branch's result (baseline)


@dataclass(frozen=True)
class Settings:
    """What the publish asks for (the CLI's options): which facts are read, and what the plan holds."""

    repo: str | None = None
    pr: int | None = None
    target_url: str | None = None
    template_dir: Path | None = None
    comment_mode: str = "always"  # always | failures (a new comment only where a status is not success) | off
    status: bool = True
    check_runs: bool = True
    expect_runners: tuple[str, ...] = ()
    comment_author: str | None = None  # an installation token's bot account, where GET /user cannot say
    merge_config: Path | None = None  # the "Review and merge status" checklist's requirements
    expect_config: Path | None = None  # the trusted ds4ci.toml: its [merge] table, where merge_config is not given
    calibrations: Mapping[str, str] = field(default_factory=dict)  # runner -> its latest calibration, cited
    bisects: tuple[BisectResult, ...] = ()  # runners' `ds4ci bisect --json` results: a section each, never a status
    verdicts_out: Path | None = None  # where apply writes each runner's decided state, after every write
    comment_record: Path | None = None  # where apply writes the id of the comment it wrote (commentrecord)
    api_url: str | None = None
    token_env: str = "GITHUB_TOKEN"  # noqa: S105 - the name of the variable, not a token
    own_run: int | None = None  # the run this publish runs in (None: the one target_url names); commentrecord

    @property
    def comment(self) -> bool:
        """Whether the sticky comment is written at all (``comment_mode`` is not ``off``)."""
        return self.comment_mode != "off"


class Reads(Client):
    """A client that reads each commit's statuses and check runs and the PR's commits once per publish."""

    def __init__(self, client: Client) -> None:
        super().__init__(client._gh, client.repo)
        self._memo: dict[tuple[str, str], Any] = {}

    def _once(self, key: tuple[str, str], read: Any) -> Any:
        if key not in self._memo:
            self._memo[key] = read()
        return self._memo[key]

    def pr_commits(self, number: int) -> list[str]:
        return list(self._once(("commits", str(number)), lambda: super(Reads, self).pr_commits(number)))

    def commit_statuses(self, sha: str) -> list[Any]:
        return list(self._once(("statuses", sha), lambda: super(Reads, self).commit_statuses(sha)))

    def check_runs(self, sha: str) -> list[Any]:
        return list(self._once(("runs", sha), lambda: super(Reads, self).check_runs(sha)))

    def first_pull(self, number: int) -> dict[str, Any]:
        """The pull request as first read (its head, its base commit); ``pull`` reads it afresh (mergeable, a move)."""
        return dict(self._once(("pull", str(number)), lambda: self.pull(number)))

    def pr_head(self, number: int) -> str:
        """The head of the first read of the pull request (its base commit comes from the same answer)."""
        sha = (self.first_pull(number).get("head") or {}).get("sha")
        if not isinstance(sha, str):
            raise PublishError(f"pull request #{number}: GitHub's answer has no head SHA")
        return sha


def _identity_or_none(client: Client, comment_author: str | None) -> str | None:
    try:
        return client.identity(comment_author)
    except PublishError:
        return None  # an app token outside Actions: its check runs are created, never looked up


def _own_runs(client: Client, head: str, app: str | None) -> dict[str, Mapping[str, Any]]:
    """name -> our app's newest check run of that name on the head, as GitHub lists it (its output with it)."""
    if app is None:
        return {}
    from ds4ci.github import shapes

    raw = client.check_runs(head)
    runs = shapes.check_runs(raw, head)
    newest = {name: checkruns.own_run(runs, name, head, app) for name in {r.name for r in runs}}
    by_id = {item["id"]: item for item in raw if isinstance(item, dict)}
    return {name: by_id[run.id] for name, run in newest.items() if run is not None}


def second_before(stamp: str | None) -> str | None:
    """One second before a GitHub timestamp: a ``since`` read from it takes in that whole second."""
    if not stamp:
        return None
    try:
        when = datetime.fromisoformat(stamp.replace("Z", "+00:00")) - timedelta(seconds=1)
    except ValueError:
        return None
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def ours_of(comments: Sequence[Comment], publisher: str) -> tuple[Comment, ...]:
    """The publisher's sticky comments, oldest first (the oldest is the one kept)."""
    return tuple(sorted((c for c in comments if c.author == publisher and c.body.startswith(MARKER)),
                        key=lambda c: (c.created_at, c.id)))


def run_records(client: Client, pr: int, config: Path | None) -> commentrecord.RunRecords:
    """What each run's record says (``commentrecord``): its artifacts' names where it is a run of the trusted gate
    (the trusted config's ``merge.workflow``) on the default branch, read only when asked."""
    from ds4ci.github import mergeconfig, vouch

    made: list[vouch.Voucher] = []

    def records(run_id: int) -> tuple[frozenset[str] | None, str]:
        if not made:
            table = mergeconfig.load_merge_table(config) if config is not None else {}
            need = mergeconfig.trusted_gate(table, commentrecord.SHARED_LOGIN)
            made.append(vouch.Voucher(client, client.repo, need))
        why = made[0].run_problem(run_id)
        return (None, why) if why is not None else (frozenset(client.run_artifact_names(run_id)), "")

    return records


def _comments(client: Client, pr: int, publisher: str, last_publish: str | None, config: Path | None
              ) -> tuple[commentrecord.Sorted, str | None]:
    """Our sticky comment(s) and the look-alikes (``commentrecord.sort``), and the newest ``updated_at`` of every
    comment read.

    A publish writes its statuses, then the comment: where the publisher's newest status on this head is at
    ``last_publish``, a comment that publish created or edited is among those updated since (one page on a
    long PR). Where none of ours is, every comment is read.
    """
    records = run_records(client, pr, config)
    since = second_before(last_publish)
    if since is not None:
        recent = client.list_comments(pr, since=since)
        mine = commentrecord.sort(ours_of(recent, publisher), publisher, records)
        if mine.ours:
            return mine, max(c.updated_at for c in recent)
    every = client.list_comments(pr)
    return (commentrecord.sort(ours_of(every, publisher), publisher, records),
            max((c.updated_at for c in every if c.updated_at), default=None))


def gather(client: Client, settings: Settings, docs: Sequence[DocView], head: str, trusted: Sequence[str]) -> Facts:
    """Every read, before any write; refuses stale results (the PR moved on) before anything is planned.

    ``docs`` are the documents to publish, ``trusted`` the runners that get a status and a check run.
    """
    reads = Reads(client)
    pr = settings.pr
    focused = [d.name for d in docs if is_focused(d)]
    history = pr is not None and (settings.comment or bool(focused))
    publisher = client.identity(settings.comment_author) if history else None
    if pr is not None:
        current = reads.pr_head(pr)  # read once: the base comparison takes the base commit from the same answer
        if current != head:
            raise publish.StaleResultsError(
                f"pull request #{pr} is now at {current} but the results are for {head}: refusing to publish "
                "stale results (re-run the gate on the new head)"
            )
    checks = settings.check_runs and bool(trusted)
    identity = publisher or (_identity_or_none(client, settings.comment_author) if checks else None)
    app = checkruns.app_of(identity) if checks else None
    own, last_publish = None, None
    if settings.status and trusted and identity is not None:
        raw = reads.commit_statuses(head)
        own = statuses.from_creator(statuses.parse(raw, head), identity)
        last_publish = max((str(i.get("created_at") or "") for i in raw if isinstance(i, dict)
                            and (i.get("creator") or {}).get("login") == identity), default=None) or None
    vouched = _voucher(reads, pr, publisher, settings.merge_config or settings.expect_config)
    full = {r: publish.last_full_pass(reads, pr, head, r, publisher, vouched)
            for r in focused if r in trusted and pr is not None and publisher is not None}
    facts = Facts(publisher=identity, app=app, own_statuses=own, own_runs=_own_runs(reads, head, app),
                  full_passes=full)
    if pr is None or not settings.comment or publisher is None:
        return facts
    return _comment_facts(reads, settings, facts, docs, head, publisher, last_publish, vouched,
                          [r for r in trusted if settings.status])


def _voucher(client: Client, pr: int | None, publisher: str | None, config: Path | None) -> Vouched | None:
    """What vouches for an older commit's green (``ds4ci.github.vouch``), as the trusted config's [merge] says."""
    from ds4ci.github import mergeconfig, vouch

    if pr is None or publisher is None:
        return None
    need = mergeconfig.trusted_gate(mergeconfig.load_merge_table(config) if config is not None else {}, publisher)
    made: list[vouch.Voucher] = []

    def judged(sha: str, runner: str) -> Vouch:  # made only when a green is judged
        if not made:
            made.append(vouch.Voucher(client, client.repo, need))
        return made[0].judge_commit(sha, runner)

    return judged


def _bases(client: Client, pr: int, runners: Sequence[str], publisher: str, vouched: Vouched | None
           ) -> dict[str, BaseResult]:
    """Each runner's result on the pull request's base commit (``ds4ci.github.baseline``)."""
    from ds4ci.github import baseline

    sha = baseline.base_sha(client.first_pull(pr) if isinstance(client, Reads) else client.pull(pr))
    if sha is None or vouched is None:
        return {}
    return baseline.results(client, sha, runners, publisher, vouched)


def for_pending(client: Client, settings: Settings, sha: str) -> Facts:
    """What a pending status and its comment placeholder need: the PR still at ``sha``, our sticky comment."""
    pr = settings.pr
    if pr is not None and client.pr_head(pr) != sha:
        raise publish.StaleResultsError(f"--sha {sha} is not the current head of pull request #{pr}")
    if pr is None or not settings.comment:
        return Facts()
    author = client.identity(settings.comment_author)
    found, seen = _comments(client, pr, author, None, None)
    return Facts(publisher=author, comments=found.ours, comment_run=found.run, lookalikes=found.lookalikes,
                 seen_until=seen)


def _comment_facts(client: Client, settings: Settings, facts: Facts, docs: Sequence[DocView], head: str,
                   publisher: str, last_publish: str | None, vouched: Vouched | None,
                   publishing: Sequence[str]) -> Facts:
    """The sticky comment, each failing runner's predecessor, the runners without a result, the merge state."""
    assert settings.pr is not None
    pr = settings.pr
    predecessors = {}
    for doc in docs:
        if doc.verdict != "pass":
            older = publish.last_validated_predecessor(client, pr, head, doc.name, publisher, vouched)
            if older:
                predecessors[doc.name] = older
    present = {d.name for d in docs}
    missing = {}
    for runner in settings.expect_runners:
        if runner in present:
            continue
        older = publish.last_validated_predecessor(client, pr, head, runner, publisher, vouched)
        commits, files = client.compare(older, head) if older else ([], [])
        missing[runner] = (older, tuple(commits), tuple(files))
    found, seen = _comments(client, pr, publisher, last_publish, settings.merge_config or settings.expect_config)
    bases = _bases(client, pr, [d.name for d in docs], publisher, vouched)
    facts = replace(facts, comments=found.ours, comment_run=found.run, lookalikes=found.lookalikes, seen_until=seen,
                    predecessors=predecessors, missing=missing, bases=bases)
    return _merge_facts(client, pr, settings, facts, head, publishing) if settings.merge_config is not None else facts


def _merge_facts(client: Client, pr: int, settings: Settings, facts: Facts, head: str,
                 publishing: Sequence[str]) -> Facts:
    """The review and merge state, read before the writes (the plan lays this run's statuses over it), and what
    will vouch for each runner's green once this publish's status links the run at ``target_url``."""
    from ds4ci.github import mergeconfig, mergefacts, vouch
    from ds4ci.github.client import DEFAULT_API_URL, THROTTLE_ENV

    assert settings.merge_config is not None
    need = mergeconfig.requirements(settings.merge_config, None, None, None)  # the publisher: merge.publisher
    url = (settings.api_url or os.environ.get("GITHUB_API_URL") or DEFAULT_API_URL).rstrip("/")
    polite = os.environ.get(THROTTLE_ENV, "1") != "0"
    gql = mergefacts.GraphQL(mergefacts.graphql_url(url), os.environ.get(settings.token_env, ""),
                             backoff_s=1.0 if polite else 0.0)
    found = mergefacts.gather(client, gql, client.repo, pr, need, mergeable_delay_s=2.0 if polite else 0.0)
    voucher = vouch.Voucher(client, client.repo, need)
    after: dict[str, dict[str, Vouch]] = {}
    green_on = dict(found.gate_green_on)
    for runner in (r for r in need.runners if r in publishing):
        context = f"ds4ci/{runner}"
        after[runner] = {state: voucher.judge(head, runner, (statuses.Status(context, state, "", facts.publisher or "",
                                                                             settings.target_url or ""),
                                                             *found.statuses), found.check_runs)
                         for state in ("success", "other")}
        if runner not in green_on and not all(v.green for v in after[runner].values()):
            older = publish.last_validated_predecessor(client, pr, head, runner, need.publisher,
                                                       vouched=voucher.judge_commit)
            if older:
                green_on[runner] = older
    return replace(facts, merge=(replace(found, gate_green_on=green_on), need), vouches_after=after)
