"""Publishing one way (issue 43): the dry run's plan is what the real run sends; applying a plan twice changes nothing.

Every kind of document (pass, fail, error, a fork's unverified artifact, a focused rerun, a negative control) is
published twice from the same input: once with --dry-run (its plan.json and Markdown files), once against the
stateful fake GitHub API as the publishing job does (the Actions token, check runs on). What the fake holds
afterwards must be exactly the plan: every status, every check run, the comment, the job summary.
"""

from __future__ import annotations

import copy
import json
import re
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fakegithub import ACTIONS_LOGIN, APP_TOKEN, FakeGitHub, as_the_publishing_job
from paths import TESTS

from ds4ci.commands.publish import PublishRequest, publish_documents
from ds4ci.evidence.results import load as load_results
from ds4ci.github import apply, facts, plan, runnerview
from ds4ci.github.client import Client, connect
from ds4ci.github.verified import Published, labelled_unverified
from ds4ci.records import Results

DATA = TESTS / "data" / "results"
HEAD = json.loads((DATA / "pass.json").read_text())["revisions"]["head"]["sha"]
OLD = "a" * 40
RUN_URL = "https://github.com/acme/engine/actions/runs/7"
_VARIABLE = re.compile(r"[0-9a-f]{40}|\d+")  # a request's path with its SHAs and numbers named alike


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeGitHub]:
    yield from as_the_publishing_job(monkeypatch, 42, [OLD, HEAD])


def _doc(name: str) -> Results:
    return load_results(DATA / name)


def _focused() -> Results:
    doc = copy.deepcopy(_doc("pass.json"))
    doc["settings"]["scope"] = "focused"
    return doc


KINDS: dict[str, Callable[[], list[Published]]] = {
    "pass": lambda: [Published(_doc("pass.json"), may_set_status=True),
                     Published(_doc("pass-second-runner.json"), may_set_status=True)],
    "fail": lambda: [Published(_doc("fail.json"), may_set_status=True)],
    "error": lambda: [Published(_doc("error.json"), may_set_status=True)],
    "fork": lambda: [labelled_unverified(_doc("pass.json"))],
    "focused": lambda: [Published(_focused(), may_set_status=True)],
    "negative-control": lambda: [Published(_doc("negative-control.json"), may_set_status=True),
                                 Published(_doc("pass-second-runner.json"), may_set_status=True)],
}


def _request(fake: FakeGitHub, **kw: Any) -> PublishRequest:
    return PublishRequest(repo="acme/engine", pr=42, api_url=fake.url, target_url=RUN_URL, **kw)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_the_dry_runs_plan_is_what_the_real_run_sends(kind: str, fake: FakeGitHub, tmp_path: Path) -> None:
    dry = tmp_path / "dry"
    assert publish_documents(KINDS[kind](), _request(fake, dry_run=True, dry_run_dir=dry,
                                                     summary_file=tmp_path / "dry-summary.md")) == 0
    assert fake.requests == []
    planned = json.loads((dry / "plan.json").read_text(encoding="utf-8"))

    assert publish_documents(KINDS[kind](), _request(fake, summary_file=tmp_path / "summary.md")) == 0
    sent_statuses = [{"sha": HEAD, "context": s["context"], "state": s["state"], "description": s["description"],
                      "target_url": s["target_url"]} for s in fake.statuses(HEAD)]
    assert sent_statuses == planned["statuses"]
    sent_runs = sorted(({"name": r["name"], "head_sha": r["sha"], "conclusion": r["conclusion"],
                         "details_url": r["details_url"], "output": _output(r)} for r in fake.check_runs()),
                       key=lambda r: r["name"])
    assert sent_runs == sorted(({k: v for k, v in r.items() if k != "action"} for r in planned["check_runs"]),
                               key=lambda r: r["name"])
    (comment,) = [c for c in fake.comments(42) if c["login"] == ACTIONS_LOGIN]
    assert comment["body"] == planned["comment"]["body"] == (dry / "comment.md").read_text(encoding="utf-8")
    summary = (tmp_path / "summary.md").read_text(encoding="utf-8")
    assert summary == planned["summary"] == (dry / "summary.md").read_text(encoding="utf-8")
    for run in planned["check_runs"]:
        page = (dry / f"check-run-{run['name'].removeprefix('ds4ci/')}.md").read_text(encoding="utf-8")
        assert run["output"]["summary"] in page and run["output"]["text"] in page
    if kind == "fork":
        assert planned["statuses"] == [] and planned["check_runs"] == []
    else:
        assert planned["statuses"] and len(planned["check_runs"]) == len(planned["statuses"])


