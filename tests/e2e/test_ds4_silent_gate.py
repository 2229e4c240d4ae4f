"""A real server process that answers the HTTP API but prints no DS4 line: one error that says so, and no
parity ratio, whatever oracle the config would allow (tests/servers/foreign_server.py, behaviour "silent")."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from gatekit import DS4CI, FOREIGN_SERVER, Workspace

from ds4ci.judging.modeless import SILENT


@pytest.mark.parametrize("text_parity", [False, True], ids=["no-oracle", "text-parity-opted-in"])
def test_a_server_that_prints_no_ds4_line_is_told_so_and_shows_no_parity(tmp_path: Path, text_parity: bool) -> None:
    ws = Workspace.create(tmp_path)
    ws.server = FOREIGN_SERVER
    config = tmp_path / "ds4ci.toml"
    config.write_text(f"[gate]\ntext_parity = {str(text_parity).lower()}\n")
    run = ws.gate(env=ws.env(FOREIGN_BEHAVIOUR="silent"), widths="2,3", config=config)
    assert run.code == 3, run.stdout + run.stderr
    assert run.results is not None and run.results["reasons"] == [SILENT]
    assert run.results["verdict"] == "error" and run.results["target_only"]["oracle"] is None
    for width in run.results["widths"]:  # every request was answered, yet no cell: nothing to show a ratio of
        assert (width["verdict"], width["prompts"]) == ("error", [])
    assert f"error: ds4ci gate (test-runner): {SILENT}" in run.stderr
    rows = [line.split("|") for line in run.stdout.splitlines() if line.startswith("q=")]
    assert [(r[0].strip(), r[1].strip(), r[-1].strip()) for r in rows] == [("q=2", "-", "error"), ("q=3", "-", "error")]
    assert "parity" in run.stdout.splitlines()[1]  # the column is there, and empty
    verified = subprocess.run([DS4CI, "verify", run.results["evidence"]["dir"]], capture_output=True, text=True,
                              timeout=120, check=False)
    assert verified.returncode == 4, verified.stdout + verified.stderr  # intact and consistent: no verdict


def test_the_same_server_printing_the_protocol_passes(tmp_path: Path) -> None:
    """The control: the same program in its "good" behaviour, on the same workspace, is a pass."""
    ws = Workspace.create(tmp_path)
    ws.server = FOREIGN_SERVER
    run = ws.gate(env=ws.env(FOREIGN_BEHAVIOUR="good"), widths="2,3")
    assert run.code == 0, run.stdout + run.stderr
    assert run.results is not None and SILENT not in run.results["reasons"]
