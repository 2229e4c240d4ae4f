"""What the user reads when a server dies or refuses: the cause first, within the schema, evidence kept.

Real processes: the real ``ds4ci gate`` CLI against the simulator, and against a server that replays
the real dflash_server's crash on an H200 (our own capture) and aborts mid-request.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from gatekit import DS4CI, Workspace

from ds4ci.evidence import results

pytestmark = pytest.mark.e2e

DATA = Path(__file__).resolve().parents[1] / "data" / "real-server"
CRASH_LOG = DATA / "h200-q2-crash.stderr.log"
CRASH_SERVER = Path(__file__).resolve().parents[1] / "servers" / "crash_server.py"
ASSERT_LINE = "GGML_ASSERT(offset + size <= ggml_nbytes(tensor)"


def crash_workspace(root: Path) -> Workspace:
    wrapper = root / "crash-server"
    root.mkdir(parents=True, exist_ok=True)
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{CRASH_SERVER}" "$@"\n')
    wrapper.chmod(0o755)
    return Workspace.create(root, server=wrapper)


@pytest.mark.parametrize("pad", [0, 80])
def test_a_crash_mid_request_quotes_the_abort_line_first_and_keeps_the_verdict(tmp_path: Path, pad: int) -> None:
    ws = crash_workspace(tmp_path)
    env = ws.env(CRASH_LOG=str(CRASH_LOG), CRASH_PAD=str(pad))
    run = ws.gate(env=env, widths="2")
    # No verdict (exit 3), never "usage" (2): a long log must not cost the run its results.json.
    assert run.code == 3, run.stderr
    assert run.results is not None
    results.validate(run.results)
    assert run.results["verdict"] == "error"
    final = Path(run.results["evidence"]["dir"])
    assert final.parent.name == "failed" and (final / "results.json").is_file()
    reason = next(r for r in run.results["reasons"] if "request failed" in r)
    assert len(reason) <= 4096
    assert "server exited with code -6 (SIGABRT)" in reason
    lines = reason.splitlines()
    assert ASSERT_LINE in lines[0]  # the cause is on the first line too (annotations, one-line summaries)
    assert lines[1] == "abort lines:" and ASSERT_LINE in lines[2], reason
    # Then the LAST lines of the log (the backtrace's end), never the configuration box.
    assert "libc.so.6(+0x129ecc)" in lines[-1]
    assert "Configuration" not in reason
    # The log says what it is doing while the server stops, and that it has stopped.
    assert "target-only: had already exited, exit code -6 (SIGABRT)" in run.stderr


def test_an_http_error_body_is_kept_and_quoted(tmp_path: Path) -> None:
    ws = Workspace.create(tmp_path)
    run = ws.gate(faults="http-400", widths="2")
    assert run.code == 3, run.stderr
    assert run.results is not None
    reason = next(r for r in run.results["reasons"] if "HTTP 400" in r)
    assert "prompt is too long for max_ctx" in reason.splitlines()[0], reason
    final = Path(run.results["evidence"]["dir"])
    life = json.loads((final / "servers" / "target-only" / "lifecycle.json").read_text())
    entry = life["requests"][0]
    assert entry["http_status"] == 400 and entry["answered"] is False
    body = json.loads((final / entry["response"]).read_bytes())
    assert "prompt is too long" in body["error"]["message"]
    manifest = json.loads((final / "manifest.json").read_text())
    assert entry["response"] in {e["path"] for e in manifest["evidence"]}
    # Every file a lifecycle names is in the bundle.
    for request in life["requests"]:
        for key in ("request", "response"):
            assert request[key] is None or (final / request[key]).is_file()
    # The bundle with the kept body still verifies as intact.
    verify = subprocess.run([DS4CI, "verify", str(final)], capture_output=True, text=True, timeout=120, check=False)
    assert "intact and consistent" in verify.stdout, verify.stdout + verify.stderr


def test_a_server_that_stops_says_it_stopped(tmp_path: Path) -> None:
    ws = Workspace.create(tmp_path)
    env = ws.env(DS4CI_HEARTBEAT_S="0.3", DS4SIM_TEARDOWN_DELAY="1.5")
    run = ws.gate(env=env, widths="2", stop_timeout=30)
    assert run.code == 0, run.stderr
    assert "target-only: still stopping:" in run.stderr
    assert "target-only: stopped in " in run.stderr
