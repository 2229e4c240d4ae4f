"""SIGKILL of ds4ci at random points of a real gate run: nothing it started is left running (sandbox path)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from paths import ROOT, TESTS

from ds4ci.supervisor import sandbox
from ds4ci.supervisor.watchdog import remove_scratch

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(sandbox.refusal() is not None, reason=f"no sandbox here: {sandbox.refusal()}"),
]

# 10 rounds in CI (about a minute); DS4CI_KILL9_ROUNDS=100 for the full count (docs/benchmarks.md).
ROUNDS = int(os.environ.get("DS4CI_KILL9_ROUNDS", "10"))


def test_sigkill_of_ds4ci_at_random_points_leaves_nothing_running() -> None:
    root = Path(tempfile.mkdtemp(prefix="ds4ci-kill9-"))
    try:
        done = subprocess.run(
            [sys.executable, str(TESTS / "kill9_rounds.py"), str(root / "ws"), str(ROUNDS), "26"],
            capture_output=True, text=True, timeout=60 + ROUNDS * 40, check=False,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        assert done.returncode == 0, done.stderr[-3000:]
        seen = json.loads(done.stdout.splitlines()[-1])
        assert seen["full_run_exit"] == 0, seen  # the gate the rounds kill is one that passes when left alone
        assert len(seen["kills"]) == ROUNDS - 1
        assert sum(not k["ended_first"] for k in seen["kills"]) >= (ROUNDS - 1) // 2, seen  # most kills hit a live gate
        assert seen["leftovers"] == [], seen["leftovers"]
        assert seen["scratch_left"] == 0, seen  # the watchdog removed each killed gate's scratch folders
    finally:
        remove_scratch(root)
