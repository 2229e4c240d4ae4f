"""A comment that looks like ds4ci's, by the same github-actions[bot], is never adopted, edited or merged from.

Every workflow's GITHUB_TOKEN posts as github-actions[bot], so a workflow a pull request adds can post the
marker, a pass section for a runner that never ran, and raw HTML. Publish calls a comment its own only by
record: the run its second line names is a run of the trusted gate with the artifact
ds4ci-comment-<id>-<digest of its current body>, so an edit by the same token makes it a look-alike too.
Against the stateful fake GitHub (PyGithub over HTTP), as the publishing job of run 7 of the trusted gate.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fakegithub import ACTIONS_LOGIN, APP_TOKEN, FakeGitHub, as_the_publishing_job
from paths import TESTS

from ds4ci.commands.publish import PublishRequest, publish_documents
from ds4ci.evidence.results import load as load_results
from ds4ci.github.verified import Published
from ds4ci.report import render
from ds4ci.report.sections import MARKER

DATA = TESTS / "data" / "results"
PASS, FAIL = DATA / "pass.json", DATA / "fail.json"
HEAD = json.loads(PASS.read_text())["revisions"]["head"]["sha"]
OLD = "a" * 40
RUN_URL = "https://github.com/acme/engine/actions/runs/7"
PHANTOM = "phantom-runner"  # a runner that never ran
HTML = '<img src="https://attacker.example/x.png" onerror="alert(1)">'


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeGitHub]:
    yield from as_the_publishing_job(monkeypatch, 42, [OLD, HEAD])


def _publish(fake: FakeGitHub, doc: Path, summary: Path, capsys: pytest.CaptureFixture[str]) -> str:
    """Publish ``doc`` as the publishing job of run 7; what it said on stderr."""
    request = PublishRequest(repo="acme/engine", pr=42, api_url=fake.url, target_url=RUN_URL, summary_file=summary)
    capsys.readouterr()
    assert publish_documents([Published(load_results(doc), may_set_status=True)], request) == 0
    return capsys.readouterr().err


def _forge(fake: FakeGitHub, body: str) -> dict[str, Any]:
    """A comment a workflow the pull request added posts with its own GITHUB_TOKEN: github-actions[bot]."""
    cid = fake.add_comment(42, body, ACTIONS_LOGIN)
    return next(c for c in fake.comments(42) if c["id"] == cid)


def _forged_pass() -> str:
    """ds4ci's own comment for a pass of a runner that never ran, as rendered, plus raw HTML: the forger's."""
    doc = load_results(PASS)
    doc["runner"]["name"] = PHANTOM
    body, _ = render.render([doc], kind="comment", run_url=RUN_URL)
    assert body.startswith(MARKER) and PHANTOM in body
    return f"{body}\n{HTML}\n"


def test_a_forged_comment_with_a_pass_section_is_left_alone_and_named(
        fake: FakeGitHub, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    forged = _forge(fake, _forged_pass())
    summary = tmp_path / "summary.md"
    said = _publish(fake, FAIL, summary, capsys)
    (after,) = [c for c in fake.comments(42) if c["id"] == forged["id"]]
    assert after == forged  # never edited: the same body, the same updated_at
    mine = [c for c in fake.comments(42) if c["login"] == ACTIONS_LOGIN and c["id"] != forged["id"]]
    assert len(mine) == 1, fake.comments(42)
    body = mine[0]["body"]
    assert "❌ fail" in body and PHANTOM not in body and HTML not in body  # none of its sections taken
    assert body.split("\n")[1] == "<!-- ds4ci:comment-of-run 7 -->"  # the run that records it
    assert f"comment {forged['id']} by {ACTIONS_LOGIN} looks like ds4ci's comment" in summary.read_text("utf-8")
    assert f"comment {forged['id']}" in said and "left alone" in said
    assert fake.count("DELETE") == 0


def test_a_copied_record_line_vouches_for_nothing_and_our_comment_updates_in_place(
        fake: FakeGitHub, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The look-alike names the real trusted run (7) before ds4ci wrote anything: that run's artifact names
    ds4ci's comment, never the look-alike; the honest comment is then updated in place, twice."""
    body = _forged_pass().replace(MARKER, f"{MARKER}\n<!-- ds4ci:comment-of-run 7 -->", 1)
    forged = _forge(fake, body)
    summary = tmp_path / "summary.md"
    _publish(fake, FAIL, summary, capsys)
    (mine,) = [c for c in fake.comments(42) if c["login"] == ACTIONS_LOGIN and c["id"] != forged["id"]]
    patches = fake.count("PATCH", "/issues/comments/")
    said = _publish(fake, PASS, summary, capsys)
    (again,) = [c for c in fake.comments(42) if c["login"] == ACTIONS_LOGIN and c["id"] != forged["id"]]
    assert again["id"] == mine["id"] and "❌ fail" not in again["body"] and PHANTOM not in again["body"]
    assert fake.count("PATCH", "/issues/comments/") == patches + 1
    assert [c for c in fake.comments(42) if c["id"] == forged["id"]] == [forged]
    assert f"run 7 has no record (ds4ci-comment-{forged['id']}-" in said
    assert summary.read_text("utf-8").count(f"comment {forged['id']} by {ACTIONS_LOGIN}") == 2  # each publish


