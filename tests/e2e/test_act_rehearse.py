"""``ds4ci rehearse`` through the CLI on a fresh adopter repository (``ds4ci init --simulator``, a CMake engine):
the pull request goes green, a head whose server does not compile goes red saying the build failed, and a
rehearsal whose workflows cannot install ds4ci is no verdict, never green. What act replaces: ds4ci/rehearse/."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from actkit import CMAKE, MARKS, adopter, ds4ci_repository, git

pytestmark = [*MARKS, pytest.mark.skipif(not CMAKE, reason="needs cmake and a C compiler (the engine's [build])")]


def rehearse(engine: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "RUNNER_", "ACT", "DS4CI_"))}
    return subprocess.run([sys.executable, "-m", "ds4ci", "rehearse", *args], cwd=engine, env=env,
                          capture_output=True, text=True, timeout=1200, check=False)


def _adopted(tmp_path: Path) -> tuple[Path, str]:
    """A fresh adopter of this checkout (``ds4ci init --simulator``, a CMake engine) on its PR branch ``feature``."""
    _, pin = ds4ci_repository(tmp_path)  # a DS4CI_REF this checkout is served as (any tag or commit would do)
    engine, head = adopter(tmp_path, "--ds4ci-ref", f"acme/ds4ci@{pin}", cmake=True)
    caller = (engine / ".github" / "workflows" / "gate.yml").read_text()  # the "done when": a short caller
    assert f"uses: acme/ds4ci/.github/workflows/gate.yml@{pin}" in caller
    assert len([line for line in caller.splitlines() if not line.startswith("#")]) <= 16
    assert "/build/" in (engine / ".gitignore").read_text().split()  # the build folder is ignored
    git(engine, "checkout", "-q", "feature")
    return engine, head


# The three rehearsals, each its own test on its own copy of the adopter's repository (so xdist can run them on
# different workers); the no-verdict one is given the broken head the red one rehearsed.


def test_rehearse_shows_a_green_pull_request(tmp_path: Path, wheelhouse: Path) -> None:
    engine, head = _adopted(tmp_path)

    green = rehearse(engine, "--event", "pull_request_target", "--wheelhouse", str(wheelhouse))

    assert green.returncode == 0, green.stdout[-6000:] + green.stderr[-3000:]
    assert "status ds4ci/local: success" in green.stdout and "pull request: green" in green.stdout
    assert "comment:" in green.stdout and head[:12] in green.stdout and "Traceback" not in green.stderr
    assert git(engine, "status", "--porcelain") == ""  # the repository was not changed


def test_rehearse_shows_a_head_that_does_not_compile_as_a_red_pull_request(tmp_path: Path, wheelhouse: Path) -> None:
    engine, _ = _adopted(tmp_path)
    git(engine, "checkout", "-q", "-b", "broken")
    (engine / "server.c").write_text("int main(void) { return 0 }\n")  # the head does not compile
    git(engine, "commit", "-q", "-am", "break the build")

    red = rehearse(engine, "--event", "pull_request_target", "--wheelhouse", str(wheelhouse), "--json")

    assert red.returncode == 1, red.stdout[-6000:] + red.stderr[-3000:]
    (event,) = json.loads(red.stdout)["events"]
    (status,) = event["statuses"]
    assert status["context"] == "ds4ci/local" and status["state"] == "failure", status
    assert "the build failed" in status["description"], status
    assert "the build failed" in event["comment"]
    assert git(engine, "status", "--porcelain") == ""  # the repository was not changed


def test_rehearse_whose_workflows_cannot_install_ds4ci_is_no_verdict(tmp_path: Path) -> None:
    engine, _ = _adopted(tmp_path)
    git(engine, "checkout", "-q", "-b", "broken")
    (engine / "server.c").write_text("int main(void) { return 0 }\n")  # the head the no-verdict run was given
    git(engine, "commit", "-q", "-am", "break the build")
    empty = tmp_path / "no-wheels"
    empty.mkdir()  # pip finds nothing: the workflows stop before any status

    none = rehearse(engine, "--event", "workflow_dispatch", "--wheelhouse", str(empty))

    assert none.returncode == 3, none.stdout[-6000:] + none.stderr[-3000:]
    assert "statuses: none" in none.stdout and "failing steps:" in none.stdout and "no verdict" in none.stdout
    assert git(engine, "status", "--porcelain") == ""  # the repository was not changed