def _output(run: dict[str, Any]) -> dict[str, Any]:
    out = {k: run["output"][k] for k in ("title", "summary", "text")}
    if run.get("annotations"):
        out["annotations"] = run["annotations"]
    return out


def _plan_now(fake: FakeGitHub, published: list[Published]) -> tuple[plan.PublishPlan, Client]:
    client = Client(connect(APP_TOKEN, fake.url), "acme/engine")
    settings = facts.Settings(repo="acme/engine", pr=42, target_url=RUN_URL)
    seen = runnerview.viewed(published)
    found = facts.gather(client, settings, [w for _, w in seen], HEAD, [w.name for _, w in seen])
    views = runnerview.views_of(seen, HEAD, found.full_passes, allow_focused=False)
    return plan.make(views, settings, found), client


def _state(fake: FakeGitHub) -> Any:
    return (fake.statuses(), fake.check_runs(), fake.comments(42))


def _applied_once(fake: FakeGitHub, kind: str) -> tuple[plan.PublishPlan, Client, Any]:
    """The plan for ``kind`` applied once beside a person's comment, and what GitHub holds after it."""
    fake.add_comment(42, "a person's comment", "alice")
    made, client = _plan_now(fake, KINDS[kind]())
    apply.apply(made, client)
    return made, client, copy.deepcopy(_state(fake))


@pytest.mark.parametrize("kind", ["pass", "fail", "focused", "negative-control"])
def test_applying_the_same_plan_twice_changes_nothing(kind: str, fake: FakeGitHub) -> None:
    made, client, after_first = _applied_once(fake, kind)
    before = len(fake.requests)
    apply.apply(made, client)
    assert _state(fake) == after_first and fake.requests[before:] == []


@pytest.mark.parametrize("kind", ["pass", "fail", "focused", "negative-control"])
def test_publishing_the_same_documents_again_writes_nothing(kind: str, fake: FakeGitHub) -> None:
    made, client, after_first = _applied_once(fake, kind)
    again, _ = _plan_now(fake, KINDS[kind]())  # planned afresh from what GitHub now says
    assert again.statuses == () and [s.context for s in again.unchanged] == [s.context for s in made.statuses]
    assert all(a.unchanged for a in again.check_runs) and len(again.check_runs) == len(made.check_runs)
    assert again.comment is not None and again.comment.action == "unchanged"
    before = len(fake.requests)
    apply.apply(again, client)
    assert _state(fake) == after_first
    assert [m for m, _ in fake.requests[before:] if m != "GET"] == []


def _count(fake: FakeGitHub, *published: Published) -> Counter[str]:
    before = len(fake.requests)
    assert publish_documents(list(published), _request(fake)) == 0
    return Counter(f"{m} {_VARIABLE.sub('#', p)}" for m, p in fake.requests[before:])


