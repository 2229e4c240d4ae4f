"""A negative control, set up as examples/ds4ci.toml says, walked from the gate to its status.

The defect: its gate passed and `verify` exited 0, yet publish set `error` ("results claim pass
but contradict themselves"). Here the example file's negative-control lines are switched on as a
maintainer would, the real gate runs in a real git checkout, the bundle verifies, and publish
(against the fake GitHub API, with the same file as the trusted config) sets `success` labelled
"negative control:"; merge-check does not require it unless it is listed.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakegithub import ACTIONS_LOGIN, APP_TOKEN, FakeGitHub
from gatekit import DS4CI, git_repo
from paths import ROOT


def example_as_negative_control() -> str:
    """examples/ds4ci.toml with sm86 turned into a negative control and one [[checks]] switched on."""
    text = (ROOT / "examples" / "ds4ci.toml").read_text()
    for line in ('role = "negative-control"', 'negative_control_for = "gfx1151"'):
        assert f"# {line}" in text, line
        text = text.replace(f"# {line}", line)
    checks = ('# [[checks]]\n# name = "unit tests"\n# command = "ctest --test-dir build --output-junit junit.xml"\n'
              '# parser = "junit"\n# report = "build/junit.xml"\n')
    assert checks in text
    text = text.replace('gpu = "sm_86"\n', "")  # this machine has no GPU; the GPU check is tested on its own
    return text.replace(checks, '[[checks]]\nname = "unit tests"\ncommand = "echo 12 tests passed"\n')


@pytest.fixture
def fake() -> Iterator[FakeGitHub]:
    server = FakeGitHub().start()
    yield server
    server.stop()


def run(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([DS4CI, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=180, check=False)


def test_the_examples_negative_control_passes_verifies_and_is_success(tmp_path: Path, fake: FakeGitHub) -> None:
    engine = tmp_path / "engine"
    head = git_repo(engine, {"ds4ci.toml": example_as_negative_control()})
    env = {k: v for k, v in os.environ.items() if not k.startswith("GITHUB_")}
    env.update(DS4_MODEL_DIR=str(tmp_path / "models"), XDG_CACHE_HOME=str(tmp_path / "cache"))
    bundle = tmp_path / "out" / "bundle.tar.gz"
    gate = run("gate", "--config", "ds4ci.toml", "--runner", "sm86", "--evidence-dir", str(tmp_path / "evidence"),
               "--results-out", str(tmp_path / "out" / "results.json"), "--bundle-out", str(bundle), cwd=engine, env=env)
    assert gate.returncode == 0, gate.stderr
    doc = json.loads((tmp_path / "out" / "results.json").read_text())
    assert doc["runner"]["role"] == "negative-control" and doc["verdict"] == "pass"
    assert run("verify", str(bundle), cwd=engine, env=env).returncode == 0

    fake.add_pull(42, head)
    env.update(DS4CI_GITHUB_THROTTLE="0", GITHUB_TOKEN=APP_TOKEN, GITHUB_ACTIONS="true")  # the publishing job
    proc = run("publish", str(bundle), "--repo", "acme/engine", "--pr", "42", "--api-url", fake.url,
               "--expect-config", str(engine / "ds4ci.toml"), cwd=engine, env=env)
    assert proc.returncode == 0, proc.stderr
    (status,) = fake.statuses(head)
    assert (status["context"], status["state"]) == ("ds4ci/sm86", "success")
    assert status["description"].startswith("negative control: 1 check(s) passed; no parity claim")
    assert status["creator"] == ACTIONS_LOGIN

    # Not required unless listed: with gfx1151 as the only gate runner, the control does not block.
    config = tmp_path / "merge.toml"
    config.write_text('[merge]\nrunners = ["gfx1151"]\napprovals = 0\n')
    fake.add_status(head, "ds4ci/gfx1151", "success", "pass")
    check = run("merge-check", "--pr", "42", "--repo", "acme/engine", "--api-url", fake.url, "--config", str(config),
                cwd=engine, env=env)
    assert check.returncode == 0, check.stdout + check.stderr
