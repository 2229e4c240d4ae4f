"""Only GitHub's own records vouch for a green ds4ci/<runner>: the trusted gate's workflow run and its job.

A status (and a check run made with a job's token) says github-actions[bot] for every workflow, and its
target_url is text anyone with a token can copy. So merge-check looks the linked run up: it must be the
trusted gate.yml, started by pull_request_target or workflow_dispatch, on the repository's default branch
(GitHub runs the default branch's gate.yml for every pull request, whatever its base), from a commit of that
branch, titled with the head, and its job ``verdict <runner>`` must have concluded
success in the run's latest attempt; among several such runs the newest decides. Each attack below made
merge-check say "ready" before. Real CLI, real HTTP, the stateful fake GitHub API.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakegithub import MAIN_TIP, WRITE_TOKEN, FakeGitHub

DS4CI = str(Path(sys.executable).parent / "ds4ci")
HEAD = "1" * 40
OLD = "0" * 40
RELEASE_TIP = "7e1ea5e0" * 5
GATE = ".github/workflows/gate.yml"


@pytest.fixture
def fake() -> Iterator[FakeGitHub]:
    server = FakeGitHub().start()
    server.add_pull(42, HEAD, [OLD, HEAD])
    server.add_branch("release", [RELEASE_TIP])
    yield server
    server.stop()


def merge_check(fake: FakeGitHub, *args: str, pr: str = "42") -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GITHUB_")}
    env.update({"GITHUB_API_URL": fake.url, "GITHUB_TOKEN": WRITE_TOKEN, "GITHUB_REPOSITORY": "acme/engine",
                "DS4CI_GITHUB_THROTTLE": "0"})
    return subprocess.run([DS4CI, "merge-check", "--pr", pr, "--runner", "sm86", "--approvals", "0", *args],
                          capture_output=True, text=True, env=env, timeout=120, check=False)


def gate_line(proc: subprocess.CompletedProcess[str]) -> str:
    (line,) = [x for x in proc.stdout.splitlines() if "gate ds4ci/sm86" in x]
    return line


def trusted_run(fake: FakeGitHub, run_id: int, verdict: str = "success", head: str = HEAD, **run: str) -> str:
    """A run of the trusted gate for ``head``, as GitHub records it; its verdict job concluded ``verdict``."""
    jobs = {"gate sm86": "success" if verdict == "success" else "failure", "verdict sm86": verdict}
    return fake.add_run(run_id, **{"title": f"ds4ci gate {head}", "jobs": jobs, **run})  # type: ignore[arg-type]


def test_the_honest_path_is_ready_and_says_which_record_vouched(fake: FakeGitHub) -> None:
    fake.add_status(HEAD, "ds4ci/sm86", "success", "pass", target_url=trusted_run(fake, 700))
    proc = merge_check(fake, "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (gate,) = [c for c in json.loads(proc.stdout)["conditions"] if c["name"] == "gate ds4ci/sm86"]
    assert gate["ok"] is True
    for part in ("run 700", GATE, "pull_request_target", "on main", "job 'verdict sm86' success", "attempt 1"):
        assert part in gate["detail"], gate["detail"]


def test_a_maintainer_s_dispatch_on_the_base_branch_vouches(fake: FakeGitHub) -> None:
    url = trusted_run(fake, 701, event="workflow_dispatch")
    fake.add_status(HEAD, "ds4ci/sm86", "success", "pass", target_url=url)
    proc = merge_check(fake)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_a_run_of_the_short_caller_vouches_by_its_called_verdict_job(fake: FakeGitHub) -> None:
    """init's gate.yml calls ds4ci's own: GitHub names the called jobs '<calling job> / <job>'."""
    jobs = {"ds4ci / gate sm86": "success", "ds4ci / verdict sm86": "success"}
    url = fake.add_run(712, title=f"ds4ci gate {HEAD}", jobs=jobs)
    fake.add_status(HEAD, "ds4ci/sm86", "success", "pass", target_url=url)
    proc = merge_check(fake, "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (gate,) = [c for c in json.loads(proc.stdout)["conditions"] if c["name"] == "gate ds4ci/sm86"]
    assert gate["ok"] is True and "job 'verdict sm86' success" in gate["detail"], gate["detail"]


def test_a_caller_run_whose_called_verdict_job_failed_is_not_counted(fake: FakeGitHub) -> None:
    jobs = {"ds4ci / verdict sm86": "failure", "other / verdicts sm86": "success", "xverdict sm86": "success"}
    url = fake.add_run(713, title=f"ds4ci gate {HEAD}", jobs=jobs)
    fake.add_status(HEAD, "ds4ci/sm86", "success", "pass", target_url=url)
    proc = merge_check(fake)
    assert proc.returncode != 0 and "run 713's job 'verdict sm86' concluded failure" in gate_line(proc)


def test_attack_5_a_success_copying_the_link_of_a_failed_gate_run_is_not_counted(fake: FakeGitHub) -> None:
    """Red team #5: after a real failure, a success by github-actions[bot] whose target_url is the real run's."""
    url = trusted_run(fake, 702, verdict="failure")
    fake.add_status(HEAD, "ds4ci/sm86", "failure", "fail: q=3 diverged", target_url=url)  # the real gate's
    fake.add_status(HEAD, "ds4ci/sm86", "success", "pass", target_url=url)  # a PR's workflow, the same link
    proc = merge_check(fake)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    line = gate_line(proc)
    assert "success on the current head 111111111111 not counted" in line, line
    assert "run 702's job 'verdict sm86' concluded failure (attempt 1)" in line, line


