"""End to end under ``act``: gate.yml as the pull_request_target event, and the workflows in adopters' repositories.

As the pull_request_target event of a pull request, the plan job takes the PR from the payload, refuses
one that edits the gate's own workflow (nothing after it runs), and holds a fork's run until a maintainer
approved it. In a new repository, ``ds4ci init``'s workflows run green and report.yml comments on a fork's
pull request. What act replaces, and how: tests/actkit.py.
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
    CMAKE,
    MARKS,
    act_log,
    adopter,
    ds4ci_repository,
    git,
    make_repo,
    pull_request_payload,
    run_act,
    stand_ins,
)
from fakegithub import WRITE_TOKEN, FakeGitHub
from paths import ROOT

pytestmark = MARKS


def test_init_s_workflows_run_green_in_a_fresh_adopter_repository(
    tmp_path: Path, fake: FakeGitHub, wheelhouse: Path
) -> None:
    """Defect: init's gate.yml checked out the adopter's own repository as ds4ci, ran `pip install .` there
    ("Directory '.' is not installable") and `uses: ./` (no action.yml), and its matrix was gfx1151/sm86.

    Here ds4ci's repository is this checkout, reached only through the ref init wrote (act serves the called
    gate.yml, and the checkout stand-in acme/ds4ci, from it); init's gate.yml is the short caller of ds4ci's
    own (workflow_call); the matrix is init's one runner, `local`, from ds4ci.toml."""
    ds4ci, pin = ds4ci_repository(tmp_path)
    engine, head = adopter(tmp_path, "--ds4ci-ref", f"acme/ds4ci@{pin}", cmake=CMAKE)
    assert "pyproject.toml" not in git(engine, "ls-files") and "action.yml" not in git(engine, "ls-files")
    toml = (engine / "ds4ci.toml").read_text()
    assert 'server = "simulator"' in toml and "server_bin" not in toml.split("[gate]")[1]  # no wrapper script
    assert ("[build]" in toml) == CMAKE
    caller = (engine / ".github" / "workflows" / "gate.yml").read_text()  # the short caller of ds4ci's own
    assert len([line for line in caller.splitlines() if not line.startswith("#")]) <= 16, caller
    assert f"uses: acme/ds4ci/.github/workflows/gate.yml@{pin}" in caller
    assert not (engine / ".github" / "workflows" / "report.yml").exists()
    fake.add_pull(7, head)

    proc = run_act(tmp_path, engine, fake, wheelhouse, None, {"pr": "7", "head-sha": head, "runners": "all"},
                {"acme/ds4ci": ds4ci})

    assert proc.returncode == 0, act_log(proc)
    log = proc.stdout + proc.stderr
    assert f"ds4ci acme/ds4ci@{pin}" in log and "is not installable" not in log
    assert fake.latest_states(head) == {"ds4ci/local": "success"}, act_log(proc)
    (comment,) = fake.comments(7)
    assert "local" in comment["body"] and head[:12] in comment["body"]
    assert "DS4CI_SANDBOX" not in log  # nothing preset made the sandbox show the simulator's Python
    if CMAKE:  # the gate built the PR's head (its changed server.c) before the simulator ran
        assert "build: running `cmake -S . -B build" in log and "build: pass" in log, act_log(proc)
        assert "build ✅ pass (" in comment["body"], comment["body"]
    assert git(engine, "status", "--porcelain") == ""  # nothing was edited after init


def _engine(tmp: Path, models: Path, mode: str) -> tuple[Path, str, dict[str, Path]]:
    """The engine's repository with a copy of gate.yml, or ("caller") with init's short caller of acme/ds4ci's."""
    if mode == "copy":
        return (*make_repo(tmp, models), {})
    ds4ci, pin = ds4ci_repository(tmp)
    return (*make_repo(tmp, models, calls=f"acme/ds4ci@{pin}"), {"acme/ds4ci": ds4ci})


@pytest.mark.parametrize("mode", ["copy", "caller"])
def test_a_pull_request_that_edits_the_gates_workflow_is_refused_on_pull_request_target(
    tmp_path: Path, fake: FakeGitHub, wheelhouse: Path, mode: str
) -> None:
    """The event that gates every pull request: the plan job refuses a change to the gate's own definition,
    and nothing after it runs (no gate job on the GPU runners, no status, no comment); the same where the
    repository's gate.yml calls ds4ci's own."""
    models = tmp_path / "models"
    repo, head, others = _engine(tmp_path, models, mode)
    fake.add_pull(7, head)
    fake.set_pull_files(7, ["CHANGE.txt", ".github/workflows/gate.yml"])

    proc = run_act(tmp_path, repo, fake, wheelhouse, models, {}, pull=pull_request_payload(repo, 7, head),
                   others=others)

    log = proc.stdout + proc.stderr
    assert proc.returncode != 0, act_log(proc)
    assert ("pull request #7 changes the gate's own definition (.github/workflows/gate.yml); it is not gated "
            "automatically") in log, act_log(proc)
    assert "Building CXX" not in log and "[1/2] Compiling" not in log  # no gate job ran the PR's build
    assert fake.statuses() == [] and fake.comments() == []


