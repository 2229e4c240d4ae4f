"""`ds4ci gate` with the arms side by side ([gate] devices / parallel): real CLI, real simulator servers.

The simulator ignores the device it is given, so four "devices" are four servers at once on this machine.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from gatekit import DS4CI, GateRun, Workspace, processes_mentioning

from ds4ci.evidence import results

FOUR = "cuda:0,cuda:1,cuda:2,cuda:3"


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    return Workspace.create(tmp_path)


def _gate(ws: Workspace, devices: str, widths: str = "2,3,4", faults: str | None = None, **kw: Any) -> GateRun:
    return ws.gate(devices=devices, target_device="cuda:0", widths=widths, faults=faults, **kw)


def _verify(doc: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([DS4CI, "verify", doc["evidence"]["dir"]], capture_output=True, text=True, check=False)


def _overlap(arms: list[dict[str, Any]]) -> bool:
    """Did every arm start before any arm ended (all side by side)?"""
    return max(a["started_at"] for a in arms) < min(a["finished_at"] for a in arms)


@pytest.mark.parametrize(("devices", "widths"), [("cuda:0,cuda:1", "2"), (FOUR, "2,3,4")])
def test_arms_side_by_side_pass_with_the_evidence_of_a_sequential_run(ws: Workspace, devices: str, widths: str) -> None:
    run = _gate(ws, devices, widths)
    assert run.code == 0, run.stderr
    doc = run.results
    assert doc is not None
    results.validate(doc)
    listed = devices.split(",")
    assert doc["settings"]["devices"] == listed and doc["settings"]["parallel"] == 1
    keys = ["target-only", *(f"q{q}" for q in widths.split(","))]
    assert [a["key"] for a in doc["arms"]] == keys
    assert [a["device"] for a in doc["arms"]] == listed  # one arm per device
    assert _overlap(doc["arms"])
    final = Path(doc["evidence"]["dir"])
    for key, device in zip(keys, listed, strict=True):  # each server: its own lifecycle, logs, port and --target-device
        life = json.loads((final / "servers" / key / "lifecycle.json").read_text())
        command = json.loads((final / "servers" / key / "command.json").read_text())
        assert life["device"] == device and command["argv"][command["argv"].index("--target-device") + 1] == device
        assert (final / "servers" / key / "stderr.log").stat().st_size > 0
    ports = {json.loads((final / "servers" / k / "command.json").read_text())["port"] for k in keys}
    assert len(ports) == len(keys)
    assert [s["q"] for s in doc["timings"]["servers"]] == [None, *(int(q) for q in widths.split(","))]
    verified = _verify(doc)
    assert verified.returncode == 0, verified.stdout + verified.stderr


def test_a_sequential_run_records_its_one_device_too(ws: Workspace) -> None:
    run = ws.gate(widths="2", target_device="cuda:1")
    assert run.code == 0, run.stderr
    assert run.results is not None
    arms = run.results["arms"]
    assert [(a["key"], a["device"]) for a in arms] == [("target-only", "cuda:1"), ("q2", "cuda:1")]
    assert arms[0]["finished_at"] <= arms[1]["started_at"]  # one after the other
    assert run.results["settings"]["devices"] == ["cuda:1"]


@pytest.mark.parametrize(("fault", "failing", "verdict", "kw"), [
    ("exit-mid-request@q3", 3, "error", {}),
    ("hang-request@q2", 2, "error", {"request_timeout": 3}),
    ("mismatch-last@q4", 4, "fail", {}),
])
def test_a_fault_in_one_arm_is_reported_for_that_arm_alone(
    ws: Workspace, fault: str, failing: int, verdict: str, kw: dict[str, Any],
) -> None:
    run = _gate(ws, FOUR, faults=fault, **kw)
    doc = run.results
    assert doc is not None, run.stderr
    assert doc["verdict"] == verdict, run.reasons()
    widths = {w["q"]: w for w in doc["widths"]}
    assert set(widths) == {2, 3, 4}  # every arm ran to its end and was judged
    assert widths[failing]["verdict"] == verdict
    assert all(w["verdict"] == "pass" for q, w in widths.items() if q != failing), run.reasons()
    assert doc["target_only"]["verdict"] == "pass"
    assert all(f"q={failing}" in reason for reason in doc["reasons"]), doc["reasons"]
    assert len(doc["arms"]) == 4 and _overlap(doc["arms"])
    verified = _verify(doc)
    assert verified.returncode == (1 if verdict == "fail" else 4), verified.stdout + verified.stderr


def test_a_failing_target_only_arm_hides_no_other_arms_failure(ws: Workspace) -> None:
    run = _gate(ws, FOUR, faults="exit-before-ready@target,exit-mid-request@q3")
    doc = run.results
    assert doc is not None, run.stderr
    assert doc["verdict"] == "error"
    text = run.reasons()
    assert "target-only: server exited" in text and "reference-exact q=3: request failed" in text
    assert "q=2" not in text and "q=4" not in text  # the arms that were fine are not blamed
    final = Path(doc["evidence"]["dir"])
    assert all((final / "servers" / k / "lifecycle.json").is_file() for k in ("target-only", "q2", "q3", "q4"))
    verified = _verify(doc)
    assert verified.returncode == 4, verified.stdout + verified.stderr


def test_several_arms_on_one_device_are_refused_for_a_real_model(ws: Workspace) -> None:
    run = ws.gate(widths="2,3,4", parallel=2, target_device="cuda:0")
    assert run.code == 3 and run.results is not None
    assert "not one of ds4ci's tiny models" in run.reasons()
    assert not (Path(run.results["evidence"]["dir"]) / "servers").exists()  # before any server started


@pytest.mark.parametrize(("overrides", "message"), [
    ({"devices": "cuda:0,cuda:0"}, "cuda:0 listed twice"),
    ({"devices": "cuda0"}, "expected a device like"),
    ({"devices": "cuda:0,hip:1"}, "devices of one kind"),
    ({"devices": "hip:0,hip:1", "target_device": "cuda:0"}, "not of target_device's kind"),
    ({"devices": "cuda:0,cuda:1,cuda:2,cuda:3,cuda:4"}, "5 listed, but the gate has only 4 arms"),
    ({"parallel": 0}, "parallel"),
    ({"parallel": 5}, "parallel = 5, but the gate has only 4 arms"),
])
def test_placement_settings_are_checked_before_anything_runs(
    ws: Workspace, overrides: dict[str, Any], message: str,
) -> None:
    run = ws.gate(**{"target_device": "cuda:0", **overrides})
    assert run.code == 2, run.stderr
    assert message in run.stderr
    assert not (ws.root / "evidence").exists()


def _wait_for_servers(root: Path, count: int, proc: subprocess.Popen[str], timeout: float = 60) -> Path:
    """The attempt directory, once ``count`` servers answered /props (are ready)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        ready = list((root / "evidence").glob("attempts/*/servers/*/props.json"))
        if len(ready) >= count:
            return ready[0].parents[2]
        time.sleep(0.1)
    raise AssertionError(f"{count} servers were not ready within {timeout} s")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_nothing_outlives_the_gate_with_four_servers_running(ws: Workspace, sig: signal.Signals) -> None:
    argv = [DS4CI, "gate", *ws.args(devices=FOUR, target_device="cuda:0", request_timeout=120)]
    proc = subprocess.Popen(argv, env=ws.env("hang-request,setsid-helper"), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        attempt = _wait_for_servers(ws.root, 4, proc)
        time.sleep(0.5)  # every arm's first request is in flight (the servers never answer it)
        assert len(processes_mentioning(str(ws.root))) >= 4
        proc.send_signal(sig)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    deadline = time.monotonic() + 15
    while (left := processes_mentioning(str(ws.root))) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert left == []
    if sig == signal.SIGKILL:
        assert proc.returncode == -signal.SIGKILL
        return
    assert proc.returncode == 3, stderr
    doc = json.loads((ws.root / "results.json").read_text())
    assert doc["verdict"] == "error" and "interrupted by SIGTERM" in doc["reasons"][0]
    final = Path(doc["evidence"]["dir"])
    assert final.name == attempt.name
    for key in ("target-only", "q2", "q3", "q4"):  # every arm's evidence kept, each stopped by the interrupt
        life = json.loads((final / "servers" / key / "lifecycle.json").read_text())
        assert "interrupted by SIGTERM" in life["error"], life["error"]
        assert life["stop"]["exit_code"] is not None


def _most_at_once(arms: list[dict[str, Any]]) -> int:
    """The most arms whose [started_at, finished_at] spans overlap at one instant."""
    edges = sorted([(a["started_at"], 1) for a in arms] + [(a["finished_at"], -1) for a in arms], key=lambda e: (e[0], e[1]))
    most = now = 0
    for _, step in edges:
        now += step
        most = max(most, now)
    return most


@pytest.mark.parametrize("arms_per_device", [2, 4])
def test_tiny_model_arms_side_by_side_on_one_device(tmp_path: Path, arms_per_device: int) -> None:
    pytest.importorskip("gguf")
    models = tmp_path / "models"
    written = subprocess.run([DS4CI, "tiny-models", str(models), "--kind", "random"], capture_output=True, text=True,
                             check=False, timeout=300)
    assert written.returncode == 0, written.stderr
    ws = Workspace.create(tmp_path)
    argv = [DS4CI, "gate", "--config", str(models / "ds4ci.toml"), "--server-bin", str(ws.server),
            "--parallel", str(arms_per_device), "--runner", "tiny", "--evidence-dir", str(tmp_path / "evidence"),
            "--results-out", str(tmp_path / "results.json")]
    proc = subprocess.run(argv, env=ws.env(), cwd=tmp_path, capture_output=True, text=True, check=False, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads((tmp_path / "results.json").read_text())
    assert doc["settings"]["parallel"] == arms_per_device and doc["settings"]["devices"] == ["cuda:0"]
    assert [a["device"] for a in doc["arms"]] == ["cuda:0"] * 4
    assert 1 < _most_at_once(doc["arms"]) <= arms_per_device
    verified = _verify(doc)
    assert verified.returncode == 0, verified.stdout + verified.stderr
