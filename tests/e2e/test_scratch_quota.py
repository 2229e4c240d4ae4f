"""The server's /tmp has a quota (a tmpfs of log_cap_mib): a server that writes more is held there and blamed."""

from __future__ import annotations

import json
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
