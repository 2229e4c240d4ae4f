"""The runner key's folder (and HOME) inside a folder shown to PR code: bwrap starts, or the gate says what to move.

A runner whose HOME holds the models and the server: HOME is hidden from PR code, so the server
could not see its own files; before, every server died in bwrap ("Can't mkdir parents for
.../.config/ds4ci: Read-only file system") and the gate said only "exited with code -9 before it
was ready". Now the gate refuses before any server starts and names what to move (a bind never shows
HOME whole).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from gatekit import Workspace, processes_mentioning

from ds4ci import supervisor
from ds4ci.supervisor import sandbox

pytestmark = [pytest.mark.e2e,
              pytest.mark.skipif(sandbox.refusal() is not None, reason=f"no sandbox here: {sandbox.refusal()}")]


def test_a_hidden_folder_inside_another_hidden_folder_starts(tmp_path: Path) -> None:
    """HOME and HOME/.config/ds4ci both under a shown folder: one empty tmpfs covers both, and bwrap starts."""
    home = tmp_path / "home"
    keys = home / ".config" / "ds4ci"
    keys.mkdir(parents=True)
    (keys / "runner-key.pem").write_text("PRIVATE\n")
    out = tmp_path / "out.txt"
    policy = sandbox.Policy(hidden=(home, keys))
    result = supervisor.Supervisor(sweep_stale=False, policy=policy).run(
        ["sh", "-c", f"ls -A {home}; echo done"], 30, stdout=out, stderr=supervisor.STDOUT,
        view=supervisor.View(ro=(tmp_path,)),
    )
    assert result.containment == "sandbox"
    assert out.read_text() == "done\n", out.read_text()  # started, and HOME looked empty


def test_models_and_server_inside_home_are_refused_before_any_server_starts(tmp_path: Path) -> None:
    home = tmp_path / "home"
    ws = Workspace.create(home)  # the models and the server binary in HOME
    (home / ".config" / "ds4ci").mkdir(parents=True)  # the runner key's folder
    env = ws.env(HOME=str(home))
    env.pop("XDG_CONFIG_HOME", None)
    run = ws.gate(widths="2", env=env, evidence_dir=tmp_path / "evidence", results_out=tmp_path / "results.json")
    assert run.code == 3, run.stdout + run.stderr
    doc = run.results
    assert doc is not None, run.stderr
    reasons = "\n".join(doc["reasons"])
    # HOME is never shown whole: the server's folder (HOME itself here) is refused as a bind, with what to do
    assert f"refused to bind {home} would show {home} whole" in reasons, reasons
    assert "name the folder inside it that the process needs" in reasons
    assert "exited with code" not in reasons and "before it was ready" not in reasons
    assert all(s.get("ready_s") is None for s in doc["timings"]["servers"])  # no server started
    assert processes_mentioning(str(home)) == []
