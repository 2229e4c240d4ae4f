"""A pull request whose build fails reads as a failed build everywhere: in results.json, in the gate's own
lines and in the status `ds4ci publish --expect-config` sets (issue 41, item 1).

The trusted config pins the model files and prompts, which a run that stopped at its build never hashed:
settings that were never reached are not a mismatch with the trusted config.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from fakegithub import WRITE_TOKEN, FakeGitHub
from gatekit import Workspace, sha256
from test_build import build_config

pytestmark = pytest.mark.e2e


def trusted_config(ws: Workspace, steps: int, fail_at: int | None) -> Path:
    config = build_config(ws, steps=steps, fail_at=fail_at)
    config.write_text(config.read_text() + "\n[gate]\nwidths = [2]\n" + "\n".join([
        f'target = "{ws.target}"', f'target_sha256 = "{sha256(ws.target)}"',
        f'draft = "{ws.draft}"', f'draft_sha256 = "{sha256(ws.draft)}"',
        f'prompts = [{{file = "{ws.prompts[0]}", sha256 = "{sha256(ws.prompts[0])}"}}]',
    ]) + "\n")
    return config


def publish(fake: FakeGitHub, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, GITHUB_TOKEN=WRITE_TOKEN, DS4CI_GITHUB_THROTTLE="0")
    for name in ("GITHUB_STEP_SUMMARY", "GITHUB_ACTIONS"):
        env.pop(name, None)
    return subprocess.run([sys.executable, "-m", "ds4ci", "publish", *args, "--repo", "acme/engine", "--pr", "42",
                           "--api-url", fake.url], capture_output=True, text=True, env=env, check=False, timeout=120)


def test_a_failed_build_is_published_as_a_failed_build_with_the_trusted_config(tmp_path: Path) -> None:
    ws = Workspace.create(tmp_path)
    config = trusted_config(ws, steps=3, fail_at=3)
    run = ws.gate(server_bin=None, config=config, target=None, target_sha256=None,
                  draft=None, draft_sha256=None, prompt_file=None, widths=None)
    assert run.code == 1, run.stdout + run.stderr
    assert run.results is not None
    reason = run.reasons()
    assert reason.startswith("the build failed: exit 1 (2/3 targets built); last lines: "), reason
    assert "FAILED: step 3" in reason
    assert "fail: build: fail" not in run.stdout + run.stderr and "build: fail:" not in reason
    head = run.results["revisions"]["head"]["sha"]
    fake = FakeGitHub().start()
    try:
        fake.add_pull(42, head, [head])
        proc = publish(fake, run.results["evidence"]["dir"], "--expect-config", str(config))
        assert proc.returncode == 0, proc.stdout + proc.stderr
        [status] = fake.statuses(head)
        assert status["state"] == "failure", status
        assert status["description"].startswith("fail: the build failed: exit 1 (2/3 targets built)"), status
        assert "trusted config" not in status["description"]
        [comment] = fake.comments(42)
        assert "the build failed: exit 1" in comment["body"] and "does not allow" not in comment["body"]
    finally:
        fake.stop()
