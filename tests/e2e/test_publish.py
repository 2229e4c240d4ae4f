"""ds4ci publish against the stateful fake GitHub API (real HTTP on loopback, real processes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fakegithub import APP_TOKEN, BOT_LOGIN, READ_TOKEN, WRITE_TOKEN, FakeGitHub
from paths import TESTS

from ds4ci.commands.publish import PublishRequest, publish_documents, run_publish
from ds4ci.errors import PublishError, UsageError
from ds4ci.evidence.results import load as load_results
from ds4ci.github.verified import Published
from ds4ci.report import render
from ds4ci.report.docview import load
from ds4ci.report.sections import MARKER, parse_sections

DATA = TESTS / "data" / "results"
PASS = DATA / "pass.json"
FAIL = DATA / "fail.json"
ERROR = DATA / "error.json"
CONTROL = DATA / "negative-control.json"
SECOND = DATA / "pass-second-runner.json"
HEAD = json.loads(PASS.read_text())["revisions"]["head"]["sha"]
OLD = "a" * 40
NEWER = "b" * 40
RUN_URL = "https://github.com/acme/engine/actions/runs/7"


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeGitHub]:
    server = FakeGitHub().start()
    server.add_pull(42, HEAD, [OLD, HEAD])
    monkeypatch.setenv("DS4CI_GITHUB_THROTTLE", "0")
    monkeypatch.setenv("GITHUB_TOKEN", WRITE_TOKEN)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    yield server
    server.stop()


def publish(fake: FakeGitHub, *results: Path, **kw: Any) -> int:
    """Publishing mechanics on documents the trust step accepted.

    These hand-built documents have no evidence bundle, so they enter after ``verified.load``
    (which tests/e2e/test_publish_bundles.py exercises on real bundles from real gate runs).
    """
    args: dict[str, Any] = {"repo": "acme/engine", "pr": 42, "api_url": fake.url, "target_url": RUN_URL}
    args.update(kw)
    if args.pop("pending", False):
        runner = args.pop("runner", None)
        return run_publish(list(results), PublishRequest(**args), pending=True, runner=runner)
    return publish_documents([Published(load_results(p), may_set_status=True) for p in results], PublishRequest(**args))


def ours(fake: FakeGitHub) -> list[dict[str, Any]]:
    return [c for c in fake.comments(42) if c["login"] == BOT_LOGIN and c["body"].startswith(MARKER)]


def cli(fake: FakeGitHub, *args: str, token: str = WRITE_TOKEN, extra_env: dict[str, str] | None = None
        ) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, GITHUB_TOKEN=token, DS4CI_GITHUB_THROTTLE="0", **(extra_env or {}))
    env.pop("GITHUB_STEP_SUMMARY", None)
    return subprocess.run(
        [sys.executable, "-c", "from ds4ci.cli import main; main()", "publish", *args,
         "--repo", "acme/engine", "--api-url", fake.url],
        capture_output=True, text=True, env=env, check=False,
    )


def test_first_publish_then_rerun_updates_same_comment(fake: FakeGitHub) -> None:
    fake.add_comment(42, "unrelated human comment " + MARKER, "alice")
    fake.add_comment(42, MARKER + "\nforged by someone else", "mallory")
    assert publish(fake, FAIL) == 0
    first = ours(fake)
    assert len(first) == 1 and "❌ fail" in first[0]["body"]
    assert publish(fake, PASS) == 0
    second = ours(fake)
    assert [c["id"] for c in second] == [first[0]["id"]]
    assert "✅ pass" in second[0]["body"] and "❌ fail" not in second[0]["body"]
    assert len(fake.comments(42)) == 3  # the other authors' comments are untouched


def test_unchanged_body_sends_no_patch(fake: FakeGitHub) -> None:
    assert publish(fake, PASS) == 0
    patches = fake.count("PATCH")
    assert publish(fake, PASS) == 0
    assert fake.count("PATCH") == patches == 0
    assert len(ours(fake)) == 1


def test_statuses_land_on_exact_head_with_contexts(fake: FakeGitHub) -> None:
    assert publish(fake, PASS, CONTROL) == 0
    statuses = fake.statuses()
    assert {s["sha"] for s in statuses} == {HEAD}
    assert fake.latest_states(HEAD) == {"ds4ci/gfx1151": "success", "ds4ci/cuda-3090": "error"}
    assert all(len(s["description"]) <= 140 and s["target_url"] == RUN_URL for s in statuses)


@pytest.mark.parametrize(("path", "state"), [(FAIL, "failure"), (ERROR, "error")])
def test_nothing_green_for_fail_or_error(fake: FakeGitHub, path: Path, state: str) -> None:
    assert publish(fake, path) == 0  # a failure published correctly is a successful publish
    assert fake.latest_states(HEAD) == {"ds4ci/gfx1151": state}


def test_contradictory_pass_is_not_green(fake: FakeGitHub, tmp_path: Path) -> None:
    d = json.loads(PASS.read_text())
    d["widths"][0]["verdict"] = "fail"
    p = tmp_path / "r.json"
    p.write_text(json.dumps(d))
    assert publish(fake, p) == 0
    assert fake.latest_states(HEAD) == {"ds4ci/gfx1151": "error"}


def test_stale_results_are_refused(fake: FakeGitHub) -> None:
    fake.add_pull(42, NEWER, [OLD, HEAD, NEWER])
    with pytest.raises(UsageError, match="stale"):
        publish(fake, PASS)
    assert fake.statuses() == [] and fake.comments(42) == []


def test_sha_mismatch_is_refused_before_any_request(fake: FakeGitHub) -> None:
    with pytest.raises(UsageError, match="not for"):
        publish(fake, PASS, pr=None, sha=NEWER)
    assert fake.requests == []


def test_results_without_revisions_are_refused(fake: FakeGitHub) -> None:
    with pytest.raises(UsageError, match="no revisions"):
        publish(fake, DATA / "no-revisions.json")
    assert fake.requests == []


def test_malformed_results_exit_2_and_post_nothing(fake: FakeGitHub, tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(PASS.read_text().replace('"verdict": "pass"', '"verdict": "success"', 1))
    result = cli(fake, str(bad), "--pr", "42")
    assert result.returncode == 2, result.stderr
    assert fake.requests == []


def test_sha_only_sets_statuses_without_comment(fake: FakeGitHub) -> None:
    assert publish(fake, PASS, pr=None, sha=HEAD) == 0
    assert fake.latest_states(HEAD) == {"ds4ci/gfx1151": "success"}
    assert fake.comments(42) == []


def test_pending_status(fake: FakeGitHub) -> None:
    assert publish(fake, pending=True, runner="gfx1151", sha=HEAD) == 0
    assert fake.latest_states(HEAD) == {"ds4ci/gfx1151": "pending"}
    assert "⏳ pending" in ours(fake)[0]["body"]
    # The results then replace the pending section in the same comment.
    assert publish(fake, PASS) == 0
    assert len(ours(fake)) == 1 and "⏳ pending" not in ours(fake)[0]["body"]


def test_per_runner_publishers_merge_sections(fake: FakeGitHub) -> None:
    assert publish(fake, PASS) == 0
    assert publish(fake, CONTROL) == 0
    body = ours(fake)[0]["body"]
    assert {s.runner for s in parse_sections(body)} == {"gfx1151", "cuda-3090"}


def test_concurrent_publishers_leave_one_comment_with_both_sections(fake: FakeGitHub) -> None:
    errors: list[BaseException] = []

    def worker(path: Path) -> None:
        try:
            publish(fake, path)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(p,)) for p in (PASS, SECOND, CONTROL)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    comments = ours(fake)
    assert len(comments) == 1
    assert {s.runner for s in parse_sections(comments[0]["body"])} == {"gfx1151", "gfx1151-b", "cuda-3090"}


def test_concurrent_processes_leave_one_comment(fake: FakeGitHub) -> None:
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", "from ds4ci.cli import main; main()", "publish", str(p), "--repo", "acme/engine",
             "--pr", "42", "--api-url", fake.url, "--unverified"],  # the comment race: no bundles needed
            env=dict(os.environ, GITHUB_TOKEN=WRITE_TOKEN, DS4CI_GITHUB_THROTTLE="0"),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        for p in (PASS, SECOND)
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    comments = ours(fake)
    assert len(comments) == 1
    assert {s.runner for s in parse_sections(comments[0]["body"])} == {"gfx1151", "gfx1151-b"}


def test_duplicates_from_a_race_are_folded_into_the_oldest(fake: FakeGitHub) -> None:
    body_a, _ = render.render([json.loads(CONTROL.read_text())])
    body_b, _ = render.render([json.loads(SECOND.read_text())])
    oldest = fake.add_comment(42, body_a, BOT_LOGIN)
    fake.add_comment(42, body_b, BOT_LOGIN)
    assert publish(fake, PASS) == 0
    comments = ours(fake)
    assert [c["id"] for c in comments] == [oldest]
    assert {s.runner for s in parse_sections(comments[0]["body"])} == {"gfx1151", "gfx1151-b", "cuda-3090"}


def test_server_errors_then_success(fake: FakeGitHub) -> None:
    fake.inject(500, count=3)
    assert publish(fake, PASS) == 0
    assert fake.latest_states(HEAD) == {"ds4ci/gfx1151": "success"}
    assert len(ours(fake)) == 1


def test_persistent_server_errors_exit_3(fake: FakeGitHub) -> None:
    fake.inject(502, count=1000)
    with pytest.raises(PublishError):
        publish(fake, PASS)
    assert fake.statuses() == []


def test_secondary_rate_limit_with_retry_after(fake: FakeGitHub) -> None:
    fake.inject(403, count=1, headers={"Retry-After": "1"},
                message="You have exceeded a secondary rate limit. Please wait a few minutes before you try again.",
                methods={"POST"})
    assert publish(fake, PASS) == 0
    assert fake.latest_states(HEAD) == {"ds4ci/gfx1151": "success"}


def test_validation_error_422_is_a_publish_error(fake: FakeGitHub) -> None:
    fake.inject(422, count=1, message="Validation Failed", methods={"POST"})
    with pytest.raises(PublishError, match="422"):
        publish(fake, PASS)


def test_read_only_token_message_summary_and_exit_code(fake: FakeGitHub, tmp_path: Path) -> None:
    summary = tmp_path / "summary.md"
    result = cli(fake, str(PASS), "--pr", "42", "--unverified", "--summary-file", str(summary), token=READ_TOKEN)
    assert result.returncode == 3
    assert "workflow_run" in result.stderr and "artifact" in result.stderr
    assert READ_TOKEN not in result.stderr + result.stdout
    assert "parity gate (job summary)" in summary.read_text(encoding="utf-8")
    assert fake.statuses() == [] and fake.comments(42) == []


def as_the_gate_run(fake: FakeGitHub) -> None:
    """RUN_URL is a run of the trusted gate whose publishing job records each comment it creates (gate.yml)."""
    fake.add_run(7, title=f"ds4ci gate {HEAD}")
    fake.publishing_run = 7


def test_app_token_identity_falls_back_in_actions(fake: FakeGitHub, monkeypatch: pytest.MonkeyPatch) -> None:
    as_the_gate_run(fake)
    monkeypatch.setenv("GITHUB_TOKEN", APP_TOKEN)
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    assert publish(fake, PASS) == 0
    assert publish(fake, FAIL) == 0
    mine = [c for c in fake.comments(42) if c["login"] == "github-actions[bot]"]
    assert len(mine) == 1 and "❌ fail" in mine[0]["body"]


def test_app_token_outside_actions_is_refused(fake: FakeGitHub, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GITHUB_TOKEN", APP_TOKEN)
    with pytest.raises(PublishError, match="/user"):
        publish(fake, PASS, no_status=True)
    assert fake.comments(42) == []


def test_an_unknown_comment_author_is_refused_before_any_status_is_written(
    fake: FakeGitHub, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No partial publish: the author of the sticky comment is settled before the first write."""
    monkeypatch.setenv("GITHUB_TOKEN", APP_TOKEN)
    with pytest.raises(PublishError, match="--comment-author"):
        publish(fake, PASS)
    assert fake.statuses() == [] and fake.comments(42) == []
    with pytest.raises(PublishError, match="--comment-author"):
        publish(fake, pending=True, runner="gfx1151", sha=HEAD)
    assert fake.statuses() == []


