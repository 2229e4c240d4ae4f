"""End to end under ``act``: gate.yml as GitHub runs it today, a copy of it and init's caller of ds4ci's own.

* pull_request_target runs the default branch's gate.yml (GitHub, since 2025-12-08) whatever the pull
  request's base: a pull request into main and one into a release branch are gated with the default branch's
  settings, and merge-check, reading GitHub's record of the run, says each is ready. (act 0.2.89 still plays the
  older GitHub: its GITHUB_SHA is the base's tip; the settings' commit comes from GitHub's record of the run, which
  the fake holds as GitHub makes it today, so the release branch's own, broken, ds4ci.toml is never read.)
* actions/checkout v7.0.1 (v6.1.0 too) refuses a fork pull request's head under pull_request_target unless the
  step sets ``allow-unsafe-pr-checkout: true``; the checkout stand-in keeps that guard (tests/unit/rehearse/
  test_checkout_guard.py), so an approved fork's run that reaches its statuses passed it.
* merge_group: a merge queue's entry is gated on the queue's merge commit, whose statuses let the queue go on.

What act replaces, and how: tests/actkit.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from actkit import (
    ACT,
    ACT_RUN_ID,
    CHECKOUT,
    MARKS,
    act_log,
    ds4ci_repository,
    git,
    make_repo,
    pull_request_payload,
    run_act,
    stand_ins,
)
from fakegithub import APP_TOKEN, WRITE_TOKEN, FakeGitHub

from ds4ci.rehearse import act

pytestmark = MARKS
RUNNERS = ("gfx1151", "sm86")


def _engine(tmp: Path, models: Path, mode: str) -> tuple[Path, str, dict[str, Path]]:
    """The engine's repository with a copy of gate.yml, or ("caller") with init's short caller of acme/ds4ci's."""
    if mode == "copy":
        return (*make_repo(tmp, models), {})
    ds4ci, pin = ds4ci_repository(tmp)
    return (*make_repo(tmp, models, calls=f"acme/ds4ci@{pin}"), {"acme/ds4ci": ds4ci})


def _verdict_jobs(log: str, mode: str) -> dict[str, str]:
    """The verdict jobs GitHub records for the run (named '<calling job> / ...' where the caller calls ds4ci's)."""
    prefix = "ds4ci / " if mode == "caller" else ""
    return {f"{prefix}verdict {r}": "success" if f"runner {r}: verdict success" in log else "failure" for r in RUNNERS}


def _merge_check(fake: FakeGitHub, pr: int) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "DS4CI_"))}
    env.update({"GITHUB_API_URL": fake.url, "GITHUB_TOKEN": WRITE_TOKEN, "GITHUB_REPOSITORY": "acme/engine",
                "DS4CI_GITHUB_THROTTLE": "0"})
    runners = [arg for r in RUNNERS for arg in ("--runner", r)]
    return subprocess.run([str(Path(sys.executable).parent / "ds4ci"), "merge-check", "--pr", str(pr), *runners,
                           "--approvals", "0", "--json"], capture_output=True, text=True, env=env, timeout=120,
                          check=False)