def test_attack_6_a_run_of_another_branch_s_definition_is_not_counted(fake: FakeGitHub) -> None:
    """Red team #6: a run of gate.yml for the same head that GitHub records on another branch than the default
    (an older GitHub's pull_request_target into a release branch, or a dispatch there): that branch's copy ran."""
    url = trusted_run(fake, 703, head_branch="release")
    fake.add_status(HEAD, "ds4ci/sm86", "success", "pass", target_url=url)
    proc = merge_check(fake)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "run 703 ran on the branch release, not on the default branch main" in gate_line(proc)


def test_a_dispatch_on_a_release_branch_is_not_counted(fake: FakeGitHub) -> None:
    url = trusted_run(fake, 714, event="workflow_dispatch", head_branch="release")
    fake.add_status(HEAD, "ds4ci/sm86", "success", "pass", target_url=url)
    proc = merge_check(fake)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "run 714 was dispatched on the branch release, not on the default branch main" in gate_line(proc)


@pytest.mark.parametrize("base", ["main", "release"])
def test_a_pull_request_into_the_default_or_a_release_branch_is_gated_by_the_default_branch_s_run(
        fake: FakeGitHub, base: str) -> None:
    """GitHub today (since 2025-12-08): pull_request_target runs the default branch's gate.yml whatever the base,
    and records the run on the default branch at its tip. A PR into a release branch gets the true answer: ready,
    vouched for by that run (defect: it was refused as "not on the base branch release", never ready)."""
    fake.add_pull(43, HEAD, [OLD, HEAD], base=base)
    url = fake.add_run(715, title=f"ds4ci gate {HEAD}", jobs={"gate sm86": "success", "verdict sm86": "success"})
    fake.add_status(HEAD, "ds4ci/sm86", "success", "pass", target_url=url)
    proc = merge_check(fake, "--json", pr="43")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (gate,) = [c for c in json.loads(proc.stdout)["conditions"] if c["name"] == "gate ds4ci/sm86"]
    assert gate["ok"] is True
    for part in ("run 715", "pull_request_target on main", "it gated the head",
                 f"with the settings of main at {MAIN_TIP[:12]}"):
        assert part in gate["detail"], gate["detail"]


