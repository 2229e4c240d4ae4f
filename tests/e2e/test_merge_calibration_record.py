"""merge.calibration_max_age_days reads a runner's calibration day only from the record of the run that vouched.

That record is an artifact name of the trusted gate's run (``ds4ci-calibrated--<runner>=<day>``, gate.yml's
publish job uploads it from ``publish --calibration-record``): only a run's own jobs can upload its artifacts. No
check run's text counts. Each attack below made merge-check say "ready" before: a check run ``ds4ci/<runner>`` a
workflow the pull request adds posts with its own token, and ds4ci's own check run quoting a process name the pull
request's server chose. Real CLI, real HTTP, the stateful fake GitHub API.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from fakegithub import APP_TOKEN, WRITE_TOKEN, FakeGitHub

DS4CI = str(Path(sys.executable).parent / "ds4ci")
HEAD = "1" * 40
OLD = "0" * 40
TODAY = dt.datetime.now(dt.timezone.utc).date()
PHRASE = f"calibrated {TODAY.isoformat()} on engine abcdef0"
NEVER = ("**Proof strength**: runner sm86 was never calibrated with these tiny models (no calibration record in "
         "/srv/cal matches it): how strong the gate's proof is here is not measured")


@pytest.fixture
def fake() -> Iterator[FakeGitHub]:
    server = FakeGitHub().start()
    server.add_pull(42, HEAD, [OLD, HEAD])
    yield server
    server.stop()


def _vouched(fake: FakeGitHub, run: int = 700) -> str:
    """The trusted gate's run for the head with its verdict job green, and the publisher's status linking it."""
    url = fake.add_run(run, title=f"ds4ci gate {HEAD}", jobs={"gate sm86": "success", "verdict sm86": "success"})
    fake.add_status(HEAD, "ds4ci/sm86", "success", "pass", target_url=url)
    return url


def _check_run(fake: FakeGitHub, summary: str, details_url: str | None = None) -> None:
    """A check run ds4ci/sm86 made with a job's token (github-actions): ds4ci's own, or a pull request workflow's."""
    body: dict[str, Any] = {"name": "ds4ci/sm86", "head_sha": HEAD, "status": "completed", "conclusion": "success",
                            "output": {"title": "pass", "summary": summary}}
    if details_url:
        body["details_url"] = details_url
    made = requests.post(f"{fake.url}/repos/acme/engine/check-runs", json=body, timeout=30,
                         headers={"Authorization": f"token {APP_TOKEN}"})
    assert made.status_code == 201, made.text


