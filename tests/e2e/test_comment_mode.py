"""`comment_mode` (issue 41, item 6): `[publish] comment_mode` of the trusted config and `publish --comment-mode`,
always | failures | off, walked with real gate bundles and the fake GitHub API over HTTP."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from fakegithub import WRITE_TOKEN, FakeGitHub
from gatekit import Workspace, git_repo

pytestmark = pytest.mark.e2e


def publish(fake: FakeGitHub, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, GITHUB_TOKEN=WRITE_TOKEN, DS4CI_GITHUB_THROTTLE="0")
    for name in ("GITHUB_STEP_SUMMARY", "GITHUB_ACTIONS"):
        env.pop(name, None)
    return subprocess.run([sys.executable, "-m", "ds4ci", "publish", *args, "--repo", "acme/engine", "--pr", "42",
                           "--api-url", fake.url], capture_output=True, text=True, env=env, check=False, timeout=120)


def test_failures_comments_only_on_a_failure_and_keeps_an_existing_comment_current(tmp_path: Path) -> None:
    repo = tmp_path / "source"
    head = git_repo(repo, {"server.c": "int main(void) { return 0; }\n"})
    ws = Workspace.create(tmp_path)
    trusted = tmp_path / "ds4ci.toml"
    trusted.write_text('[gate]\nwidths = [2]\n[publish]\ncomment_mode = "failures"\n')
    good = ws.gate(widths=None, source_dir=repo, config=trusted)
    bad = ws.gate(widths=None, source_dir=repo, config=trusted, faults="leak-fused-verify")
    assert good.code == 0 and bad.code == 1 and good.results and bad.results, good.stderr + bad.stderr
    passed, failed = good.results["evidence"]["dir"], bad.results["evidence"]["dir"]
    fake = FakeGitHub().start()
    try:
        fake.add_pull(42, head, [head])
        quiet = publish(fake, passed, "--expect-config", str(trusted))
        assert quiet.returncode == 0, quiet.stderr
        assert fake.latest_states(head) == {"ds4ci/test-runner": "success"}
        assert fake.comments(42) == [] and "comment_mode = failures" in quiet.stderr
        loud = publish(fake, failed, "--expect-config", str(trusted))
        assert loud.returncode == 0, loud.stderr
        [comment] = fake.comments(42)
        assert "token IDs differ" in comment["body"] or "fail" in comment["body"]
        again = publish(fake, passed, "--expect-config", str(trusted))  # the fix: the old failure is not left up
        assert again.returncode == 0, again.stderr
        [updated] = fake.comments(42)
        assert updated["id"] == comment["id"] and updated["body"] != comment["body"]
        off = publish(fake, failed, "--comment-mode", "off")
        assert off.returncode == 0 and fake.comments(42)[0]["body"] == updated["body"], off.stderr
        assert fake.latest_states(head) == {"ds4ci/test-runner": "failure"}
        wrong = publish(fake, failed, "--comment-mode", "sometimes")
        assert wrong.returncode == 2 and "expected one of always, failures, off, found 'sometimes'" in wrong.stderr
        both = publish(fake, failed, "--comment-mode", "always", "--no-comment")
        assert both.returncode == 2 and "disagree" in both.stderr and "Traceback" not in both.stderr
    finally:
        fake.stop()