@pytest.mark.parametrize("base", ["main", "release"])
def test_a_pull_request_into_the_default_or_a_release_branch_is_gated_and_merge_check_says_ready(
        tmp_path: Path, fake: FakeGitHub, wheelhouse: Path, base: str) -> None:
    """Defect: the vouch demanded that the run ran on the pull request's base branch, which GitHub no longer
    does: a pull request into a release branch could never be ready. Now both are gated by the default branch's
    gate.yml and settings (the run at main's tip), and merge-check answers from GitHub's record of that run."""
    models = tmp_path / "models"
    repo, head = make_repo(tmp_path, models)
    main = git(repo, "rev-parse", "main")
    git(repo, "checkout", "-q", "-b", "release", "main")
    (repo / "RELEASE.txt").write_text("the release branch moved on\n")
    # The release branch's own ds4ci.toml pins a target that matches nothing: were it read, the gate would fail.
    toml = (repo / "ds4ci.toml").read_text()
    pin = next(line for line in toml.splitlines() if line.startswith("target_sha256"))
    (repo / "ds4ci.toml").write_text(toml.replace(pin, f'target_sha256 = "{"f" * 64}"'))
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "release notes")
    release = git(repo, "rev-parse", "HEAD")
    git(repo, "checkout", "-q", "main")  # act runs the default branch's gate.yml: GITHUB_SHA is main's tip
    fake.add_branch("main", [main])
    fake.add_branch("release", [main, release])
    fake.add_pull(7, head, base=base)
    fake.set_pull_files(7, ["CHANGE.txt"])
    pull = act.pull_request(7, head, main if base == "main" else release, "acme/engine", base_ref=base)

    # The Actions GITHUB_TOKEN (github-actions[bot], the publisher merge-check counts by default).
    proc = run_act(tmp_path, repo, fake, wheelhouse, models, {}, pull=pull, token=APP_TOKEN)

    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, act_log(proc)
    assert f"the default branch main (pull_request_target); the pull request merges into {base}" in log, act_log(proc)
    assert f"trusted settings: ds4ci.toml of {main}, from GitHub's record of run {ACT_RUN_ID}" in log, act_log(proc)
    # The PR's own ds4ci.toml (widths [5], a pin that matches nothing) was not used: the default branch's passed.
    assert fake.latest_states(head) == {f"ds4ci/{r}": "success" for r in RUNNERS}, act_log(proc)
    (comment,) = fake.comments(7)
    based = main if base == "main" else release
    assert f"base `{based[:7]}`" in comment["body"], comment["body"]  # the merge analysis is against the PR's base
    fake.record_jobs(ACT_RUN_ID, _verdict_jobs(log, "copy"))

    check = _merge_check(fake, 7)
    assert check.returncode == 0, check.stdout + check.stderr
    gates = [c for c in json.loads(check.stdout)["conditions"] if c["name"].startswith("gate ")]
    assert len(gates) == 2 and all(c["ok"] for c in gates), gates
    for gate in gates:
        assert f"run {ACT_RUN_ID}" in gate["detail"] and "pull_request_target on main" in gate["detail"], gate
        assert f"with the settings of main at {main[:12]}" in gate["detail"], gate


@pytest.mark.parametrize("mode", ["copy", "caller"])
def test_an_approved_fork_s_head_is_checked_out_past_checkout_s_fork_guard(
        tmp_path: Path, fake: FakeGitHub, wheelhouse: Path, mode: str) -> None:
    """checkout v7.0.1 refuses a fork's head under pull_request_target unless the step opts in: the head's
    checkout sets allow-unsafe-pr-checkout (its code runs only in the sandbox), and the run goes green."""
    models = tmp_path / "models"
    repo, head, others = _engine(tmp_path, models, mode)
    fake.add_pull(7, head)
    fake.set_pull_files(7, ["CHANGE.txt"])
    fake.add_run_review(ACT_RUN_ID, "ds4ci-fork-review")  # a maintainer approved this run's environment

    proc = run_act(tmp_path, repo, fake, wheelhouse, models, {},
                   pull=pull_request_payload(repo, 7, head, fork="mallory/engine"), others=others)

    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, act_log(proc)
    assert "fork=true" in log and "a maintainer approved this fork's run" in log, act_log(proc)
    assert "Refusing to check out fork pull request code" not in log, act_log(proc)
    assert fake.latest_states(head) == {f"ds4ci/{r}": "success" for r in RUNNERS}, act_log(proc)