def _merge_check(fake: FakeGitHub, tmp: Path, days: int = 30) -> tuple[int, dict[str, Any]]:
    config = tmp / "ds4ci.toml"
    config.write_text(f'[merge]\nrunners = ["sm86"]\napprovals = 0\ncalibration_max_age_days = {days}\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("GITHUB_")}
    env.update({"GITHUB_API_URL": fake.url, "GITHUB_TOKEN": WRITE_TOKEN, "GITHUB_REPOSITORY": "acme/engine",
                "DS4CI_GITHUB_THROTTLE": "0"})
    done = subprocess.run([DS4CI, "merge-check", "--pr", "42", "--config", str(config), "--json"],
                          capture_output=True, text=True, env=env, timeout=120, check=False)
    assert done.returncode in (0, 1), done.stdout + done.stderr
    return done.returncode, json.loads(done.stdout)


def _calibration(report: dict[str, Any]) -> dict[str, Any]:
    (found,) = [c for c in report["conditions"] if c["name"] == "calibration of sm86"]
    return found


def test_a_pull_request_workflows_check_run_citing_a_calibration_counts_for_nothing(fake: FakeGitHub,
                                                                                   tmp_path: Path) -> None:
    """Red team: the trusted gate cites no calibration; a workflow the PR adds posts its own ds4ci/sm86 check run
    (github-actions, newer) saying 'calibrated TODAY on engine abcdef0'."""
    url = _vouched(fake)
    _check_run(fake, NEVER, url)
    _check_run(fake, f"anything at all; {PHRASE}")
    code, report = _merge_check(fake, tmp_path)
    found = _calibration(report)
    assert code == 1 and report["ready"] is False and found["ok"] is False
    assert "run 700, which vouched for the gate, records no calibration of runner sm86" in found["detail"]


def test_ds4ci_s_own_check_run_quoting_a_process_name_counts_for_nothing(fake: FakeGitHub, tmp_path: Path) -> None:
    """Red team: the PR's server leaves a child named 'calibrated TODAY on engine abcdef0'; the gate's warning
    quotes it and publish puts it in ds4ci's own check run, linking the trusted run; no calibration was cited."""
    url = _vouched(fake)
    _check_run(fake, f"{NEVER}<br>**Warnings**: processes the server left behind were killed: "
                     f"pid 4242 (/tmp/{PHRASE} 300)", url)
    code, report = _merge_check(fake, tmp_path)
    assert code == 1 and _calibration(report)["ok"] is False
    assert "records no calibration of runner sm86" in _calibration(report)["detail"]


def test_the_vouched_runs_record_of_a_recent_calibration_is_ready_and_an_old_one_is_not(fake: FakeGitHub,
                                                                                        tmp_path: Path) -> None:
    url = _vouched(fake)
    _check_run(fake, "**Proof strength**: planted faults caught: 13 of 13; calibrated 2001-01-01 on engine 41ee7d0",
               url)  # the text is never read: the record below decides
    recent = (TODAY - dt.timedelta(days=3)).isoformat()
    fake.add_artifact(700, f"ds4ci-calibrated--other=2001-01-01--sm86={recent}")
    code, report = _merge_check(fake, tmp_path)
    assert code == 0 and report["ready"] is True, report
    assert _calibration(report)["detail"] == f"calibrated {recent} (run 700's record; 3 days ago, at most 30)"
    code, report = _merge_check(fake, tmp_path, days=2)
    assert code == 1 and "3 days ago: older than the 2 days" in _calibration(report)["detail"]


def test_a_record_in_a_run_that_did_not_vouch_counts_for_nothing(fake: FakeGitHub, tmp_path: Path) -> None:
    """A pull request's own workflow run can upload artifacts of its own: only the vouching run's are read."""
    _vouched(fake)
    fake.add_run(900, path=".github/workflows/evil.yml", event="pull_request", title=f"ds4ci gate {HEAD}")
    fake.add_artifact(900, f"ds4ci-calibrated--sm86={TODAY.isoformat()}")
    fake.add_artifact(700, "ds4ci-calibrated--sm86=not-a-day!")
    code, report = _merge_check(fake, tmp_path)
    assert code == 1 and "records no calibration of runner sm86" in _calibration(report)["detail"]


def test_a_runner_never_calibrated_is_not_ready_and_says_so(fake: FakeGitHub, tmp_path: Path) -> None:
    url = _vouched(fake)
    _check_run(fake, NEVER, url)
    code, report = _merge_check(fake, tmp_path)
    detail = _calibration(report)["detail"]
    assert code == 1 and report["ready"] is False
    assert detail.startswith("run 700, which vouched for the gate, records no calibration of runner sm86")
    assert "the runner was never calibrated with these tiny models" in detail
    assert "merge.calibration_max_age_days requires one from the last 30 days" in detail


def test_a_green_nobody_vouched_for_reads_no_calibration(fake: FakeGitHub, tmp_path: Path) -> None:
    fake.add_status(HEAD, "ds4ci/sm86", "success", "pass", target_url="https://github.com/acme/engine/actions/runs/5")
    fake.add_run(5, path=".github/workflows/evil.yml", event="pull_request", title=f"ds4ci gate {HEAD}")
    fake.add_artifact(5, f"ds4ci-calibrated--sm86={TODAY.isoformat()}")
    code, report = _merge_check(fake, tmp_path)
    assert code == 1 and _calibration(report)["detail"].startswith("no calibration read: no run of the trusted gate")
