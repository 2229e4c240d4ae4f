"""The [build] step: a real shell build that prints [N/M] lines, passing, failing and hanging."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from gatekit import DS4CI, GateRun, Workspace, sha256


def build_config(ws: Workspace, steps: int, fail_at: int | None = None, sleep: float = 0, timeout: float = 600) -> Path:
    """A build that 'compiles' the simulator wrapper into out/dflash_server in ``steps`` steps."""
    script = ws.root / "build.sh"
    lines = ["#!/bin/sh", "set -e", "mkdir -p out"]
    for n in range(1, steps + 1):
        if fail_at == n:
            lines += [f'echo "FAILED: step {n}" >&2', "exit 1"]
        lines.append(f'echo "[{n}/{steps}] Building CXX object step{n}.o"')
    if sleep:
        lines.append(f"sleep {sleep}")
    lines += [f"printf '#!/bin/sh\\nexec \"%s\" -m ds4ci.simulator \"$@\"\\n' '{sys.executable}' > out/dflash_server",
              "chmod +x out/dflash_server"]
    script.write_text("\n".join(lines) + "\n")
    script.chmod(0o755)
    config = ws.root / "ds4ci.toml"
    config.write_text(
        f'[build]\ncommand = "./build.sh"\ncwd = "."\ntimeout = {timeout}\nserver_bin = "out/dflash_server"\n'
    )
    return config


def gate(ws: Workspace, config: Path, *extra: str) -> GateRun:
    return ws.gate(*extra, widths="2", server_bin=None, config=config)


def test_the_built_binary_is_the_one_hashed_recorded_and_started(tmp_path: Path) -> None:
    ws = Workspace.create(tmp_path)
    run = gate(ws, build_config(ws, steps=3))
    assert run.code == 0, run.stdout + run.stderr
    assert run.results is not None
    build = run.results["build"]
    assert (build["status"], build["exit_code"], build["targets_built"], build["targets_total"]) == ("pass", 0, 3, 3)
    built = tmp_path / "out" / "dflash_server"
    assert run.results["identities"]["server_bin"] == {**run.results["identities"]["server_bin"],
                                                       "path": str(built), "sha256": sha256(built)}
    final = Path(run.results["evidence"]["dir"])
    started = Path(json.loads((final / "servers" / "q2" / "command.json").read_text())["argv"][0])
    assert started.name == built.name and started.parent.name.startswith("ds4ci-server-bin-")  # its private copy
    life = json.loads((final / "servers" / "q2" / "lifecycle.json").read_text())
    assert life["binary"] == {"path": str(started), "sha256": sha256(built)}  # hashed again right before the start
    assert not started.parent.exists()  # removed with the run
    assert "[3/3] Building CXX object step3.o" in (final / "build" / "build.log").read_text()
    assert "--server-bin" not in run.results["reproduce"]  # the config's build makes it when pasted
    comment = subprocess.run([DS4CI, "report", str(final / "results.json")], capture_output=True, text=True,
                             check=True).stdout
    assert "build ✅ pass (3/3 targets built" in comment  # a pass is one line in the comment
    summary = subprocess.run([DS4CI, "report", "--format", "summary", str(final / "results.json")],
                             capture_output=True, text=True, check=True).stdout
    assert "(3/3 targets built)" in summary and sha256(built) in summary


def test_a_failed_build_is_a_fail_and_no_server_starts(tmp_path: Path) -> None:
    ws = Workspace.create(tmp_path)
    run = gate(ws, build_config(ws, steps=3, fail_at=3))
    assert run.code == 1, run.stdout + run.stderr
    assert run.results is not None
    assert run.results["verdict"] == "fail"
    assert run.reasons() == ("the build failed: exit 1 (2/3 targets built); last lines: "
                             "[1/3] Building CXX object step1.o | [2/3] Building CXX object step2.o | FAILED: step 3")
    assert run.results["timings"]["servers"] == [] and run.results["widths"] == []
    assert "FAILED: step 3" in run.results["build"]["log_tail"]
    final = Path(run.results["evidence"]["dir"])
    comment = subprocess.run([DS4CI, "report", str(final / "results.json")], capture_output=True, text=True,
                             check=True).stdout
    assert "(2/3 targets built)" in comment and "Build log tail" in comment and "FAILED: step 3" in comment
    verified = subprocess.run([DS4CI, "verify", str(final)], capture_output=True, text=True, check=False)
    assert verified.returncode == 1, verified.stdout  # intact, consistent, failing


def test_a_build_past_its_timeout_is_no_verdict(tmp_path: Path) -> None:
    ws = Workspace.create(tmp_path)
    run = gate(ws, build_config(ws, steps=1, sleep=30, timeout=1))
    assert run.code == 3, run.stdout + run.stderr
    assert run.results is not None and run.results["build"]["status"] == "error"
    assert "timed out" in run.reasons()


def test_no_build_uses_an_existing_binary_and_two_binaries_are_refused(tmp_path: Path) -> None:
    ws = Workspace.create(tmp_path)
    config = build_config(ws, steps=2, fail_at=1)  # would fail if it ran
    skipped = ws.gate("--no-build", widths="2", config=config)
    assert skipped.code == 0, skipped.stderr
    assert skipped.results is not None and skipped.results["build"] is None
    both = ws.gate(widths="2", config=config)  # --server-bin from the workspace and [build].server_bin
    assert both.code == 2 and "given twice" in both.stderr


def test_preflight_does_not_demand_a_binary_the_gate_will_build(tmp_path: Path) -> None:
    ws = Workspace.create(tmp_path)
    config = build_config(ws, steps=1)
    config.write_text(config.read_text() + "\n[gate]\n" + "\n".join([
        f'target = "{ws.target}"', f'target_sha256 = "{sha256(ws.target)}"',
        f'draft = "{ws.draft}"', f'draft_sha256 = "{sha256(ws.draft)}"',
        f'prompts = [{{file = "{ws.prompts[0]}", sha256 = "{sha256(ws.prompts[0])}"}}]',
    ]) + "\n")
    proc = subprocess.run([DS4CI, "preflight", "--config", str(config), "--json"], capture_output=True, text=True,
                          cwd=tmp_path, check=False, env=ws.env())
    problems = json.loads(proc.stdout)["problems"]
    assert not [p for p in problems if "server_bin" in p or "dflash_server" in p], problems


def test_a_build_log_past_log_cap_mib_is_cut_sealed_cut_and_no_verdict(tmp_path: Path) -> None:
    """A build that prints 32 MiB with --log-cap-mib 1 and exits 0: the sealed log keeps 1 MiB and says so."""
    ws = Workspace.create(tmp_path)
    config = build_config(ws, steps=2)
    script = ws.root / "build.sh"
    script.write_text(script.read_text().replace("set -e\n", "set -e\nhead -c 33554432 /dev/zero | tr '\\0' 'x'\necho\n"))
    run = gate(ws, config, "--log-cap-mib", "1")
    assert run.code == 3, run.stdout + run.stderr
    assert run.results is not None and run.results["build"]["status"] == "error"
    assert "log cap of 1048576 bytes (log_cap_mib)" in run.results["build"]["summary"]
    log = Path(run.results["evidence"]["dir"]) / "build" / "build.log"
    assert (1 << 20) < log.stat().st_size < (1 << 20) + 512
    assert log.read_bytes().rstrip(b"\n").rpartition(b"\n")[2].startswith(b"[ds4ci] log cut here:")
    assert subprocess.run([DS4CI, "verify", str(log.parent.parent)], capture_output=True, check=False).returncode == 4