def test_a_release_branch_pr_s_failed_gate_is_a_true_not_ready(fake: FakeGitHub) -> None:
    fake.add_pull(43, HEAD, [OLD, HEAD], base="release")
    url = trusted_run(fake, 716, verdict="failure")
    fake.add_status(HEAD, "ds4ci/sm86", "failure", "fail: q=3 diverged", target_url=url)
    proc = merge_check(fake, pr="43")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "failure (fail: q=3 diverged) on the current head 111111111111" in gate_line(proc)


def test_a_merge_queue_run_never_vouches_for_the_pull_request_s_head(fake: FakeGitHub) -> None:
    """A merge_group run gated the queue's merge commit; its link copied onto the head is not counted."""
    url = trusted_run(fake, 717, event="merge_group", head_branch=f"gh-readonly-queue/main/pr-42-{HEAD}")
    fake.add_status(HEAD, "ds4ci/sm86", "success", "pass", target_url=url)
    proc = merge_check(fake)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "run 717 gated a merge queue's commit, not the head 111111111111" in gate_line(proc)


def test_a_run_from_a_commit_outside_the_base_branch_is_not_counted(fake: FakeGitHub) -> None:
    url = trusted_run(fake, 704, head_sha=HEAD)  # "main", but its gate.yml came from the PR's own commit
    fake.add_status(HEAD, "ds4ci/sm86", "success", "pass", target_url=url)
    proc = merge_check(fake)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert (f"run 704 ran the commit {HEAD[:12]}, which is not in the history of the default branch main "
            "(diverged)") in gate_line(proc)


def test_a_run_of_another_workflow_file_is_not_counted(fake: FakeGitHub) -> None:
    url = trusted_run(fake, 705, path=".github/workflows/other.yml")
    fake.add_status(HEAD, "ds4ci/sm86", "success", "pass", target_url=url)
    proc = merge_check(fake)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert ("gate ds4ci/sm86: success on the current head 111111111111 not counted: run 705 is "
            f".github/workflows/other.yml, not the trusted gate ({GATE})") in gate_line(proc)


@pytest.mark.parametrize("verdict", ["cancelled", "skipped", "in_progress"])
def test_a_verdict_job_that_did_not_succeed_is_not_counted(fake: FakeGitHub, verdict: str) -> None:
    fake.add_status(HEAD, "ds4ci/sm86", "success", "pass", target_url=trusted_run(fake, 706, verdict=verdict))
    proc = merge_check(fake)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    said = "has not finished (in_progress)" if verdict == "in_progress" else f"concluded {verdict}"
    assert f"run 706's job 'verdict sm86' {said} (attempt 1)" in gate_line(proc)


def test_a_run_without_a_verdict_job_is_not_counted(fake: FakeGitHub) -> None:
    url = fake.add_run(707, title=f"ds4ci gate {HEAD}", jobs={"gate sm86": "success"})
    fake.add_status(HEAD, "ds4ci/sm86", "success", "pass", target_url=url)
    proc = merge_check(fake)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "run 707 has no job 'verdict sm86' in attempt 1" in gate_line(proc)


def test_a_rerun_that_failed_after_a_success_is_not_counted(fake: FakeGitHub) -> None:
    url = trusted_run(fake, 708)
    fake.add_status(HEAD, "ds4ci/sm86", "success", "pass", target_url=url)  # attempt 1's
    fake.add_attempt(708, {"gate sm86": "failure", "verdict sm86": "failure"})  # re-run: failed
    proc = merge_check(fake)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "run 708's job 'verdict sm86' concluded failure (attempt 2)" in gate_line(proc)


