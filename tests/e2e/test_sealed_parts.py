"""What a pull-request process does after the gate hashed or judged something cannot change it.

Real gates with real server processes, at the pid-namespace level, where PR code can write whatever
the runner's user can (the sandbox would hide most of this; these tests hold the defences behind it):
- a server that rewrites the server binary after it was hashed: the next server starts the private
  copy of the hashed bytes, and one that rewrites that copy is refused before it starts;
- a server that rewrites a finished server's log: the evidence was sealed when that server stopped,
  so the attempt cannot be sealed and no verdict stands (the attempt is kept as it is);
- a check that rewrites the servers' logs: checks run before the first server starts, so there is
  nothing of theirs to touch.
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest
from gatekit import GateRun, Workspace, evidence_listing, sha256
from procscan import namespace_refusal

pytestmark = pytest.mark.skipif(namespace_refusal() is not None, reason=f"no PID namespace here: {namespace_refusal()}")
FALLBACK = {"DS4CI_CONTAINMENT": "pid-namespace"}
SIMULATOR = f'exec {shlex.quote(sys.executable)} -m ds4ci.simulator "$@"'


def server(path: Path, body: str) -> Path:
    """A server script: says which bytes started (``STARTED sha256=``), runs ``body``, then execs the simulator."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f'#!/bin/sh\necho "STARTED sha256=$(sha256sum "$0" | cut -d" " -f1)" >&2\n{body}\n{SIMULATOR}\n')
    path.chmod(0o755)
    return path


def second_start(count: Path, body: str) -> str:
    """Shell that runs ``body`` from the second server start on (a counter file outside the evidence)."""
    return f'n=$(cat {count} 2>/dev/null || echo 0); echo $((n + 1)) > {count}\nif [ "$n" -ge 1 ]; then\n{body}\nfi'


def swapped(marker: Path) -> str:
    """printf arguments that write a server which leaves ``marker`` behind when it runs."""
    return f"'#!/bin/sh\\necho swapped >> {marker}\\n{SIMULATOR}\\n'"


def sealed(run: GateRun, rel: str) -> str:
    assert run.results is not None
    return (Path(run.results["evidence"]["dir"]) / rel).read_text()


def test_a_server_that_swaps_the_binary_after_hashing_never_gets_the_swapped_bytes_started(tmp_path: Path) -> None:
    marker = tmp_path / "swapped-binary-ran"
    original = tmp_path / "bin" / "sim-server"
    server(original, f"printf {swapped(marker)} > {original}")
    hashed = sha256(original)
    ws = Workspace.create(tmp_path, server=original)
    run = ws.gate(widths="2", env=ws.env(**FALLBACK))
    assert run.code == 0, run.stdout + run.stderr
    assert run.results is not None and run.results["containment"] == "pid-namespace"
    assert sha256(original) != hashed  # the attack happened: the configured file was rewritten
    assert not marker.exists()  # yet no server ran the rewritten bytes
    assert run.results["identities"]["server_bin"]["sha256"] == hashed
    for key in ("target-only", "q2"):
        assert f"STARTED sha256={hashed}\n" in sealed(run, f"servers/{key}/stderr.log")  # the bytes that ran
        assert json.loads(sealed(run, f"servers/{key}/lifecycle.json"))["binary"]["sha256"] == hashed


def test_a_server_that_rewrites_the_private_copy_is_refused_before_the_next_start(tmp_path: Path) -> None:
    marker = tmp_path / "swapped-binary-ran"
    original = server(tmp_path / "bin" / "sim-server", f'chmod u+w "$0"; printf {swapped(marker)} > "$0"')
    ws = Workspace.create(tmp_path, server=original)
    run = ws.gate(widths="2", env=ws.env(**FALLBACK))
    assert run.code == 3, run.stdout + run.stderr
    assert "of server_bin changed after it was hashed" in run.reasons()
    assert not marker.exists()
    assert run.results is not None and run.results["widths"] == []  # the q=2 server never started
    assert not (Path(run.results["evidence"]["dir"]) / "servers" / "q2").exists()


def test_a_server_that_rewrites_a_finished_servers_log_leaves_no_verdict_and_the_evidence_kept(tmp_path: Path) -> None:
    evidence = tmp_path / "evidence"
    forge = f'for f in {evidence}/attempts/*/servers/target-only/stderr.log; do echo "forged by a later server" >> "$f"; done'
    original = server(tmp_path / "bin" / "sim-server", second_start(tmp_path / "starts", forge))
    ws = Workspace.create(tmp_path, server=original)
    run = ws.gate(widths="2", env=ws.env(**FALLBACK))
    assert run.code == 3, run.stdout + run.stderr
    reasons = run.reasons()
    assert "the evidence changed after it was sealed" in reasons
    assert "servers/target-only/stderr.log (sealed when the target-only server stopped" in reasons
    listing = evidence_listing(evidence)
    assert listing["runs"] == [] and listing["failed"] == [] and len(listing["attempts"]) == 1  # kept, not promoted
    attempt = evidence / "attempts" / listing["attempts"][0]
    assert "forged by a later server" in (attempt / "servers" / "target-only" / "stderr.log").read_text()
    assert not (attempt / "manifest.json").exists()  # nothing sealed, so nothing can be signed


@pytest.mark.parametrize("target", ["stderr.log", "lifecycle.json"])
def test_a_check_finds_no_server_evidence_to_rewrite(tmp_path: Path, target: str) -> None:
    evidence = tmp_path / "evidence"
    config = tmp_path / "ds4ci.toml"
    forge = (f"ls -d {evidence}/attempts/*/servers 2>/dev/null || echo no server evidence yet; "
             f'for f in {evidence}/attempts/*/servers/*/{target}; do [ -f \\"$f\\" ] && echo forged >> \\"$f\\"; done; true')
    config.write_text(f'[[checks]]\nname = "forge"\ncommand = "{forge}"\n')
    ws = Workspace.create(tmp_path)
    run = ws.gate(widths="2", config=config, env=ws.env(**FALLBACK))
    assert run.code == 0, run.stdout + run.stderr
    assert "no server evidence yet" in sealed(run, "checks/check-forge.log")  # it ran before the first server
    for key in ("target-only", "q2"):
        assert "forged" not in sealed(run, f"servers/{key}/{target}")