def test_comment_author_names_an_installation_tokens_bot(fake: FakeGitHub, monkeypatch: pytest.MonkeyPatch) -> None:
    as_the_gate_run(fake)
    monkeypatch.setenv("GITHUB_TOKEN", APP_TOKEN)  # outside Actions: the author must be named
    assert publish(fake, FAIL, comment_author="github-actions[bot]") == 0
    assert publish(fake, PASS, comment_author="github-actions[bot]") == 0
    mine = [c for c in fake.comments(42) if c["login"] == "github-actions[bot]"]
    assert len(mine) == 1 and "✅ pass" in mine[0]["body"]
    assert [s["state"] for s in fake.statuses()] == ["failure", "success"]


def test_dry_run_sends_nothing_and_needs_no_token(
    fake: FakeGitHub, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.delenv("GITHUB_TOKEN")
    assert publish(fake, PASS, CONTROL, dry_run=True, dry_run_dir=tmp_path) == 0
    out = capsys.readouterr().out
    assert MARKER in out
    assert "ds4ci/gfx1151=success" in out and "ds4ci/cuda-3090=error" in out
    assert fake.requests == []


def test_cli_refuses_results_without_their_bundle_and_posts_nothing(fake: FakeGitHub) -> None:
    result = cli(fake, str(PASS), "--pr", "42")
    assert result.returncode == 2
    assert "evidence bundle" in result.stderr and "--unverified" in result.stderr
    assert fake.statuses() == [] and fake.comments(42) == []


def test_unverified_results_get_a_labelled_comment_and_no_status(fake: FakeGitHub) -> None:
    result = cli(fake, str(PASS), "--pr", "42", "--unverified")
    assert result.returncode == 0, result.stderr
    assert fake.statuses() == []
    (comment,) = ours(fake)
    assert "unverified: no evidence bundle backs this result" in comment["body"]
    assert "⚠️ unverified" in comment["body"] and "✅" not in comment["body"]  # it claims pass: no pass mark


def test_missing_token_is_usage_error(fake: FakeGitHub, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GITHUB_TOKEN")
    with pytest.raises(UsageError, match="GITHUB_TOKEN"):
        publish(fake, PASS)
    assert fake.requests == []


def test_last_validated_predecessor_is_found(fake: FakeGitHub) -> None:
    fake.add_status(OLD, "ds4ci/gfx1151", "success", creator=BOT_LOGIN)
    assert publish(fake, FAIL) == 0
    body = ours(fake)[0]["body"]
    assert f"Last hardware-validated predecessor on this runner: `{OLD}`" in body


def test_many_comments_are_paginated(fake: FakeGitHub) -> None:
    for i in range(300):
        fake.add_comment(42, f"comment {i}", "someone")
    assert publish(fake, PASS) == 0
    assert publish(fake, FAIL) == 0
    assert len(ours(fake)) == 1
    assert fake.count("GET", "/issues/42/comments") >= 6  # 3 pages per listing, several listings


def test_github_actions_summary_env_is_appended(fake: FakeGitHub, monkeypatch: pytest.MonkeyPatch,
                                                tmp_path: Path) -> None:
    summary = tmp_path / "step-summary.md"
    summary.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    assert publish(fake, PASS) == 0
    text = summary.read_text(encoding="utf-8")
    assert text.startswith("earlier step\n") and "job summary" in text


def test_sample_results_are_schema_valid() -> None:
    # Guards the hand-built fixtures every other test relies on.
    paths = sorted(DATA.glob("*.json"))
    assert len(paths) == 6
    for path in paths:
        assert load.load_all([path])
