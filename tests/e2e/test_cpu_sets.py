"""A gate started as ``ds4ci calibrate`` starts one of several side by side (``--cpu-sets``): its server, under
real bubblewrap, runs on the gate's CPU set only, and with ``affinity+online`` the online CPU list it reads is
that set too. The server is a shell script that reports both on stderr (kept in the evidence) and then runs the
simulator, so the gate runs to its verdict.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from gatekit import DS4CI, Workspace

from ds4ci.calibrate import cpusets
from ds4ci.supervisor import sandbox
from ds4ci.supervisor.cpuonline import cpu_list

pytestmark = pytest.mark.skipif(sandbox.refusal() is not None, reason=f"no sandbox here: {sandbox.refusal()}")
HOST_ONLINE = Path("/sys/devices/system/cpu/online").read_text().strip()
CPUS = sorted(os.sched_getaffinity(0))


def reporting_server(folder: Path) -> Path:
    path = folder / "cpu-server"
    path.write_text(f"""#!/bin/sh
echo "CPUS affinity=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status) \\
online=$(cat /sys/devices/system/cpu/online)" >&2
exec "{sys.executable}" -m ds4ci.simulator "$@"
""")
    path.chmod(0o755)
    return path


def gate_on(tmp_path: Path, lever: str) -> tuple[str, tuple[int, ...]]:
    """One gate in the last of two slots, as calibrate --jobs 2 --cpu-sets LEVER starts it: the server's report."""
    ws = Workspace.create(tmp_path, server=reporting_server(tmp_path))
    slots = cpusets.Slots(lever, 2)
    sets = [slots.free.get() for _ in range(2)]
    cpus = sets[-1]
    assert cpus is not None
    argv = cpusets.pinned([DS4CI, "gate", *ws.args(widths="2"), *slots.gate_args()], cpus)
    proc = subprocess.run(argv, cwd=ws.checkout(), env=ws.env(), capture_output=True, text=True, timeout=180,
                          check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads((ws.root / "results.json").read_text())["containment"] == "sandbox"
    (attempt,) = (ws.root / "evidence" / "runs").iterdir()
    reports = [line for key in ("target-only", "q2") for line in
               (attempt / "servers" / key / "stderr.log").read_text().splitlines() if line.startswith("CPUS ")]
    assert len(reports) == 2, reports  # both arms' servers reported
    assert len(set(reports)) == 1, reports
    return reports[0], cpus


@pytest.mark.skipif(len(CPUS) < 2, reason="two disjoint CPU sets need two CPUs")
def test_affinity_puts_the_server_on_its_gates_cpus_and_leaves_the_online_list(tmp_path: Path) -> None:
    report, cpus = gate_on(tmp_path, cpusets.AFFINITY)
    assert cpus and set(cpus) < set(CPUS)
    assert report == f"CPUS affinity={cpu_list(cpus)} online={HOST_ONLINE}"


@pytest.mark.skipif(len(CPUS) < 2, reason="two disjoint CPU sets need two CPUs")
def test_affinity_and_online_shows_the_server_only_its_cpus_as_online(tmp_path: Path) -> None:
    report, cpus = gate_on(tmp_path, cpusets.ONLINE)
    assert report == f"CPUS affinity={cpu_list(cpus)} online={cpu_list(cpus)}"
    assert cpu_list(cpus) != HOST_ONLINE


def test_the_online_list_without_the_sandbox_is_no_verdict(tmp_path: Path) -> None:
    """The online list is the sandbox's own file: with the sandbox off, asking for it stops the gate, none runs."""
    ws = Workspace.create(tmp_path, server=reporting_server(tmp_path))
    config = tmp_path / "off.toml"
    config.write_text("[sandbox]\nenabled = false\n")
    run = ws.gate(cpusets.ONLINE_FLAG, widths="2", config=config)
    assert run.code == 3, run.stdout + run.stderr
    assert "sandbox.cpu_online (--sandbox-cpu-online) needs the sandbox" in run.stderr + run.stdout
    assert "Traceback" not in run.stderr
