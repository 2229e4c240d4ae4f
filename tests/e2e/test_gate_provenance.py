"""A pull request cannot pick the gate's definition, and a status it could set never counts.

The attacks of issue "Trust III", each against the real CLI over real HTTP (the stateful fake GitHub API):
a PR that edits gate.yml, adds a workflow (with the runner's labels) or edits ds4ci.toml is refused by the
trusted plan unless a maintainer dispatched it; a run of another definition is refused; and merge-check
counts a ds4ci/<runner> success only when it links a run of the trusted gate.yml for the head.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakegithub import WRITE_TOKEN, FakeGitHub

DS4CI = str(Path(sys.executable).parent / "ds4ci")
HEAD = "a" * 40
TABLE = json.dumps([{"name": "gfx1151", "labels": ["self-hosted", "gfx1151"], "queue": "gfx1151", "role": "gate"}])


@pytest.fixture
def fake() -> Iterator[FakeGitHub]:
    server = FakeGitHub().start()
    server.add_pull(7, HEAD)
    yield server
    server.stop()


def _plan(fake: FakeGitHub, tmp: Path, event: str, *extra: str, run_id: int = 500,
          doc: dict[str, object] | None = None) -> subprocess.CompletedProcess[str]:
    payload = tmp / "event.json"
    repo = {"full_name": "acme/engine"}
    payload.write_text(json.dumps(doc or {"pull_request": {"number": 7, "head": {"sha": HEAD, "repo": repo},
                                                           "base": {"repo": repo}}}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("GITHUB_")}
    env.update({"GITHUB_EVENT_NAME": event, "GITHUB_EVENT_PATH": str(payload), "GITHUB_REPOSITORY": "acme/engine",
                "GITHUB_API_URL": fake.url, "GITHUB_TOKEN": WRITE_TOKEN, "GITHUB_RUN_ID": str(run_id),
                "DS4CI_GITHUB_THROTTLE": "0"})
    args = ["--runner-table", TABLE, "--refuse-definition-changes", "--trusted-workflow", ".github/workflows/gate.yml"]
    if event == "workflow_dispatch":
        args += ["--pr", "7", "--head-sha", HEAD]
    return subprocess.run([DS4CI, "dispatch-check", *args, *extra], capture_output=True, text=True, env=env,
                          timeout=60, cwd=tmp)


@pytest.mark.parametrize("files", [[".github/workflows/gate.yml"], [".github/workflows/mine.yml"], ["action.yml"],
                                   ["ds4ci.toml"], [("src/x.c", ".github/workflows/report.yml")]],
                         ids=["edits gate.yml", "adds a workflow", "edits action.yml", "edits ds4ci.toml",
                              "renames report.yml away"])
def test_a_pr_that_changes_the_gate_s_own_files_is_not_gated_automatically(
        fake: FakeGitHub, tmp_path: Path, files: list[str | tuple[str, str]]) -> None:
    fake.set_pull_files(7, ["src/engine.c", *files])
    fake.add_run(500, event="pull_request_target", title=f"ds4ci gate {HEAD}")
    proc = _plan(fake, tmp_path, "pull_request_target")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "changes the gate's own definition" in proc.stderr and "dispatches the gate" in proc.stderr
    assert "matrix=" not in proc.stdout  # no plan: no gate job, no status


def test_a_maintainer_s_dispatch_gates_such_a_pr_and_says_so(fake: FakeGitHub, tmp_path: Path) -> None:
    fake.set_pull_files(7, [".github/workflows/gate.yml"])
    fake.add_run(501, event="workflow_dispatch", head_branch="main", title=f"ds4ci gate {HEAD}")
    proc = _plan(fake, tmp_path, "workflow_dispatch", run_id=501)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "gated because a maintainer dispatched it" in proc.stdout and "matrix=" in proc.stdout


def test_a_pr_that_changes_only_its_own_code_is_gated(fake: FakeGitHub, tmp_path: Path) -> None:
    fake.set_pull_files(7, ["server/src/spec.cpp", "docs/.github/workflows/not-a-workflow.md"])
    fake.add_run(500, event="pull_request_target", title=f"ds4ci gate {HEAD}")
    proc = _plan(fake, tmp_path, "pull_request_target")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert ("trusted definition: run 500 runs .github/workflows/gate.yml of the default branch main "
            "(pull_request_target); the pull request merges into main; the settings are main's") in proc.stdout
    assert "gated=head" in proc.stdout


def test_a_pr_into_a_release_branch_is_gated_by_the_default_branch_s_definition(fake: FakeGitHub, tmp_path: Path) -> None:
    """GitHub runs the default branch's gate.yml for a PR into any branch (since 2025-12-08) and records the run on
    the default branch: the plan accepts it (defect: it demanded the base branch, so such a PR was never gated)."""
    fake.add_branch("release", ["7e1ea5e0" * 5])
    fake.add_pull(7, HEAD, base="release")
    fake.set_pull_files(7, ["src/engine.c"])
    fake.add_run(500, event="pull_request_target", title=f"ds4ci gate {HEAD}")
    proc = _plan(fake, tmp_path, "pull_request_target")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert ("of the default branch main (pull_request_target); the pull request merges into release; the settings "
            "are main's") in proc.stdout


MERGE = "c" * 40


def _queue_event(pr: int = 7, base: str = "main") -> dict[str, object]:
    return {"merge_group": {"head_sha": MERGE, "head_ref": f"refs/heads/gh-readonly-queue/{base}/pr-{pr}-{HEAD}",
                            "base_sha": "ba5e" * 10, "base_ref": f"refs/heads/{base}"}}


def test_a_merge_queue_entry_gates_its_merge_commit(fake: FakeGitHub, tmp_path: Path) -> None:
    fake.set_pull_files(7, ["src/engine.c"])
    fake.add_commit_files(MERGE, ["src/engine.c", "src/other.c"])  # the group: #7 and an entry ahead of it
    fake.add_run(503, event="merge_group", head_branch=f"gh-readonly-queue/main/pr-7-{HEAD}", head_sha=MERGE,
                 title=f"ds4ci gate {MERGE}")
    proc = _plan(fake, tmp_path, "merge_group", run_id=503, doc=_queue_event())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for line in (f"merge queue: gating the merge commit {MERGE} of pull request #7's entry", f"head-sha={MERGE}",
                 "gated=merge", "queued-pr=7", "fork=false"):
        assert line in proc.stdout.splitlines(), (line, proc.stdout)
    assert "pr=" in proc.stdout.splitlines()  # no pull request to comment on: its comment is about its head


GROUP_CHANGE = "(pull request #7's entry, with every entry ahead of it) changes the gate's own definition"


@pytest.mark.parametrize(("files", "group", "branch", "reason"), [
    ([".github/workflows/gate.yml"], [".github/workflows/gate.yml"], "main", GROUP_CHANGE),
    (["src/engine.c"], ["src/engine.c", ".github/workflows/gate.yml"], "main", GROUP_CHANGE),
    (["src/engine.c"], ["src/engine.c", "ds4ci.toml"], "main", GROUP_CHANGE),
    (["src/engine.c"], ["src/engine.c"], "release", "not a queue of the default branch main"),
], ids=["an entry that changes gate.yml", "an entry behind one that changes gate.yml",
        "an entry behind one that changes ds4ci.toml", "a queue of a release branch"])
def test_a_merge_queue_entry_that_cannot_be_gated_is_refused(fake: FakeGitHub, tmp_path: Path, files: list[str],
                                                             group: list[str], branch: str, reason: str) -> None:
    """The queue's merge commit holds every entry ahead of this one: its whole diff against the default branch
    (GitHub's compare) is checked, not just the queued pull request's files (defect: an earlier entry's change to
    gate.yml or ds4ci.toml went unseen)."""
    fake.set_pull_files(7, files)
    fake.add_commit_files(MERGE, group)
    fake.add_run(504, event="merge_group", head_branch=f"gh-readonly-queue/{branch}/pr-7-{HEAD}", head_sha=MERGE,
                 title=f"ds4ci gate {MERGE}")
    proc = _plan(fake, tmp_path, "merge_group", run_id=504, doc=_queue_event(base=branch))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert reason in proc.stderr and "matrix=" not in proc.stdout


@pytest.mark.parametrize(("run", "reason"), [
    ({"event": "pull_request"}, "only pull_request_target, workflow_dispatch, merge_group run"),
    ({"path": ".github/workflows/copy.yml"}, "not the trusted gate (.github/workflows/gate.yml)"),
    ({"event": "workflow_dispatch", "head_branch": "feature"}, "was dispatched on the branch feature"),
], ids=["the PR's own copy (pull_request)", "another workflow file", "dispatched on the PR's branch"])
def test_a_run_of_any_other_definition_is_refused(fake: FakeGitHub, tmp_path: Path, run: dict[str, str],
                                                  reason: str) -> None:
    fake.add_run(502, title=f"ds4ci gate {HEAD}", **{"event": "pull_request_target", **run})
    event = "workflow_dispatch" if run.get("event") == "workflow_dispatch" else "pull_request_target"
    proc = _plan(fake, tmp_path, event, run_id=502)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "not a run of the trusted gate" in proc.stderr and reason in proc.stderr


# ----- merge-check: a status a PR-controlled job could set never counts ------------------------------


def _merge_check(fake: FakeGitHub) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GITHUB_")}
    env.update({"GITHUB_API_URL": fake.url, "GITHUB_TOKEN": WRITE_TOKEN, "GITHUB_REPOSITORY": "acme/engine",
                "DS4CI_GITHUB_THROTTLE": "0"})
    return subprocess.run([DS4CI, "merge-check", "--pr", "7", "--runner", "gfx1151", "--approvals", "0"],
                          capture_output=True, text=True, env=env, timeout=60)


def test_a_status_from_the_trusted_gate_counts(fake: FakeGitHub) -> None:
    fake.add_status(HEAD, "ds4ci/gfx1151", "success", "pass")  # linked to a run of the trusted gate for HEAD
    proc = _merge_check(fake)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize(("run", "reason"), [
    ({"path": ".github/workflows/evil.yml", "event": "pull_request"}, "is .github/workflows/evil.yml"),
    ({"event": "pull_request"}, "was started by pull_request"),
    ({"event": "workflow_dispatch", "head_branch": "feature"}, "was dispatched on the branch feature"),
    ({"title": "ds4ci gate " + "b" * 40}, "a gate of another commit"),
    ({"repo": "mallory/engine"}, "names no workflow run of acme/engine"),
], ids=["a workflow the PR added", "the PR's own gate.yml", "the gate dispatched on the PR's branch",
        "a trusted run of another commit", "a run of another repository"])
def test_a_success_posted_as_the_publisher_by_a_pr_controlled_run_is_ignored(
        fake: FakeGitHub, run: dict[str, str], reason: str) -> None:
    """Defect: merge-check counted any ds4ci/<runner> success by github-actions[bot], which every workflow a PR adds
    (or edits, under `on: pull_request`) posts as."""
    url = fake.add_run(600, **{"title": f"ds4ci gate {HEAD}", **run})
    fake.add_status(HEAD, "ds4ci/gfx1151", "success", "pass", target_url=url)
    proc = _merge_check(fake)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (line,) = [x for x in proc.stdout.splitlines() if "gate ds4ci/gfx1151" in x]
    assert "success on the current head aaaaaaaaaaaa not counted:" in line and reason in line


def test_a_success_with_no_link_is_ignored(fake: FakeGitHub) -> None:
    fake.add_status(HEAD, "ds4ci/gfx1151", "success", "pass", target_url=None)
    proc = _merge_check(fake)
    assert proc.returncode == 1 and "names no workflow run of acme/engine" in proc.stdout, proc.stdout + proc.stderr