def test_the_newest_trusted_run_decides(fake: FakeGitHub) -> None:
    """A copy of an older passing run's link after a newer real run failed does not count either."""
    older = trusted_run(fake, 709)
    fake.add_status(HEAD, "ds4ci/sm86", "success", "pass", target_url=older)
    newer = trusted_run(fake, 710, verdict="failure")
    fake.add_status(HEAD, "ds4ci/sm86", "failure", "fail", target_url=newer)
    fake.add_status(HEAD, "ds4ci/sm86", "success", "pass", target_url=older)  # the copy
    proc = merge_check(fake)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "run 710's job 'verdict sm86' concluded failure" in gate_line(proc)


def test_an_older_commit_green_only_by_a_copied_link_is_no_validated_predecessor(fake: FakeGitHub) -> None:
    url = trusted_run(fake, 711, verdict="failure", head=OLD)
    fake.add_status(OLD, "ds4ci/sm86", "success", "pass", target_url=url)
    proc = merge_check(fake)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    line = gate_line(proc)
    assert "no success on any commit of this PR" in line and "older head" not in line, line


def test_an_older_commit_the_gate_vouched_for_is_the_validated_predecessor(fake: FakeGitHub) -> None:
    fake.add_status(OLD, "ds4ci/sm86", "success", "pass", target_url=trusted_run(fake, 712, head=OLD))
    proc = merge_check(fake)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"it was success only on the older head {OLD}" in gate_line(proc)


# ----- vouch = "publisher": check runs of the adopter's own GitHub App --------------------------------------------


def _publisher_config(tmp: Path, app_id: object = 100968, extra: str = "") -> Path:
    config = tmp / "ds4ci.toml"
    config.write_text(f'[merge]\nrunners = ["sm86"]\napprovals = 0\npublisher = "ds4ci-gate[bot]"\n'
                      f'vouch = "publisher"\nvouch_app_id = {json.dumps(app_id)}\n{extra}', encoding="utf-8")
    return config


def _app_id(slug: str) -> int:
    return 100000 + sum(map(ord, slug))  # the fake's app.id of an app it does not know


def test_publisher_mode_counts_a_check_run_of_the_named_app(fake: FakeGitHub, tmp_path: Path) -> None:
    fake.add_check_run(HEAD, "ds4ci/sm86", app="ds4ci-gate")
    proc = merge_check(fake, "--config", str(_publisher_config(tmp_path, _app_id("ds4ci-gate"))), "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (gate,) = [c for c in json.loads(proc.stdout)["conditions"] if c["name"] == "gate ds4ci/sm86"]
    assert f"GitHub App ds4ci-gate (id {_app_id('ds4ci-gate')})" in gate["detail"], gate["detail"]


def test_publisher_mode_counts_no_job_token_s_record(fake: FakeGitHub, tmp_path: Path) -> None:
    fake.add_check_run(HEAD, "ds4ci/sm86", app="github-actions")  # what any job's GITHUB_TOKEN creates
    fake.add_status(HEAD, "ds4ci/sm86", "success", "pass", creator="ds4ci-gate[bot]",
                    target_url=trusted_run(fake, 713))
    proc = merge_check(fake, "--config", str(_publisher_config(tmp_path, _app_id("ds4ci-gate"))))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"no check run ds4ci/sm86 of the GitHub App with id {_app_id('ds4ci-gate')}" in gate_line(proc)


@pytest.mark.parametrize(("config", "message"), [
    ('vouch = "anyone"', "merge.vouch: expected one of"),
    ('vouch = "publisher"', "merge.vouch_app_id: vouch = \"publisher\" needs the id of the GitHub App"),
    ('vouch_app_id = "abc"', "merge.vouch_app_id"),
], ids=["unknown kind", "publisher without an app", "app id not a number"])
def test_a_bad_vouch_setting_is_a_usage_error(fake: FakeGitHub, tmp_path: Path, config: str, message: str) -> None:
    path = tmp_path / "ds4ci.toml"
    path.write_text(f'[merge]\nrunners = ["sm86"]\n{config}\n', encoding="utf-8")
    proc = merge_check(fake, "--config", str(path))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert message in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
