"""The README's test command is the one CI runs: `.ci/run` ends with it, word for word."""

from __future__ import annotations

import re

from paths import ROOT


def test_ci_runs_the_readmes_test_command() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    quick_start = re.search(r"```sh\n(python3 -m venv .*?)\n```", readme, re.DOTALL)
    assert quick_start is not None, "the README's quick start block (install line, then test line) is missing"
    install, test = quick_start.group(1).splitlines()
    assert "ds4ci demo" in install and test.startswith(".venv/bin/python -m pytest "), (install, test)
    ci = [line for line in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines() if line.strip()]
    assert ci[-1] == test, (ci[-1], test)
