"""A run on a modified working tree is never green unless the trusted config allows it, and always says so.

The real gate (CLI subprocess, the simulator) in a real git checkout whose tracked file was edited
after the commit: ``revisions.dirty`` is true, so the binary is not the commit's. The verdict is
derived from the sealed files (``verify`` re-derives it); ``publish --dry-run`` shows the status.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from gatekit import DS4CI, Workspace, git_repo

pytestmark = pytest.mark.e2e


def _gate(ws: Workspace, repo: Path, *extra: str) -> tuple[subprocess.CompletedProcess[str], dict[str, object]]:
    config = ws.root / "widths.toml"  # one configured width: each run is a full one
    config.write_text("[gate]\nwidths = [2]\n")
    proc = subprocess.run([DS4CI, "gate", *ws.args(widths="2", config=config), *extra], cwd=repo, env=ws.env(),
                          capture_output=True, text=True, timeout=180, check=False)
    doc = json.loads((ws.root / "results.json").read_text())
    (ws.root / "results.json").unlink()
    return proc, doc


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([DS4CI, *args], cwd=cwd, capture_output=True, text=True, timeout=180, check=False)


def _dry_run(bundle: Path, head: str, *extra: str) -> tuple[str, str]:
    """``publish --dry-run``'s planned status line for the runner, and the whole output (the comment in it)."""
    proc = _cli("publish", "--dry-run", "--pr", "1", "--sha", head, *extra, str(bundle), cwd=bundle.parent)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    status = next(line for line in proc.stdout.splitlines() if line.startswith("--- would set status ds4ci/"))
    return status, proc.stdout


def test_a_modified_tree_is_an_error_and_allowed_only_by_the_trusted_config(tmp_path: Path) -> None:
    ws = Workspace.create(tmp_path)
    repo = tmp_path / "checkout"
    head = git_repo(repo, {"f.txt": "one\n"})
    clean, doc = _gate(ws, repo)
    assert clean.returncode == 0 and doc["revisions"]["dirty"] is False, clean.stderr  # type: ignore[index]
    assert "modified tree" not in clean.stdout

    (repo / "f.txt").write_text("two\n")
    dirty, doc = _gate(ws, repo)
    assert dirty.returncode == 3, dirty.stdout + dirty.stderr
    assert doc["verdict"] == "error" and doc["revisions"]["head"]["sha"] == head  # type: ignore[index]
    (reason,) = doc["reasons"]  # type: ignore[misc]
    assert reason.startswith("built from a modified tree") and "allow_dirty_tree" in reason
    # Found before the build and any server (cheap), said once; without [build] the words say the commit is untested.
    assert "nothing was built or started" in reason and "does not test the commit" in reason, reason
    assert doc["widths"] == [] and "server pid" not in dirty.stderr  # type: ignore[index]
    assert "built from a modified tree" in dirty.stdout
    bundle = Path(doc["evidence"]["dir"])  # type: ignore[index]
    assert bundle.parent.name == "failed"
    verify = _cli("verify", str(bundle), cwd=tmp_path)
    assert verify.returncode == 4, verify.stdout + verify.stderr  # re-derived: intact, no verdict
    status, _ = _dry_run(bundle, head)
    assert "=error" in status and "built from a modified tree" in status, status

    # Allowed: a pass, green, and both the comment and the status say what it was built from.
    allowed, doc = _gate(ws, repo, "--allow-dirty-tree")
    assert allowed.returncode == 0, allowed.stdout + allowed.stderr
    assert doc["settings"]["allow_dirty_tree"] is True and doc["verdict"] == "pass"  # type: ignore[index]
    assert " --allow-dirty-tree" in str(doc["reproduce"])  # the reproduce command runs it the same way
    assert "built from a modified tree" in allowed.stdout
    bundle = Path(doc["evidence"]["dir"])  # type: ignore[index]
    assert _cli("verify", str(bundle), cwd=tmp_path).returncode == 0
    status, out = _dry_run(bundle, head)
    assert "=success" in status and "built from a modified tree" in status, status
    assert "⚠️ built from a modified tree" in out  # the comment's line
    # The trusted config decides: one that does not allow it refuses the bundle (error, never success).
    trusted = tmp_path / "trusted.toml"
    trusted.write_text("[gate]\nwidths = [2]\n")
    status, out = _dry_run(bundle, head, "--expect-config", str(trusted))
    assert "=error" in status and "allow_dirty_tree" in out, out
    trusted.write_text("[gate]\nwidths = [2]\nallow_dirty_tree = true\n")
    status, _ = _dry_run(bundle, head, "--expect-config", str(trusted))
    assert "=success" in status, status
