"""The gate's fingerprint is taken while the target-only server loads, and recorded as before."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from gatekit import Workspace, sha256

from ds4ci.judging import judge
from ds4ci.runner import fingerprint

# A stand-in nvidia-smi that names its GPU after what it saw: the target-only server's command.json
# appears in the attempt just before that server is spawned, so it is only seen by a probe that
# runs while the first server starts, never by one that runs before the servers.
FAKE_NVIDIA_SMI = """#!/bin/sh
for _ in $(seq 1 300); do
    for f in "{evidence}"/attempts/*/{servers}/{target}/command.json; do
        if [ -f "$f" ]; then echo "Seen During Load, 580.1, 1000, 9.0"; exit 0; fi
    done
    sleep 0.05
done
echo "Before Any Server, 580.1, 1000, 9.0"
"""


def test_probes_run_during_the_first_servers_load_and_are_sealed(tmp_path: Path) -> None:
    ws = Workspace.create(tmp_path)
    tools = tmp_path / "tools"
    tools.mkdir()
    smi = tools / "nvidia-smi"
    smi.write_text(FAKE_NVIDIA_SMI.format(
        evidence=tmp_path / "evidence", servers=judge.SERVERS, target=judge.server_key(None),
    ))
    smi.chmod(0o755)
    env = ws.env()
    env["PATH"] = f"{tools}{os.pathsep}{env['PATH']}"
    run = ws.gate(widths="2", env=env)
    assert run.code == 0, run.stdout + run.stderr
    doc = run.results
    assert doc is not None
    assert [gpu["name"] for gpu in doc["fingerprint"]["gpus"]] == ["Seen During Load"]
    assert doc["fingerprint"]["health"]["status"] == "ok"
    final = Path(doc["evidence"]["dir"])
    assert json.loads((final / "preflight.json").read_text()) == doc["fingerprint"]
    sealed = {e["path"] for e in json.loads((final / "manifest.json").read_text())["evidence"]}
    assert "preflight.json" in sealed


@pytest.mark.parametrize(("error", "reason"), [
    (KeyError("probe"), "internal error (a bug in ds4ci, please report it): KeyError: 'probe'"),
    (OSError(28, "No space left on device", "preflight.json"),
     "I/O error during the run: No space left on device (preflight.json)"),
])
def test_a_fingerprint_error_is_the_runs_reason_and_no_width_is_judged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, error: BaseException, reason: str
) -> None:
    from ds4ci.gate.run import run_gate
    from ds4ci.options import config

    def broken(*_args: object, **_kwargs: object) -> None:
        raise error

    monkeypatch.setattr(fingerprint, "fingerprint", broken)
    ws = Workspace.create(tmp_path)
    for key, value in ws.env().items():
        monkeypatch.setenv(key, value)
    cfg = config.load(None, {
        "server_bin": ws.server, "target": ws.target, "target_sha256": sha256(ws.target), "draft": ws.draft,
        "draft_sha256": sha256(ws.draft), "prompt_files": ws.prompts, "prompt_sha256s": [sha256(p) for p in ws.prompts],
        "evidence_dir": tmp_path / "evidence", "widths": "2", "runner": "t", "stop_timeout": 3,
    })
    outcome = run_gate(cfg, progress=lambda _m: None)
    doc = outcome.results
    assert outcome.exit_code == 3
    assert doc["verdict"] == "error"
    assert doc["reasons"] == [reason]
    assert doc["fingerprint"] is None
    # The target-only server had answered before the probes failed: results.json is derived from the
    # sealed evidence, so its result is shown; no width ran.
    assert doc["target_only"]["verdict"] == "pass" and doc["widths"] == []
    assert Path(doc["evidence"]["dir"]).parent.name == "failed"
    assert not (Path(doc["evidence"]["dir"]) / "preflight.json").exists()