def test_first_publish_and_update_on_a_pr_with_150_comments_take_at_most_13_and_17_requests(fake: FakeGitHub) -> None:
    """12 and 16 before the base comparison; it adds one read, the base commit's statuses (a base never gated reads
    no more; the pull request is read once, for its head and for its base)."""
    for i in range(150):
        fake.add_comment(42, f"review comment {i}", "someone")
    first = _count(fake, *KINDS["pass"]())
    assert sum(first.values()) <= 13, first
    update = _count(fake, Published(_doc("fail.json"), may_set_status=True),
                    Published(_doc("pass-second-runner.json"), may_set_status=True))
    # 4 more: the record that the comment found is ours (the run it names, the repository's default branch, that
    # run in its history, the run's artifacts), as github-actions[bot] posts for every workflow
    assert sum(update.values()) <= 17, update
    again = _count(fake, Published(_doc("fail.json"), may_set_status=True),
                   Published(_doc("pass-second-runner.json"), may_set_status=True))
    assert not [k for k in again if not k.startswith("GET ")], again  # nothing new to say: nothing written
    assert len([c for c in fake.comments(42) if c["login"] == ACTIONS_LOGIN]) == 1
    assert fake.latest_states(HEAD) == {"ds4ci/gfx1151": "failure", "ds4ci/gfx1151-b": "success"}


def test_statuses_go_pending_first_and_green_last(fake: FakeGitHub) -> None:
    """A publish cut short never leaves a runner green beside a verdict not yet written."""
    published = [Published(_doc("pass-second-runner.json"), may_set_status=True),
                 Published(_doc("fail.json"), may_set_status=True)]
    focused = copy.deepcopy(_doc("pass-second-runner.json"))
    focused["runner"]["name"] = "gfx1151-c"
    focused["settings"]["scope"] = "focused"  # no full pass on an ancestor: held back as pending
    published.append(Published(focused, may_set_status=True))
    assert publish_documents(published, _request(fake)) == 0
    assert [(s["context"], s["state"]) for s in fake.statuses(HEAD)] == [
        ("ds4ci/gfx1151-c", "pending"), ("ds4ci/gfx1151", "failure"), ("ds4ci/gfx1151-b", "success")]


def test_a_comment_older_than_the_publishers_last_status_is_still_found(fake: FakeGitHub) -> None:
    """The first read takes the comments updated since the publisher's last status on the head; where ours is not
    among them (it said the same then), every comment is read: never a second sticky comment."""
    for i in range(120):
        fake.add_comment(42, f"review comment {i}", "someone")
    assert publish_documents(KINDS["fail"](), _request(fake)) == 0
    for i in range(3):
        fake.add_comment(42, f"later comment {i}", "someone")
    fake.add_status(HEAD, "ds4ci/other-runner", "success", "pass", creator=ACTIONS_LOGIN)  # newer than our comment
    before = len(fake.requests)
    assert publish_documents(KINDS["pass"](), _request(fake)) == 0
    listed = [p for m, p in fake.requests[before:] if m == "GET" and p.endswith("/issues/42/comments")]
    assert len(listed) == 1 + 2 + 1  # the recent ones (none of ours), every page, the check after the edit
    (comment,) = [c for c in fake.comments(42) if c["login"] == ACTIONS_LOGIN]
    assert "gfx1151-b" in comment["body"] and "✅" in comment["body"]


def test_refused_results_still_reach_the_job_summary(fake: FakeGitHub, tmp_path: Path) -> None:
    """Refused before anything is planned (no head recorded, or the PR moved on): nothing is sent, and the job
    summary still shows the results."""
    from ds4ci.errors import UsageError

    summary = tmp_path / "summary.md"
    with pytest.raises(UsageError, match="revisions/head"):
        publish_documents([Published(_doc("no-revisions.json"), may_set_status=True)],
                          _request(fake, summary_file=summary))
    assert "parity gate (job summary)" in summary.read_text(encoding="utf-8") and fake.requests == []
    fake.move_head(42, "c" * 40)
    moved = tmp_path / "moved.md"
    with pytest.raises(UsageError, match="stale"):
        publish_documents(KINDS["fail"](), _request(fake, summary_file=moved))
    assert "parity gate (job summary)" in moved.read_text(encoding="utf-8")
    assert fake.statuses() == [] and fake.comments(42) == [] and fake.check_runs() == []
