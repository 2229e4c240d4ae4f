"""merge-check reads a gate's check run: only the publisher's app's, only on the exact head, and never against its status."""

from __future__ import annotations

from dataclasses import replace

from ds4ci.github import merge
from ds4ci.github.merge import CheckRun, MergeFacts, PullFacts, Requirements, Status

HEAD = "1" * 40
OLD = "0" * 40
NEED = Requirements(runners=("sm86",), approvals=0)  # publisher github-actions[bot]: app github-actions
VOUCHED = merge.Vouch(True, "run 9 (.github/workflows/gate.yml, pull_request_target on main, job 'verdict sm86' "
                            "success in attempt 1)")  # what the gatherer found in GitHub's records


def facts(*runs: CheckRun, statuses: tuple[Status, ...] = ()) -> MergeFacts:
    return MergeFacts(
        pull=PullFacts(42, HEAD, "open", merged=False, draft=False, mergeable=True, mergeable_state="clean"),
        statuses=statuses, check_runs=runs, vouches={"sm86": VOUCHED},
    )


def gate(f: MergeFacts, need: Requirements = NEED) -> merge.Condition:
    return next(c for c in merge.evaluate(f, need).conditions if c.name == "gate ds4ci/sm86")


def test_the_publishers_check_run_alone_satisfies_the_gate() -> None:
    found = gate(facts(CheckRun("ds4ci/sm86", "completed", "success", HEAD, app="github-actions", id=7)))
    assert found.ok and found.detail == f"success on the head {HEAD[:12]} (check run), vouched for by {VOUCHED.detail}"


def test_another_apps_check_run_of_the_gates_name_does_not_count() -> None:
    found = gate(facts(CheckRun("ds4ci/sm86", "completed", "success", HEAD, app="mallory-ci", id=7)))
    assert not found.ok
    assert "not set on the current head" in found.detail and "check run by app mallory-ci" in found.detail


def test_a_check_run_on_an_older_commit_does_not_count() -> None:
    assert not gate(facts(CheckRun("ds4ci/sm86", "completed", "success", OLD, app="github-actions", id=7))).ok


def test_status_and_check_run_must_agree() -> None:
    ok_status = (Status("ds4ci/sm86", "success"),)
    failed_run = CheckRun("ds4ci/sm86", "completed", "failure", HEAD, app="github-actions", id=7)
    found = gate(facts(failed_run, statuses=ok_status))
    assert not found.ok and "check run failure" in found.detail
    both = gate(facts(replace(failed_run, conclusion="success"), statuses=ok_status))
    assert both.ok and "(status and check run), vouched for by run 9" in both.detail


def test_neutral_and_pending_check_runs_are_not_a_pass() -> None:
    for run in (CheckRun("ds4ci/sm86", "completed", "neutral", HEAD, app="github-actions", id=7),
                CheckRun("ds4ci/sm86", "completed", "action_required", HEAD, app="github-actions", id=8),
                CheckRun("ds4ci/sm86", "in_progress", None, HEAD, app="github-actions", id=9)):
        assert not gate(facts(run)).ok, run


def test_a_publisher_that_is_a_person_has_no_check_runs_that_count() -> None:
    need = replace(NEED, publisher="alice")
    run = CheckRun("ds4ci/sm86", "completed", "success", HEAD, app="alice", id=7)
    assert not gate(facts(run), need).ok
