"""The checkout stand-in keeps actions/checkout's fork guard (v7.0.1, backported to v6.1.0): under
pull_request_target or workflow_run it refuses a fork pull request's code unless the step sets
``allow-unsafe-pr-checkout: true``. Its guard program runs here as the stand-in runs it (python3 -I, the step's
repository, ref and input as arguments, the event's payload at $GITHUB_EVENT_PATH), so the act tests that run
gate.yml with the stand-in also check that the input is set where the head is checked out, and only there."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from ds4ci.rehearse import act, standins

HEAD = "a" * 40
BASE = "b" * 40
FORK = "mallory/engine"


def _guard(tmp: Path, event: str, payload: dict[str, Any], repository: str, ref: str,
           allow: str = "false") -> subprocess.CompletedProcess[str]:
    (tmp / "store").mkdir(exist_ok=True)
    standins.write(tmp / "stand-ins", {"acme/engine": standins.Remote(tmp)}, tmp / "store")
    action = (tmp / "stand-ins" / "checkout" / "action.yml").read_text()
    assert "allow-unsafe-pr-checkout: {default: \"false\"}" in action and "guard.py" in action
    (tmp / "event.json").write_text(json.dumps(payload))
    env = {k: v for k, v in os.environ.items() if not k.startswith("GITHUB_")}
    env.update({"GITHUB_EVENT_NAME": event, "GITHUB_EVENT_PATH": str(tmp / "event.json")})
    return subprocess.run(["python3", "-I", str(tmp / "stand-ins" / "checkout-guard" / "guard.py"), repository, ref,
                           allow], capture_output=True, text=True, env=env, timeout=60, check=False)


def _pull(fork: bool) -> dict[str, Any]:
    pull = act.pull_request(7, HEAD, BASE, "acme/engine")
    if fork:
        pull["head"]["repo"] = {"full_name": FORK, "id": act.REPOSITORY_ID + 1}
    return {"pull_request": pull, "repository": {"full_name": "acme/engine", "id": act.REPOSITORY_ID}}


@pytest.mark.parametrize(("repository", "ref"), [("acme/engine", HEAD), ("acme/engine", "refs/pull/7/head"),
                                                 ("acme/engine", "refs/pull/7/merge"), (FORK, "feature")],
                         ids=["the head commit", "the head ref", "the merge ref", "the fork's repository"])
def test_a_fork_s_code_is_refused_under_pull_request_target_unless_the_step_opts_in(
        tmp_path: Path, repository: str, ref: str) -> None:
    refused = _guard(tmp_path, "pull_request_target", _pull(fork=True), repository, ref)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "Refusing to check out fork pull request code from a 'pull_request_target' workflow" in refused.stdout
    assert "allow-unsafe-pr-checkout: true" in refused.stdout
    (tmp_path / "allowed").mkdir()
    allowed = _guard(tmp_path / "allowed", "pull_request_target", _pull(fork=True), repository, ref, "true")
    assert allowed.returncode == 0 and allowed.stdout == "", allowed.stdout + allowed.stderr


@pytest.mark.parametrize(("event", "payload", "repository", "ref"), [
    ("pull_request_target", _pull(fork=False), "acme/engine", HEAD),  # the repository's own branch
    ("pull_request_target", _pull(fork=True), "acme/engine", BASE),  # the trusted settings' commit
    ("pull_request_target", _pull(fork=True), "acme/ds4ci", "v0.1.0"),  # ds4ci itself
    ("workflow_dispatch", _pull(fork=True), "acme/engine", HEAD),  # a maintainer's dispatch: no guard
    ("merge_group", {"merge_group": {"head_sha": HEAD}, "repository": {"id": 1}}, "acme/engine", HEAD),
], ids=["same repository", "the base commit", "another repository", "workflow_dispatch", "merge_group"])
def test_everything_else_is_checked_out(tmp_path: Path, event: str, payload: dict[str, Any], repository: str,
                                        ref: str) -> None:
    proc = _guard(tmp_path, event, payload, repository, ref)
    assert proc.returncode == 0 and proc.stdout == "", proc.stdout + proc.stderr


def test_a_fork_s_run_is_refused_in_a_workflow_run_too(tmp_path: Path) -> None:
    payload = {"workflow_run": {"event": "pull_request", "head_repository": {"full_name": FORK, "id": 2},
                                "head_sha": HEAD, "head_commit": {"id": HEAD}},
               "repository": {"full_name": "acme/engine", "id": 1}}
    proc = _guard(tmp_path, "workflow_run", payload, "acme/engine", HEAD)
    assert proc.returncode == 1 and "from a 'workflow_run' workflow" in proc.stdout, proc.stdout + proc.stderr
