"""The fake GitHub API for the tests: ``ds4ci.rehearse.fakegithub`` (the one ``ds4ci rehearse`` serves), and
two helpers that run ``ds4ci publish`` against it.

PyGithub talks to it over real HTTP on 127.0.0.1; tests assert on the resulting state (``comments()``,
``statuses()``, ``check_runs()``); ``requests`` is the log for counting. What it serves: that module's docstring.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

from ds4ci.rehearse.fakegithub import (
    ACTIONS_LOGIN,
    APP_TOKEN,
    BOT_LOGIN,
    MAIN_TIP,
    READ_TOKEN,
    TRUSTED_RUN,
    WRITE_TOKEN,
    FakeGitHub,
    Fault,
)

__all__ = ["ACTIONS_LOGIN", "APP_TOKEN", "BOT_LOGIN", "MAIN_TIP", "READ_TOKEN", "TRUSTED_RUN", "WRITE_TOKEN",
           "FakeGitHub", "Fault", "as_the_publishing_job", "publish_cli"]


def publish_cli(fake: FakeGitHub, *args: str, pr: str = "42") -> subprocess.CompletedProcess[str]:
    """``python -m ds4ci publish ARGS`` against the fake for acme/engine#PR, with a write token and no Actions env."""
    env = dict(os.environ, GITHUB_TOKEN=WRITE_TOKEN, DS4CI_GITHUB_THROTTLE="0")
    for name in ("GITHUB_STEP_SUMMARY", "GITHUB_ACTIONS"):
        env.pop(name, None)
    return subprocess.run([sys.executable, "-m", "ds4ci", "publish", *args, "--repo", "acme/engine", "--pr", pr,
                           "--api-url", fake.url], capture_output=True, text=True, env=env, check=False, timeout=120)


def as_the_publishing_job(monkeypatch: Any, pr: int, commits: list[str], run: int = 7) -> Iterator[FakeGitHub]:
    """A fixture's body: the fake with pull request ``pr`` at ``commits`` (its head last), and the environment of
    the publishing job (the Actions GITHUB_TOKEN: github-actions[bot], an app installation token) in run ``run``
    of the trusted gate, which records each comment its token creates (gate.yml's step after publish)."""
    for key, value in {"DS4CI_GITHUB_THROTTLE": "0", "GITHUB_TOKEN": APP_TOKEN, "GITHUB_ACTIONS": "true"}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    server = FakeGitHub().start()
    server.add_pull(pr, commits[-1], commits)
    server.add_run(run, title=f"ds4ci gate {commits[-1]}")
    server.publishing_run = run
    yield server
    server.stop()
