"""The server's /tmp has a quota (a tmpfs of log_cap_mib): a server that writes more is held there and blamed."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from gatekit import FOREIGN_SERVER, Workspace

from ds4ci.supervisor import sandbox

pytestmark = pytest.mark.skipif(
    sandbox.refusal() is not None or not sandbox.sizes_tmpfs(), reason="needs bubblewrap with --size (0.7 or later)")


def test_a_server_filling_its_scratch_is_held_at_the_quota_and_named_as_the_cause(tmp_path: Path) -> None:
    ws = Workspace.create(tmp_path)
    ws.server = FOREIGN_SERVER
    temp = tmp_path / "tmp"  # where the host side of each scratch folder lives
    temp.mkdir()
    run = ws.gate("--log-cap-mib", "8", widths="2", env=ws.env(FOREIGN_BEHAVIOUR="fill-tmp", TMPDIR=str(temp)))
    assert run.code == 3, run.stdout + run.stderr
    quota = 8 << 20
    said = f"target-only: scratch flood: the server filled its /tmp, a tmpfs of {quota} bytes (its quota is log_cap_mib)"
    assert said in run.reasons(), run.reasons()
    assert run.results is not None
    final = Path(run.results["evidence"]["dir"])
    log = (final / "servers" / "target-only" / "stderr.log").read_text()
    assert "fill-tmp: stopped after 8 MiB: [Errno 28] No space left on device" in log, log  # held at the quota
    life = json.loads((final / "servers" / "target-only" / "lifecycle.json").read_text())
    assert life["scratch"] == {"quota_bytes": quota, "full": True}
    assert list(temp.iterdir()) == []  # nothing of it reached the host's disk


def test_a_server_within_its_quota_passes_and_says_its_scratch_was_not_full(tmp_path: Path) -> None:
    ws = Workspace.create(tmp_path)
    run = ws.gate(widths="2")
    assert run.code == 0, run.stdout + run.stderr
    assert run.results is not None
    final = Path(run.results["evidence"]["dir"])
    life = json.loads((final / "servers" / "target-only" / "lifecycle.json").read_text())
    assert life["scratch"] == {"quota_bytes": 512 << 20, "full": False}


def test_a_server_writing_into_dev_shm_and_dev_is_held_at_its_quota(tmp_path: Path) -> None:
    """bubblewrap's fresh /dev is a tmpfs of no size: a server writes 32 MiB (eight files of 4 MiB: each under the
    per-file limit) into /dev/shm and into /dev itself against an 8 MiB quota; /dev/shm is held at the quota and
    /dev takes no file at all."""
    ws = Workspace.create(tmp_path)
    flood = ("for i in 1 2 3 4 5 6 7 8; do head -c 4194304 /dev/zero > {dir}/flood$i 2>/dev/null; done; "
             "echo \"FLOOD {dir} $(cat {dir}/flood* 2>/dev/null | wc -c)\" >&2; rm -f {dir}/flood*")
    ws.server.write_text("#!/bin/sh\n" + flood.format(dir="/dev/shm") + "\n" + flood.format(dir="/dev")
                         + f'\nexec "{sys.executable}" -m ds4ci.simulator "$@"\n')
    run = ws.gate("--log-cap-mib", "8", widths="2")
    assert run.code == 0, run.stdout + run.stderr
    assert run.results is not None
    log = (Path(run.results["evidence"]["dir"]) / "servers" / "target-only" / "stderr.log").read_text()
    written = {line.split()[1]: int(line.split()[2]) for line in log.splitlines() if line.startswith("FLOOD ")}
    assert set(written) == {"/dev/shm", "/dev"}, log
    assert written["/dev/shm"] <= 8 << 20 and written["/dev"] == 0, written
