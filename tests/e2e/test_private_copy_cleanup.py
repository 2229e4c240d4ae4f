"""The private copy of the server binary never outlives ds4ci: removed after a SIGKILL, swept when orphaned."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from gatekit import DS4CI, FOREIGN_SERVER, Workspace

pytestmark = pytest.mark.e2e


def _copies(folder: Path) -> list[Path]:
    return sorted(folder.glob("ds4ci-server-bin-*"))


def test_the_private_copy_is_removed_after_a_sigkill_of_ds4ci(tmp_path: Path) -> None:
    ws = Workspace.create(tmp_path)
    ws.server = FOREIGN_SERVER
    temp = tmp_path / "tmp"
    temp.mkdir()
    env = ws.env(FOREIGN_BEHAVIOUR="drip-answer", FOREIGN_DRIP_S="30", TMPDIR=str(temp))
    gate = subprocess.Popen([DS4CI, "gate", *ws.args(widths="2", request_timeout=600)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        assert gate.stderr is not None
        for line in gate.stderr:  # the server runs its private copy: the copy exists now
            if "server pid" in line:
                break
        copies = _copies(temp)
        assert len(copies) == 1 and copies[0].name.startswith(f"ds4ci-server-bin-{gate.pid}-"), copies
        assert [p.name for p in copies[0].iterdir()] == [FOREIGN_SERVER.name]
    finally:
        gate.send_signal(signal.SIGKILL)
        gate.wait()
    deadline = time.monotonic() + 30
    while _copies(temp) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _copies(temp) == []  # removed by the watchdog once ds4ci was gone


def test_an_orphaned_private_copy_is_swept_at_the_next_gate(tmp_path: Path) -> None:
    ws = Workspace.create(tmp_path)
    temp = tmp_path / "tmp"
    temp.mkdir()
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    orphan = temp / f"ds4ci-server-bin-{gone.stdout.strip()}-0123abcd"  # its ds4ci has exited
    orphan.mkdir()
    (orphan / "server").write_bytes(b"old copy")
    (orphan / "server").chmod(0o500)
    orphan.chmod(0o500)
    alive = temp / f"ds4ci-server-bin-{os.getpid()}-4567cdef"  # a running process's: never touched
    alive.mkdir()
    run = ws.gate(widths="2", env=ws.env(TMPDIR=str(temp)))
    assert run.code == 0, run.stdout + run.stderr
    assert _copies(temp) == [alive]
