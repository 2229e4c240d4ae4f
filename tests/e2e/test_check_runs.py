"""One check run per runner, published beside the status from the same document, against the stateful fake GitHub.

The documents are the hand-built results of tests/data/results (published after the trust step, as in
test_publish.py); merge-check and the predecessor lookup read them at the end.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fakegithub import ACTIONS_LOGIN, APP_TOKEN, WRITE_TOKEN, FakeGitHub, as_the_publishing_job
from paths import TESTS

from ds4ci.commands.publish import PublishRequest, publish_documents
from ds4ci.errors import PublishError
from ds4ci.evidence.results import load as load_results
from ds4ci.evidence.results import validate
from ds4ci.github import checkruns
from ds4ci.github.verified import Published
from ds4ci.records import Results
from ds4ci.report import render
from ds4ci.report.docview import view_of

DATA = TESTS / "data" / "results"
PASS, FAIL, ERROR = DATA / "pass.json", DATA / "fail.json", DATA / "error.json"
CONTROL = DATA / "negative-control.json"
HEAD = json.loads(PASS.read_text())["revisions"]["head"]["sha"]
OLD = "a" * 40
RUN_URL = "https://github.com/acme/engine/actions/runs/7"


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeGitHub]:
    yield from as_the_publishing_job(monkeypatch, 42, [OLD, HEAD])


def publish(fake: FakeGitHub, *docs: Results, **kw: Any) -> int:
    args: dict[str, Any] = {"repo": "acme/engine", "pr": 42, "api_url": fake.url, "target_url": RUN_URL}
    args.update(kw)
    return publish_documents([Published(d, may_set_status=True) for d in docs], PublishRequest(**args))


def doc(path: Path) -> Results:
    return load_results(path)


def passing_control() -> Results:
    """The negative control whose checks all passed (its status: success, "no parity claim")."""
    d = copy.deepcopy(doc(CONTROL))
    d["verdict"], d["exit_code"], d["reasons"] = "pass", 0, []
    d["checks"][0].update(status="pass", failed=0, passed=d["checks"][0]["total"] or 1, exit_code=0)
    return validate(d)


def runs_by_name(fake: FakeGitHub) -> dict[str, dict[str, Any]]:
    return {r["name"]: r for r in fake.check_runs(HEAD)}


def test_one_check_run_per_runner_with_the_status_decision_and_the_section(fake: FakeGitHub) -> None:
    assert publish(fake, doc(FAIL), passing_control()) == 0
    assert fake.latest_states(HEAD)["ds4ci/cuda-3090"] == "success"
    runs = fake.check_runs()
    assert sorted(r["name"] for r in runs) == ["ds4ci/cuda-3090", "ds4ci/gfx1151"]
    assert all(r["sha"] == HEAD and r["app"] == "github-actions" and r["status"] == "completed" for r in runs)
    by_name = runs_by_name(fake)
    gate, control = by_name["ds4ci/gfx1151"], by_name["ds4ci/cuda-3090"]
    assert gate["conclusion"] == "failure" and fake.latest_states(HEAD)["ds4ci/gfx1151"] == "failure"
    assert control["conclusion"] == "neutral"  # a negative control's pass is no parity evidence
    statuses = {s["context"]: s for s in fake.statuses(HEAD)}
    assert statuses["ds4ci/gfx1151"]["description"].startswith("fail: ")
    assert gate["output"]["title"] == f"fail on {HEAD[:12]}: 1 cause, each in the summary"  # never cut
    summary = gate["output"]["summary"]
    assert summary.startswith(f"### ❌ fail: `gfx1151` on `{HEAD}`") and "ds4ci:section" not in summary
    assert "| q=2 | 0/2 | 49 | 46/49 | 3 | claimed | 96/96 | ❌ fail |" in summary
    text = gate["output"]["text"]
    fail = doc(FAIL)
    assert fail["evidence"]["manifest_sha256"] in text and fail["reproduce"] in text
    assert "Runner signature" in text and gate["details_url"] == RUN_URL


def test_a_rerun_updates_the_same_check_run_by_id(fake: FakeGitHub) -> None:
    assert publish(fake, doc(FAIL)) == 0
    [first] = fake.check_runs()
    assert publish(fake, doc(PASS)) == 0
    [second] = fake.check_runs()
    assert second["id"] == first["id"] and second["conclusion"] == "success"
    assert second["output"]["summary"].startswith("### ✅ pass: `gfx1151`")
    assert fake.count("PATCH", f"/check-runs/{first['id']}") == 1 and fake.count("POST", "/check-runs") == 1


def test_another_apps_run_of_the_same_name_is_never_updated(fake: FakeGitHub) -> None:
    forged = fake.add_check_run(HEAD, "ds4ci/gfx1151", conclusion="success", app="mallory-app")
    assert publish(fake, doc(FAIL)) == 0
    runs = runs_by_name(fake)
    assert fake.count("PATCH", f"/check-runs/{forged}") == 0
    ours = [r for r in fake.check_runs() if r["app"] == "github-actions"]
    assert len(ours) == 1 and ours[0]["conclusion"] == "failure" and runs["ds4ci/gfx1151"]["id"] == ours[0]["id"]


def test_conclusions_follow_the_run(fake: FakeGitHub) -> None:
    interrupted = copy.deepcopy(doc(ERROR))
    interrupted["reasons"] = ["ds4ci was interrupted by SIGTERM; no verdict"]
    timed_out = doc(ERROR)  # "server did not answer /health within 600 s (target-only arm)"
    timed_out["reasons"] = ["target-only: server did not answer /health within 600 s (--startup-timeout)"]
    assert checkruns.conclusion(view_of(validate(interrupted)), "error") == "cancelled"
    assert checkruns.conclusion(view_of(validate(timed_out)), "error") == "timed_out"
    assert checkruns.conclusion(view_of(doc(FAIL)), "failure") == "failure"
    assert checkruns.conclusion(view_of(doc(PASS)), "pending") == "action_required"
    assert checkruns.conclusion(view_of(doc(PASS)), "error") == "failure"  # a pass that contradicts itself is not green
    assert checkruns.conclusion(view_of(passing_control()), "success") == "neutral"
    assert checkruns.conclusion(view_of(doc(PASS)), "success") == "success"
    published = copy.deepcopy(doc(ERROR))
    published["reasons"] = ["ds4ci was interrupted by SIGINT; no verdict"]
    assert publish(fake, validate(published)) == 0
    assert runs_by_name(fake)["ds4ci/gfx1151"]["conclusion"] == "cancelled"


def test_a_focused_rerun_that_needs_the_full_run_is_action_required(fake: FakeGitHub) -> None:
    focused = copy.deepcopy(doc(PASS))
    focused["settings"]["scope"] = "focused"
    focused["settings"]["configured_widths"] = [2, 3, 4]
    assert publish(fake, validate(focused)) == 0
    assert fake.latest_states(HEAD)["ds4ci/gfx1151"] == "pending"
    assert runs_by_name(fake)["ds4ci/gfx1151"]["conclusion"] == "action_required"


def test_annotations_only_on_the_checkouts_own_files(fake: FakeGitHub) -> None:
    d = copy.deepcopy(doc(FAIL))
    d["build"] = {
        "command": "cmake --build build -j", "cwd": "/runner/_work/engine/engine", "server_bin": "build/bin/dflash_server",
        "status": "fail", "exit_code": 1, "duration_s": 3.0, "targets_built": 1, "targets_total": 2,
        "summary": "build failed", "log_tail": "\n".join([
            # The captured Ninja failure's lines (tests/data/checks/ninja-fail.txt), in this checkout.
            "FAILED: CMakeFiles/dflash_server.dir/broken.c.o ",
            "/runner/_work/engine/engine/server/broken.c: In function ‘broken’:",
            "/runner/_work/engine/engine/server/broken.c:1:27: error: ‘undefined_symbol’ undeclared (first use in this "
            "function)",
            "/runner/_work/engine/engine/server/broken.c:1:27: note: each undeclared identifier is reported only once",
            "/usr/include/stdio.h:12:3: error: outside the checkout",
            "../../elsewhere.c:4:1: error: climbs out",
            "ninja: build stopped: subcommand failed.",
        ]),
    }
    d["checks"][0].update(status="fail", failed=1, passed=343, log_tail=(
        "tests/test_spec.cpp:42: Failure\nExpected equality of these values:\n"
        "tests/test_spec.cpp:42: Failure\n"))
    assert publish(fake, validate(d)) == 0
    notes = runs_by_name(fake)["ds4ci/gfx1151"]["annotations"]
    assert [(n["path"], n["start_line"], n["annotation_level"]) for n in notes] == [
        ("server/broken.c", 1, "failure"), ("tests/test_spec.cpp", 42, "failure")]
    assert notes[0]["message"].startswith("error: ‘undefined_symbol’ undeclared")


def test_fifty_annotations_at_most_and_the_summary_says_how_many_more(fake: FakeGitHub) -> None:
    d = copy.deepcopy(doc(FAIL))
    d["checks"][0].update(status="fail", failed=60, passed=284, log_tail="\n".join(
        f"src/file{i}.cpp:{i + 1}: Failure" for i in range(60)))
    assert publish(fake, validate(d)) == 0
    run = runs_by_name(fake)["ds4ci/gfx1151"]
    assert len(run["annotations"]) == 50
    assert "10 more error location(s)" in run["output"]["summary"]


def test_a_huge_section_is_shortened_under_the_api_limit(fake: FakeGitHub) -> None:
    d = copy.deepcopy(doc(FAIL))
    d["reasons"] = [f"reason {i}: " + "x" * 280 for i in range(200)]
    d["checks"] = [{**d["checks"][0], "name": f"suite {i}", "status": "fail", "log_tail": "y\n" * 30000}
                   for i in range(12)]
    full = render.render_section(render.environment(), view_of(validate(d)), render.LEVELS[0], kind="check").body
    assert len(full) > 65535  # at full detail it would not fit
    assert publish(fake, validate(d)) == 0  # the fake refuses (422) anything over 65,535 characters
    run = runs_by_name(fake)["ds4ci/gfx1151"]
    assert len(run["output"]["summary"]) <= 65535 and len(run["output"]["text"]) <= 65535
    assert run["output"]["summary"].startswith("### ❌ fail: `gfx1151`")


def test_check_runs_can_be_turned_off_and_a_persons_token_gets_none(fake: FakeGitHub,
                                                                    monkeypatch: pytest.MonkeyPatch,
                                                                    tmp_path: Path) -> None:
    assert publish(fake, doc(PASS), check_runs=False) == 0
    assert fake.check_runs() == [] and fake.latest_states(HEAD) == {"ds4ci/gfx1151": "success"}
    config = tmp_path / "ds4ci.toml"
    config.write_text("[publish]\ncheck_runs = false\n")
    from ds4ci.commands.publish import _wants_check_runs

    assert _wants_check_runs(PublishRequest(expect_config=config)) is False
    assert _wants_check_runs(PublishRequest(expect_config=config, check_runs=True)) is True
    assert _wants_check_runs(PublishRequest()) is True
    monkeypatch.setenv("GITHUB_TOKEN", WRITE_TOKEN)  # a person's token: GitHub allows it no check runs
    assert publish(fake, doc(FAIL)) == 0
    assert fake.check_runs() == [] and fake.count("POST", "/check-runs") == 0
    assert fake.latest_states(HEAD) == {"ds4ci/gfx1151": "failure"}


def test_an_unverified_result_gets_no_check_run(fake: FakeGitHub) -> None:
    assert publish_documents([Published(doc(PASS), may_set_status=False)],
                             PublishRequest(repo="acme/engine", pr=42, api_url=fake.url, target_url=RUN_URL)) == 0
    assert fake.check_runs() == [] and fake.statuses() == []


def test_the_publisher_app_is_the_bot_accounts_app() -> None:
    assert checkruns.app_of(ACTIONS_LOGIN) == "github-actions"
    assert checkruns.app_of("ds4ci-app[bot]") == "ds4ci-app"
    assert checkruns.app_of("alice") is None and checkruns.app_of("[bot]") is None and checkruns.app_of(None) is None


def _merge_check(fake: FakeGitHub, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GITHUB_")}
    env.update(DS4CI_GITHUB_THROTTLE="0", GITHUB_TOKEN=APP_TOKEN, GITHUB_REPOSITORY="acme/engine",
               GITHUB_API_URL=fake.url)
    return subprocess.run([sys.executable, "-c", "from ds4ci.cli import main; main()", "merge-check", *args],
                          capture_output=True, text=True, env=env, timeout=120, check=False)


def test_merge_check_counts_the_published_check_run_only_from_the_publishers_app(fake: FakeGitHub) -> None:
    """A repository that keeps only check runs (statuses left to someone else's account) still gates on them: the
    check run's details_url names the gate run, whose job `verdict <runner>` GitHub recorded as success."""
    fake.add_run(7, title=f"ds4ci gate {HEAD}", jobs={"verdict gfx1151": "success"})  # RUN_URL
    assert publish(fake, doc(PASS), no_status=True, no_comment=True) == 0
    assert fake.statuses() == [] and runs_by_name(fake)["ds4ci/gfx1151"]["conclusion"] == "success"
    args = ("--pr", "42", "--runner", "gfx1151", "--approvals", "0", "--json")
    ok = _merge_check(fake, *args)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    gate = next(c for c in json.loads(ok.stdout)["conditions"] if c["name"] == "gate ds4ci/gfx1151")
    assert gate["ok"] and "(check run)" in gate["detail"]
    # The same name from another app, newer, does not count (and does not hide the publisher's).
    fake.add_check_run(HEAD, "ds4ci/gfx1151", conclusion="failure", app="mallory-app")
    still = json.loads(_merge_check(fake, *args).stdout)
    gate = next(c for c in still["conditions"] if c["name"] == "gate ds4ci/gfx1151")
    assert gate["ok"] and "check run by app mallory-app" in gate["detail"]
    # Someone else's app alone: not ready.
    other = FakeGitHub().start()
    try:
        other.add_pull(42, HEAD, [OLD, HEAD])
        other.add_check_run(HEAD, "ds4ci/gfx1151", conclusion="success", app="mallory-app")
        proc = _merge_check(other, *args)
        assert proc.returncode == 1, proc.stdout + proc.stderr
    finally:
        other.stop()


def test_the_predecessor_lookup_reads_the_publishers_check_run(fake: FakeGitHub) -> None:
    fake.add_check_run(OLD, "ds4ci/gfx1151", conclusion="success", app="mallory-app")
    assert publish(fake, doc(FAIL)) == 0
    assert f"`{OLD}`" not in fake.comments(42)[0]["body"]  # not the publisher's app
    # the publisher's app, but its link names a gate run whose verdict job failed: not vouched for
    failed = fake.add_run(8, title=f"ds4ci gate {OLD}", jobs={"verdict gfx1151": "failure"})
    fake.add_check_run(OLD, "ds4ci/gfx1151", conclusion="success", app="github-actions", title="pass: token parity",
                       details_url=failed)
    assert publish(fake, doc(FAIL)) == 0
    assert f"`{OLD}`" not in fake.comments(42)[0]["body"]
    passed = fake.add_run(9, title=f"ds4ci gate {OLD}", jobs={"verdict gfx1151": "success"})
    fake.add_check_run(OLD, "ds4ci/gfx1151", conclusion="success", app="github-actions", title="pass: token parity",
                       details_url=passed)
    assert publish(fake, doc(FAIL)) == 0
    body = fake.comments(42)[0]["body"]
    assert f"Last hardware-validated predecessor on this runner: `{OLD}`" in body
    assert f"`{OLD}`" in runs_by_name(fake)["ds4ci/gfx1151"]["output"]["summary"]


def test_a_token_without_checks_write_fails_after_the_statuses_and_says_what_to_grant(fake: FakeGitHub) -> None:
    fake.inject(403, message="Resource not accessible by integration", path_contains="/check-runs",
                methods={"POST"})
    with pytest.raises(PublishError, match=r"checks: write.*check_runs = false"):
        publish(fake, doc(PASS))
    assert fake.latest_states(HEAD) == {"ds4ci/gfx1151": "success"} and fake.check_runs() == []


def test_a_dry_run_names_each_check_run_and_sends_nothing(
    fake: FakeGitHub, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert publish(fake, doc(FAIL), dry_run=True, dry_run_dir=tmp_path) == 0
    out = capsys.readouterr().out
    assert (f"--- would create or update check run ds4ci/gfx1151=failure on {HEAD}: fail on {HEAD[:12]}: 1 cause, "
            f"each in the summary (0 annotation(s)): {tmp_path / 'check-run-gfx1151.md'}") in out
    check = (tmp_path / "check-run-gfx1151.md").read_text()
    assert check.startswith("# ds4ci/gfx1151: failure") and f"### ❌ fail: `gfx1151` on `{HEAD}`" in check
    assert (tmp_path / "comment.md").is_file() and (tmp_path / "summary.md").is_file()
    assert fake.requests == []


def test_no_bidirectional_control_of_a_servers_text_reaches_the_check_run(fake: FakeGitHub) -> None:
    """U+200F, U+061C and every other direction mark, embedding, override and isolate in server text (a reason,
    the server's name, a log tail that becomes an annotation) are stripped from the check run's title, summary,
    text and annotations, as from the comment."""
    marks = "\u200e\u200f\u061c\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
    d = copy.deepcopy(doc(FAIL))
    d["reasons"] = [f"q=2: answers differ{marks} at token 7", *d["reasons"][1:]]
    d["server"] = {"name": f"dflash{marks}", "version": f"1.0{marks}"}
    d["checks"][0].update(status="fail", failed=1, passed=343,
                          log_tail=f"tests/test_spec.cpp:42: Failure{marks}\nExpected{marks} equality\n")
    assert publish(fake, validate(d)) == 0
    run = runs_by_name(fake)["ds4ci/gfx1151"]
    shown = json.dumps([run["output"], run.get("annotations", [])], ensure_ascii=False)
    assert "answers differ" in shown and "Failure" in shown
    assert not any(mark in shown for mark in marks), [hex(ord(c)) for c in shown if c in marks]
