"""``ds4ci merge-check`` against the stateful fake GitHub API: real HTTP on loopback, real processes.

PyGithub reads the REST endpoints, ``requests`` the GraphQL review threads; the fake paginates
both like GitHub. Each test builds the PR's state and asserts on the exit code and the lines.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakegithub import READ_TOKEN, WRITE_TOKEN, FakeGitHub

from ds4ci.errors import PublishError
from ds4ci.github import merge, mergefacts
from ds4ci.github.client import Client, connect

DS4CI = str(Path(sys.executable).parent / "ds4ci")
HEAD = "1" * 40
OLD = "0" * 40
NEW = "2" * 40
NEED = merge.Requirements(runners=("sm86",), checks=("build", "ai-review"), approvals=1)


@pytest.fixture
def fake() -> Iterator[FakeGitHub]:
    server = FakeGitHub().start()
    server.add_pull(42, HEAD, [OLD, HEAD])
    yield server
    server.stop()


def make_ready(fake: FakeGitHub) -> None:
    fake.add_status(HEAD, "ds4ci/sm86", "success")
    fake.add_check_run(HEAD, "build")
    fake.add_status(HEAD, "ai-review", "success")
    fake.add_review(42, "alice", "APPROVED", HEAD)
    fake.add_thread(42, "src/a.py", 3, resolved=True)


def cli(fake: FakeGitHub, *args: str, token: str | None = WRITE_TOKEN, repo: str | None = "acme/engine",
        api: bool = True) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GITHUB_")}
    env["DS4CI_GITHUB_THROTTLE"] = "0"
    if token is not None:
        env["GITHUB_TOKEN"] = token
    if repo is not None:
        env["GITHUB_REPOSITORY"] = repo
    if api:
        env["GITHUB_API_URL"] = fake.url
    argv = [DS4CI, "merge-check", *args]
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120, check=False)


STANDARD = ("--pr", "42", "--runner", "sm86", "--check", "build", "--check", "ai-review")


def gather(fake: FakeGitHub, need: merge.Requirements = NEED, pr: int = 42) -> merge.MergeFacts:
    gh = connect(WRITE_TOKEN, fake.url, throttle=False)
    gql = mergefacts.GraphQL(mergefacts.graphql_url(fake.url), WRITE_TOKEN, backoff_s=0.0)
    return mergefacts.gather(Client(gh, "acme/engine"), gql, "acme/engine", pr, need, mergeable_delay_s=0.0)


# ----- exit 0 and 1 ----------------------------------------------------------------------------


def test_ready_pull_request_exits_0(fake: FakeGitHub) -> None:
    make_ready(fake)
    proc = cli(fake, *STANDARD)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    first, gate = proc.stdout.splitlines()
    assert first == f"#42 at {HEAD}: ready to merge (9 conditions hold)"
    # which of GitHub's records vouched for the gate: the trusted run and its verdict job
    assert gate.startswith("  + gate ds4ci/sm86: success on the head 111111111111, vouched for by run "), gate
    assert gate.endswith(" (.github/workflows/gate.yml, pull_request_target on main, job 'verdict sm86' success in "
                         "attempt 1; it gated the head, with the settings of main at ba5eba5eba5e)"), gate
    assert WRITE_TOKEN not in proc.stdout + proc.stderr


def test_not_ready_exits_1_with_one_line_per_unmet_condition(fake: FakeGitHub) -> None:
    make_ready(fake)
    fake.add_status(HEAD, "ds4ci/sm86", "pending")  # re-run in progress on the head
    fake.add_status(OLD, "ds4ci/sm86", "success")  # green only on the predecessor
    fake.add_review(42, "bob", "CHANGES_REQUESTED", HEAD)
    fake.add_thread(42, "server/src/spec.cpp", 311)
    proc = cli(fake, *STANDARD)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == f"#42 at {HEAD}: not ready (3 of 9 conditions unmet)"
    assert lines[1:] == [
        f"  - gate ds4ci/sm86: pending on the current head 111111111111; it was success only on the older head {OLD}: "
        "re-run the gate on the current head",
        "  - no changes requested: changes requested by bob (on 111111111111)",
        "  - review thread server/src/spec.cpp:311: unresolved review thread",
    ]


def test_json_document(fake: FakeGitHub) -> None:
    make_ready(fake)
    fake.add_review(42, "alice", "APPROVED", OLD)  # alice's latest approval is now on an older commit
    proc = cli(fake, *STANDARD, "--json")
    assert proc.returncode == 1, proc.stderr
    doc = json.loads(proc.stdout)
    assert (doc["pr"], doc["head"], doc["repo"], doc["ready"]) == (42, HEAD, "acme/engine", False)
    assert doc["exit_code"] == proc.returncode
    assert all(set(c) == {"name", "ok", "detail"} for c in doc["conditions"])
    by_name = {c["name"]: c for c in doc["conditions"]}
    assert by_name["gate ds4ci/sm86"]["ok"] is True
    assert by_name["approvals"]["ok"] is False
    assert "alice approved the older commit 000000000000" in by_name["approvals"]["detail"]
    assert [c["name"] for c in doc["conditions"] if not c["ok"]] == ["approvals"]


def test_merge_table_of_the_config_file_is_used_and_cli_wins(fake: FakeGitHub, tmp_path: Path) -> None:
    make_ready(fake)
    cfg = tmp_path / "ds4ci.toml"
    cfg.write_text('[merge]\nrunners = ["sm86", "gfx1151"]\napprovals = 1\n', encoding="utf-8")
    proc = cli(fake, "--pr", "42", "--config", str(cfg))
    assert proc.returncode == 1
    assert "gate ds4ci/gfx1151: not set on the current head" in proc.stdout
    assert cli(fake, "--pr", "42", "--config", str(cfg), "--runner", "sm86").returncode == 0


# ----- only the publisher's statuses and the configured app's check runs count -----------------


def test_a_gate_status_posted_by_another_account_is_ignored_and_listed(fake: FakeGitHub) -> None:
    make_ready(fake)
    fake.add_status(HEAD, "ds4ci/sm86", "pending")  # the publisher's own: a re-run in progress
    fake.add_status(HEAD, "ds4ci/sm86", "success", "pass", creator="mallory")  # newer, by someone else
    fake.add_status(OLD, "ds4ci/sm86", "success", creator="mallory")  # not a validated predecessor either
    proc = cli(fake, *STANDARD)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (line,) = [x for x in proc.stdout.splitlines() if "gate ds4ci/sm86" in x]
    assert "pending on the current head" in line and "no success on any commit of this PR" in line
    assert "ignored (not posted by the publisher): success by mallory" in line


def test_the_publisher_is_configurable(fake: FakeGitHub, tmp_path: Path) -> None:
    make_ready(fake)
    fake.add_status(HEAD, "ds4ci/sm86", "success", creator="ds4ci-app[bot]")
    fake.add_status(HEAD, "ds4ci/sm86", "failure", creator="github-actions[bot]")
    assert "gate ds4ci/sm86: failure" in cli(fake, *STANDARD).stdout
    proc = cli(fake, *STANDARD, "--publisher", "ds4ci-app[bot]")
    assert "  - gate ds4ci/sm86" not in proc.stdout  # green: the configured publisher's status
    assert "  + gate ds4ci/sm86: success on the head 111111111111, vouched for by run " in proc.stdout
    # a plain check name counts statuses by the publisher: ai-review's (by github-actions[bot]) is now ignored
    assert "check ai-review: missing" in proc.stdout and "status success by github-actions[bot]" in proc.stdout
    cfg = tmp_path / "ds4ci.toml"
    cfg.write_text('[merge]\nrunners = ["sm86"]\nchecks = ["build", {name = "ai-review", creator = '
                   '"github-actions[bot]"}]\npublisher = "ds4ci-app[bot]"\n', encoding="utf-8")
    proc = cli(fake, "--pr", "42", "--config", str(cfg))
    assert proc.returncode == 0, proc.stdout


def test_a_required_check_run_from_another_app_does_not_count(fake: FakeGitHub, tmp_path: Path) -> None:
    make_ready(fake)
    fake.add_check_run(HEAD, "lint", app="copycat")
    proc = cli(fake, *STANDARD, "--check", "lint")
    assert proc.returncode == 1
    (line,) = [x for x in proc.stdout.splitlines() if "check lint" in x]
    assert "missing: no check run or commit status named 'lint'" in line and "check run by app copycat" in line
    cfg = tmp_path / "ds4ci.toml"
    cfg.write_text('[merge]\nrunners = ["sm86"]\napprovals = 1\n\n[[merge.checks]]\nname = "lint"\napp = "copycat"\n'
                   '\n[[merge.checks]]\nname = "build"\n', encoding="utf-8")
    assert cli(fake, "--pr", "42", "--config", str(cfg)).returncode == 0


def test_the_command_line_names_the_app_of_a_check_without_a_config_file(fake: FakeGitHub) -> None:
    """`--check NAME@APP`: "the AI reviewer passed on the exact head", with no [[merge.checks]] table."""
    make_ready(fake)
    fake.add_check_run(HEAD, "cubic", app="cubic-dev-ai")
    fake.add_check_run(HEAD, "lint", app="copycat")
    assert cli(fake, *STANDARD, "--check", "cubic@cubic-dev-ai").returncode == 0
    wrong = cli(fake, *STANDARD, "--check", "lint@cubic-dev-ai")
    assert wrong.returncode == 1
    (line,) = [x for x in wrong.stdout.splitlines() if "check lint" in x]
    assert "check run by app copycat" in line, wrong.stdout
    doc = json.loads(cli(fake, *STANDARD, "--check", "cubic@cubic-dev-ai", "--json").stdout)
    assert doc["ready"] is True and any("cubic" in c["name"] for c in doc["conditions"]), doc
    bad = cli(fake, *STANDARD, "--check", "cubic@Not An App")
    assert bad.returncode == 2 and "NAME@APP" in bad.stderr


def test_a_required_status_check_from_another_account_does_not_count(fake: FakeGitHub) -> None:
    make_ready(fake)
    fake.add_status(HEAD, "ci/jenkins", "success", creator="mallory")
    proc = cli(fake, *STANDARD, "--check", "ci/jenkins")
    assert proc.returncode == 1
    assert "status success by mallory" in proc.stdout


def test_a_malformed_merge_checks_table_is_a_usage_error(fake: FakeGitHub, tmp_path: Path) -> None:
    cfg = tmp_path / "ds4ci.toml"
    cfg.write_text('[merge]\nrunners = ["sm86"]\nchecks = [{name = "lint", ap = "x"}]\n', encoding="utf-8")
    proc = cli(fake, "--pr", "42", "--config", str(cfg))
    assert proc.returncode == 2 and "unknown key(s) ap" in proc.stderr


def test_read_only_token_can_check(fake: FakeGitHub) -> None:
    # A fork's read-only GITHUB_TOKEN reads everything merge-check needs (GraphQL is a POST, but a read).
    make_ready(fake)
    assert cli(fake, *STANDARD, token=READ_TOKEN).returncode == 0


# ----- facts fetched over several pages and reads ---------------------------------------------


def test_review_threads_paginate_and_an_unresolved_thread_on_page_2_blocks(fake: FakeGitHub) -> None:
    make_ready(fake)
    fake.graphql_page_size = 2
    fake.add_thread(42, "src/b.py", 5, resolved=True)
    fake.add_thread(42, "src/c.py", 8)  # third thread: page 2
    facts = gather(fake)
    assert [(t.path, t.resolved) for t in facts.threads] == [("src/a.py", True), ("src/b.py", True), ("src/c.py", False)]
    assert len(fake.graphql_queries) == 2
    assert fake.graphql_queries[0]["variables"]["cursor"] is None
    assert fake.graphql_queries[1]["variables"]["cursor"]  # the endCursor of page 1
    assert [c.name for c in merge.evaluate(facts, NEED).unmet] == ["review thread src/c.py:8"]


def test_check_runs_and_reviews_beyond_the_first_page_are_read(fake: FakeGitHub) -> None:
    for i in range(120):
        fake.add_check_run(HEAD, f"job-{i}")
    fake.add_check_run(HEAD, "build", conclusion="failure")  # on page 2 of 100
    fake.add_status(HEAD, "ds4ci/sm86", "success")
    fake.add_status(HEAD, "ai-review", "success")
    for _ in range(105):
        fake.add_review(42, "carol", "COMMENTED", HEAD)
    fake.add_review(42, "alice", "APPROVED", HEAD)  # on page 2 of 100
    facts = gather(fake)
    assert len(facts.check_runs) == 121 and len(facts.reviews) == 106
    assert [c.name for c in merge.evaluate(facts, NEED).unmet] == ["check build"]
    assert fake.count("GET", "/check-runs") == 2 and fake.count("GET", "/reviews") == 2


def test_mergeable_null_is_read_again_until_known(fake: FakeGitHub) -> None:
    make_ready(fake)
    fake.set_mergeable(42, None, None, True)
    facts = gather(fake)
    assert facts.pull.mergeable is True and facts.pull.mergeable_reads == 3
    assert merge.evaluate(facts, NEED).ready


def test_mergeable_still_null_after_the_bounded_reads_blocks(fake: FakeGitHub) -> None:
    make_ready(fake)
    fake.set_mergeable(42, None)
    proc = cli(fake, *STANDARD)
    assert proc.returncode == 1
    assert "  - mergeable: mergeability not yet computed: GitHub still answered mergeable=null after 5 read(s)" in proc.stdout
    reads = [p for m, p in fake.requests if m == "GET" and p == "/repos/acme/engine/pulls/42"]
    assert len(reads) == 5 + 1  # 5 bounded reads, then 1 to confirm the head did not move


@pytest.mark.parametrize(
    ("pull", "line"),
    [
        ({"draft": True}, "  - not draft: a draft: mark it ready for review first"),
        ({"state": "closed"}, "  - open: pull request #42 is closed, not open"),
        ({"mergeable": False, "mergeable_state": "dirty"}, "  - mergeable: not mergeable (mergeable_state dirty)"),
    ],
)
def test_pull_request_fields_block(fake: FakeGitHub, pull: dict[str, object], line: str) -> None:
    fake.add_pull(42, HEAD, [OLD, HEAD], **pull)  # type: ignore[arg-type]
    make_ready(fake)
    proc = cli(fake, *STANDARD)
    assert proc.returncode == 1
    assert any(out.startswith(line) for out in proc.stdout.splitlines()), proc.stdout


def test_a_check_green_only_on_an_older_head_blocks(fake: FakeGitHub) -> None:
    make_ready(fake)
    fake.add_check_run(OLD, "lint")
    proc = cli(fake, *STANDARD, "--check", "lint")
    assert proc.returncode == 1
    assert "  - check lint: missing: no check run or commit status named 'lint' on the head 111111111111" in proc.stdout


def test_a_push_during_the_check_stops_it(fake: FakeGitHub) -> None:
    make_ready(fake)

    def push(f: FakeGitHub) -> None:
        f.pulls[42]["head"] = NEW

    fake.on_graphql = push
    with pytest.raises(PublishError, match=f"moved from {HEAD} to {NEW} while it was being checked"):
        gather(fake)


# ----- exit 2 and 3 ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "kw", "message"),
    [
        (STANDARD, {"token": None}, "no token: set the environment variable GITHUB_TOKEN"),
        (STANDARD, {"repo": None}, "--repo: expected OWNER/NAME"),
        ((*STANDARD, "--repo", "not-a-repo"), {}, "--repo: expected OWNER/NAME"),
        (("--pr", "42"), {}, "name at least one gate runner"),
        (("--pr", "0", "--runner", "sm86"), {}, "--pr: expected a pull request number >= 1"),
        (("--pr", "x", "--runner", "sm86"), {}, "Invalid value for '--pr'"),
        (("--runner", "sm86"), {}, "Missing option '--pr'"),
        ((*STANDARD, "--approvals", "-1"), {}, "--approvals: expected an integer >= 0"),
        ((*STANDARD, "--runner", "sm86"), {}, "sm86 listed twice"),
        ((*STANDARD, "--config", "/nonexistent/ds4ci.toml"), {}, "does not exist"),
    ],
)
def test_usage_errors_exit_2(fake: FakeGitHub, args: tuple[str, ...], kw: dict[str, object], message: str) -> None:
    proc = cli(fake, *args, **kw)  # type: ignore[arg-type]
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr
    assert fake.count() == 0  # refused before asking GitHub


@pytest.mark.parametrize(
    ("setup", "args", "kw", "message"),
    [
        (None, ("--pr", "7", "--runner", "sm86"), {}, "read pull request #7: 404"),
        (None, STANDARD, {"token": "ghs_not_a_valid_token_000000000000000000000000000"}, "401 Bad credentials"),
        ("5xx", STANDARD, {}, "500"),
        ("graphql-5xx", STANDARD, {}, "GraphQL"),
        (None, (*STANDARD, "--repo", "acme/other"), {}, "404"),
    ],
)
def test_github_errors_exit_3_with_a_message(fake: FakeGitHub, setup: str | None, args: tuple[str, ...],
                                             kw: dict[str, object], message: str) -> None:
    make_ready(fake)
    if setup == "5xx":
        fake.inject(500, count=50)
    if setup == "graphql-5xx":
        fake.inject(502, count=50, methods={"POST"})
    proc = cli(fake, *args, **kw)  # type: ignore[arg-type]
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert proc.stderr.startswith("ds4ci: error: ")
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr


def test_unreachable_api_exits_3(fake: FakeGitHub) -> None:
    url = fake.url
    fake.stop()
    env_api = {"api": False}
    proc = cli(fake, *STANDARD, "--api-url", url, **env_api)  # type: ignore[arg-type]
    assert proc.returncode == 3
    assert "could not read pull request #42" in proc.stderr and "Traceback" not in proc.stderr


def test_malformed_github_answer_is_an_error_not_a_guess(fake: FakeGitHub) -> None:
    make_ready(fake)
    fake.add_check_run(HEAD, "odd", status="completed", conclusion=None)
    fake._check_runs[-1]["name"] = None  # GitHub never sends this; the check must refuse, not skip it
    with pytest.raises(PublishError, match=r"check runs of 111111111111 \(name\): expected str, found None"):
        gather(fake)


def test_graphql_url_for_github_com_and_enterprise_server() -> None:
    assert mergefacts.graphql_url("https://api.github.com") == "https://api.github.com/graphql"
    assert mergefacts.graphql_url("https://ghe.example.com/api/v3/") == "https://ghe.example.com/api/graphql"