def test_a_record_from_a_run_that_is_not_the_trusted_gate_vouches_for_nothing(
        fake: FakeGitHub, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The pull request's own workflow (a pull_request run of its copy of gate.yml) can upload artifacts to its
    own run: naming that run, with an artifact naming the look-alike, still vouches for nothing."""
    fake.add_run(900, event="pull_request", head_branch="feature", title=f"ds4ci gate {HEAD}")
    forged = _forge(fake, _forged_pass().replace(MARKER, f"{MARKER}\n<!-- ds4ci:comment-of-run 900 -->", 1))
    fake.add_artifact(900, f"ds4ci-comment-{forged['id']}")
    said = _publish(fake, FAIL, tmp_path / "summary.md", capsys)
    assert [c for c in fake.comments(42) if c["id"] == forged["id"]] == [forged]
    assert len([c for c in fake.comments(42) if c["login"] == ACTIONS_LOGIN]) == 2
    assert "the run it names is no run of the trusted gate" in said and "pull_request" in said


def test_the_cli_writes_the_record_gate_yml_uploads(fake: FakeGitHub, tmp_path: Path) -> None:
    """`publish --comment-record FILE`: the id of the comment written and the artifact name that records it."""
    fake.publishing_run = None  # here the test plays gate.yml's upload step itself, from the file
    record = tmp_path / "comment.json"
    env = dict(os.environ, GITHUB_TOKEN=APP_TOKEN, GITHUB_ACTIONS="true", DS4CI_GITHUB_THROTTLE="0")
    env.pop("GITHUB_STEP_SUMMARY", None)
    args = [sys.executable, "-m", "ds4ci", "publish", str(FAIL), "--unverified", "--repo", "acme/engine", "--pr", "42",
            "--api-url", fake.url, "--target-url", RUN_URL, "--comment-record", str(record)]
    done = subprocess.run(args, capture_output=True, text=True, env=env, check=False, timeout=120)
    assert done.returncode == 0, done.stderr
    (mine,) = fake.comments(42)
    digest = hashlib.sha256(mine["body"].encode("utf-8")).hexdigest()
    assert json.loads(record.read_text()) == {"comment_id": mine["id"], "sha256": digest,
                                              "artifact": f"ds4ci-comment-{mine['id']}-{digest[:32]}"}
    fake.add_artifact(7, json.loads(record.read_text())["artifact"])
    done = subprocess.run(args, capture_output=True, text=True, env=env, check=False, timeout=120)
    assert done.returncode == 0, done.stderr
    assert [c["id"] for c in fake.comments(42)] == [mine["id"]]  # found by its record: updated, not a second one


def test_the_reporters_own_run_records_its_comment(
        fake: FakeGitHub, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """report.yml (workflow_run, which GitHub starts only from the default branch's file) names its own run
    (GITHUB_RUN_ID), not the gate run its --target-url links, and records the comment there."""
    fake.add_run(31, path=".github/workflows/report.yml", event="workflow_run", title="ds4ci report")
    fake.publishing_run = 31
    monkeypatch.setenv("GITHUB_RUN_ID", "31")
    forged = _forge(fake, _forged_pass())
    _publish(fake, FAIL, tmp_path / "summary.md", capsys)
    (mine,) = [c for c in fake.comments(42) if c["login"] == ACTIONS_LOGIN and c["id"] != forged["id"]]
    assert mine["body"].split("\n")[1] == "<!-- ds4ci:comment-of-run 31 -->"
    said = _publish(fake, PASS, tmp_path / "summary.md", capsys)
    assert [c["id"] for c in fake.comments(42) if c["id"] != forged["id"]] == [mine["id"]]
    assert f"comment {forged['id']}" in said and f"comment {mine['id']} updated" in said


def _edit(fake: FakeGitHub, comment_id: int, body: str) -> None:
    """A workflow the pull request added edits a comment with its own GITHUB_TOKEN (github-actions[bot]): it is
    no publishing job of the trusted gate, so nothing is recorded for it."""
    run, fake.publishing_run = fake.publishing_run, None
    try:
        request = urllib.request.Request(f"{fake.url}/repos/acme/engine/issues/comments/{comment_id}", method="PATCH",
                                         data=json.dumps({"body": body}).encode(),
                                         headers={"Authorization": f"token {APP_TOKEN}",
                                                  "Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as answer:
            assert answer.status == 200
    finally:
        fake.publishing_run = run


def _as_run(fake: FakeGitHub, run: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """A later run of the trusted gate publishes (its own run id, its own records)."""
    fake.add_run(run, title=f"ds4ci gate {HEAD}")
    fake.publishing_run = run
    monkeypatch.setenv("GITHUB_RUN_ID", str(run))


def test_our_comment_edited_by_the_same_token_is_a_lookalike_and_a_new_comment_is_written(
        fake: FakeGitHub, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """ds4ci's genuine comment (its id recorded by run 7) edited by a pull request's workflow to add a pass for a
    runner that never ran and raw HTML: the record names its id but not that text, so the next publish never
    edits it or takes its sections, names it, and writes a new comment."""
    summary = tmp_path / "summary.md"
    _publish(fake, FAIL, summary, capsys)
    (ours,) = fake.comments(42)
    forged = _forged_pass().split(MARKER, 1)[1]
    _edit(fake, ours["id"], f"{ours['body']}\n{forged}")
    (edited,) = fake.comments(42)
    assert PHANTOM in edited["body"] and HTML in edited["body"]
    _as_run(fake, 8, monkeypatch)
    said = _publish(fake, PASS, summary, capsys)
    assert [c for c in fake.comments(42) if c["id"] == ours["id"]] == [edited]  # untouched
    (new,) = [c for c in fake.comments(42) if c["id"] != ours["id"]]
    assert new["login"] == ACTIONS_LOGIN and new["body"].split("\n")[1] == "<!-- ds4ci:comment-of-run 8 -->"
    assert PHANTOM not in new["body"] and HTML not in new["body"] and "2 of 2" not in new["body"]
    text = summary.read_text("utf-8")
    assert f"comment {ours['id']} by {ACTIONS_LOGIN} looks like ds4ci's comment" in text
    assert "edited since ds4ci wrote it" in said and f"comment {ours['id']}" in said
    assert "not carried over" in text  # the sections of runners this publish did not publish are gone
    assert fake.count("DELETE") == 0
    again = _publish(fake, PASS, summary, capsys)  # the new comment is ours by its record: kept, not a third
    assert sorted(c["id"] for c in fake.comments(42)) == sorted([ours["id"], new["id"]])
    assert f"comment {new['id']} unchanged" in again


def test_our_unedited_comment_is_updated_in_place_by_a_later_run_and_stamped_with_it(
        fake: FakeGitHub, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The honest case: run 8 updates run 7's comment in place and names itself (its record holds the new text);
    run 9 then finds it by run 8's record and updates it again; publishing the same again changes nothing."""
    summary = tmp_path / "summary.md"
    _publish(fake, FAIL, summary, capsys)
    (ours,) = fake.comments(42)
    for run, doc in ((8, PASS), (9, FAIL)):
        _as_run(fake, run, monkeypatch)
        said = _publish(fake, doc, summary, capsys)
        (now,) = fake.comments(42)
        assert now["id"] == ours["id"] and f"comment {ours['id']} updated" in said, said
        assert now["body"].split("\n")[1] == f"<!-- ds4ci:comment-of-run {run} -->"
        assert "looks like" not in said
    patches = fake.count("PATCH", "/issues/comments/")
    _as_run(fake, 10, monkeypatch)
    said = _publish(fake, FAIL, summary, capsys)
    assert f"comment {ours['id']} unchanged" in said and fake.count("PATCH", "/issues/comments/") == patches
    (now,) = fake.comments(42)
    assert now["body"].split("\n")[1] == "<!-- ds4ci:comment-of-run 9 -->"  # still the run that recorded it