# The caller only: it runs the same gate.yml through workflow_call, so its merge_group path is the copy's too;
# the copy's own trigger is checked without act (tests/e2e/test_workflows.py), and one act run fewer keeps the
# suite inside CI's budget.
@pytest.mark.parametrize("mode", ["caller"])
def test_a_merge_queue_entry_is_gated_on_its_merge_commit_and_the_statuses_land_there(
        tmp_path: Path, fake: FakeGitHub, wheelhouse: Path, mode: str) -> None:
    """merge_group: the gate runs on the queue's merge commit with the settings of the queue's base (the default
    branch's tip), and every ds4ci/<runner> status is set on that commit (what a required check of the queue reads);
    the pull request's head and its comment are left alone, and the run says a merge commit was gated."""
    models = tmp_path / "models"
    repo, _, others = _engine(tmp_path, models, mode)
    main = git(repo, "rev-parse", "main")
    # The queued pull request changes only its code: the engine's head also edits ds4ci.toml, and a merge
    # commit that changes the gate's files against main (the group's diff, which the fake serves) is refused.
    git(repo, "checkout", "-q", "-b", "queued", "main")
    (repo / "CHANGE.txt").write_text("the change under review\n")
    git(repo, "add", "CHANGE.txt")
    git(repo, "commit", "-q", "-m", "change under review")
    head = git(repo, "rev-parse", "HEAD")
    queue = f"gh-readonly-queue/main/pr-7-{head}"
    git(repo, "checkout", "-q", "-b", queue, "main")
    git(repo, "merge", "-q", "--no-ff", "-m", "Merge pull request #7", head)
    merge = git(repo, "rev-parse", "HEAD")
    git(repo, "checkout", "-q", "main")
    fake.add_pull(7, head)
    fake.set_pull_files(7, ["CHANGE.txt"])

    proc = run_act(tmp_path, repo, fake, wheelhouse, models, {}, others=others,
                   merge_group=act.merge_group(merge, main, 7, head))

    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, act_log(proc)
    for line in (f"merge queue: gating the merge commit {merge} of pull request #7's entry", "gated=merge",
                 f"trusted settings: ds4ci.toml of {main}, from the merge queue's base",
                 f"merge queue: this run gated the merge commit {merge} (the entry of pull request #7)"):
        assert line in log, (line, act_log(proc))
    assert fake.latest_states(merge) == {f"ds4ci/{r}": "success" for r in RUNNERS}, act_log(proc)
    assert fake.statuses(head) == [] and fake.comments() == [], act_log(proc)
    for runner in RUNNERS:
        assert f"runner {runner}: verdict success" in log, act_log(proc)


@pytest.mark.parametrize("allow", [False, True], ids=["without the input", "with allow-unsafe-pr-checkout"])
def test_under_act_the_checkout_stand_in_keeps_the_fork_guard(tmp_path: Path, allow: bool) -> None:
    """The guard is live where act runs the stand-in (the event's name and payload reach it): a fork's head is
    refused unless the step opts in, so the gate runs above passed it because gate.yml sets the input."""
    repo = tmp_path / "engine"
    (repo / ".github" / "workflows").mkdir(parents=True)
    (repo / "CHANGE.txt").write_text("the fork's change\n")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "head")
    head = git(repo, "rev-parse", "HEAD")
    opt_in = "\n          allow-unsafe-pr-checkout: true" if allow else ""
    (repo / ".github" / "workflows" / "probe.yml").write_text(f"""\
on: pull_request_target
jobs:
  probe:
    runs-on: ubuntu-latest
    steps:
      - uses: {CHECKOUT}
        with:
          repository: acme/engine
          ref: {head}
          path: subject
          persist-credentials: false{opt_in}
      - run: test -f subject/CHANGE.txt && echo "checked out the fork's head"
""")
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"pull_request": pull_request_payload(repo, 7, head, fork="mallory/engine"),
                                 "repository": {"full_name": "acme/engine", "id": act.REPOSITORY_ID}}))
    (tmp_path / "store").mkdir()
    local = stand_ins(tmp_path / "stand-ins", repo, tmp_path / "store")
    (tmp_path / "home").mkdir()
    cmd = [str(ACT), "pull_request_target", "-W", ".github/workflows/probe.yml", "-e", str(event),
           "-P", "ubuntu-latest=-self-hosted", "--action-cache-path", str(tmp_path / "actcache"),
           "--local-repository", f"{CHECKOUT}={local[CHECKOUT]}"]
    proc = subprocess.run(cmd, cwd=repo, env=act.environment(tmp_path / "home"), capture_output=True, text=True,
                          timeout=300, check=False)
    log = proc.stdout + proc.stderr
    if allow:
        assert proc.returncode == 0 and "checked out the fork's head" in log, act_log(proc)
    else:
        assert proc.returncode != 0, act_log(proc)
        assert "Refusing to check out fork pull request code from a 'pull_request_target' workflow" in log, act_log(proc)
        assert "checked out the fork's head" not in log