@pytest.mark.parametrize("mode", ["copy", "caller"])
def test_a_forks_pull_request_without_an_approval_never_reaches_the_gpu_runners(
    tmp_path: Path, fake: FakeGitHub, wheelhouse: Path, mode: str
) -> None:
    """pull_request_target gives a fork's run the base's token: the approve job must hold it back until a
    maintainer approved environment ds4ci-fork-review, and without that no gate job runs and nothing is green
    (a copy of gate.yml, or init's caller of ds4ci's own)."""
    models = tmp_path / "models"
    repo, head, others = _engine(tmp_path, models, mode)
    fake.add_pull(7, head)
    fake.set_pull_files(7, ["CHANGE.txt"])
    pull = pull_request_payload(repo, 7, head, fork="mallory/engine")

    proc = run_act(tmp_path, repo, fake, wheelhouse, models, {}, pull=pull, others=others)

    log = proc.stdout + proc.stderr
    assert proc.returncode != 0, act_log(proc)
    assert "fork=true" in log and "::error::no maintainer approved environment ds4ci-fork-review" in log, act_log(proc)
    assert "[1/2] Compiling" not in log  # no gate job ran the fork's build
    held = "a fork's pull request without a maintainer's approval (environment ds4ci-fork-review): no gate ran"
    assert {(s["context"], s["state"], s["description"]) for s in fake.statuses()} == {
        ("ds4ci/gfx1151", "error", held), ("ds4ci/sm86", "error", held)}, fake.statuses()


def test_pull_request_target_plans_a_same_repository_pull_request_from_the_event(
    tmp_path: Path, fake: FakeGitHub, wheelhouse: Path
) -> None:
    """No inputs on this event: the plan takes the PR and its head from the payload, checks GitHub's record of
    the run, and plans every runner of the base's table for a pull request that is not a fork's."""
    models = tmp_path / "models"
    repo, head = make_repo(tmp_path, models)
    fake.add_pull(7, head)
    fake.set_pull_files(7, ["CHANGE.txt"])

    proc = run_act(tmp_path, repo, fake, wheelhouse, models, {}, pull=pull_request_payload(repo, 7, head), job="plan")

    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, act_log(proc)
    for line in ("pr=7", f"head-sha={head}", "fork=false", '"runner":"gfx1151"', '"runner":"sm86"'):
        assert line in log.replace('": "', '":"'), (line, act_log(proc))
    assert fake.statuses() == [] and fake.comments() == []


def test_fork_report_installs_ds4ci_from_its_repository_and_sets_no_status(
    tmp_path: Path, fake: FakeGitHub, wheelhouse: Path
) -> None:
    """The adopter's copy of report.yml, in a repository that is not ds4ci, comments on a fork's PR."""
    ds4ci, pin = ds4ci_repository(tmp_path)
    engine = tmp_path / "engine"  # the adopting repository: no pyproject.toml, nothing installable
    (engine / ".github" / "workflows").mkdir(parents=True)
    (engine / "README.md").write_text("the engine\n")
    copied = (ROOT / ".github" / "workflows" / "report.yml").read_text()
    assert copied.count('DS4CI_REF: ""') == 1
    (engine / ".github" / "workflows" / "report.yml").write_text(copied.replace('DS4CI_REF: ""', f"DS4CI_REF: acme/ds4ci@{pin}"))
    git(engine, "init", "-q", "-b", "main")
    git(engine, "remote", "add", "origin", "https://github.com/acme/engine.git")
    git(engine, "add", "-A")
    git(engine, "commit", "-q", "-m", "engine")

    doc = json.loads((ROOT / "tests" / "data" / "results" / "pass.json").read_text())
    head = doc["revisions"]["head"]["sha"]
    fake.add_pull(7, head)
    store = tmp_path / "artifacts"
    (store / "ds4ci-plan").mkdir(parents=True)
    (store / "ds4ci-plan" / "plan.txt").write_text(f"pr=7\nhead-sha={head}\n")
    (store / "ds4ci-results-gfx1151").mkdir()
    (store / "ds4ci-results-gfx1151" / "results.json").write_text(json.dumps(doc))
    local = stand_ins(tmp_path / "stand-ins", engine, store, {"acme/ds4ci": ds4ci})
    event = tmp_path / "event.json"
    event.write_text(json.dumps({
        "workflow_run": {"event": "pull_request", "head_repository": {"full_name": "fork/engine"},
                         "head_sha": head, "id": 99, "html_url": "https://github.invalid/acme/engine/actions/runs/99"},
        "repository": {"default_branch": "main", "full_name": "acme/engine"},
    }))
    home = tmp_path / "home"
    home.mkdir()
    cmd = [str(ACT), "workflow_run", "-W", ".github/workflows/report.yml", "-e", str(event),
           "-P", "ubuntu-latest=-self-hosted", "--action-cache-path", str(tmp_path / "actcache"),
           "-s", f"GITHUB_TOKEN={WRITE_TOKEN}", "--env", f"GITHUB_API_URL={fake.url}",
           "--env", "PIP_NO_INDEX=1", "--env", f"PIP_FIND_LINKS={wheelhouse}"]
    for uses, directory in local.items():
        cmd += ["--local-repository", f"{uses}={directory}"]
    # Nothing preset: no harness variable (DS4CI_*) reaches the workflows, as on a real runner.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "RUNNER_", "ACT", "DS4CI_"))}
    env["HOME"] = str(home)
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
    proc = subprocess.run(cmd, cwd=engine, env=env, capture_output=True, text=True, timeout=900)

    assert proc.returncode == 0, act_log(proc)
    assert "is not installable" not in proc.stdout + proc.stderr
    (comment,) = fake.comments(7)
    assert "unverified" in comment["body"] and "✅" not in comment["body"]
    assert fake.statuses() == []  # a fork's artifact never sets a status
