"""The server binary a build wrote is bounded before ds4ci reads it: its size, its holes, the time to read it."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from gatekit import Workspace

from ds4ci.errors import NoVerdictError
from ds4ci.gate import privatebin
from ds4ci.runner import filelimit
from ds4ci.runner.identity import hash_file

pytestmark = pytest.mark.e2e


def _sparse_server(ws: Workspace, size: int) -> Path:
    """The workspace's runnable server script, made ``size`` bytes long by a hole at its end (costs no disk)."""
    with ws.server.open("r+b") as fh:
        fh.truncate(size)
    return ws.server


def _private_copies(folder: Path) -> set[Path]:
    return set(folder.glob("ds4ci-server-bin-*"))


def test_a_sparse_server_binary_is_refused_before_it_is_hashed_or_copied(tmp_path: Path) -> None:
    ws = Workspace.create(tmp_path)
    binary = _sparse_server(ws, 1 << 30)  # the attack: 1 GiB of apparent size, a few bytes on disk
    assert binary.stat().st_blocks * 512 < 1 << 20
    temp = tmp_path / "tmp"  # its own temporary folder: other ds4ci runs on this machine make copies too
    temp.mkdir()
    run = ws.gate(widths="2", timeout=300, env=ws.env(TMPDIR=str(temp)))
    assert run.code == 3, run.stdout + run.stderr
    assert f"server_bin {binary} is a sparse file: " in run.reasons(), run.reasons()
    assert f"more than ds4ci's limit of {filelimit.MAX_HOLE_BYTES}" in run.reasons()
    assert _private_copies(temp) == set()  # no dense copy was ever made


def test_a_server_binary_over_the_size_limit_is_refused_by_its_size(tmp_path: Path) -> None:
    ws = Workspace.create(tmp_path)
    binary = _sparse_server(ws, filelimit.SERVER_BIN.max_bytes + 1)
    run = ws.gate(widths="2", timeout=300)
    assert run.code == 3, run.stdout + run.stderr
    assert (f"server_bin {binary} is {filelimit.SERVER_BIN.max_bytes + 1} bytes, more than ds4ci's limit of "
            f"{filelimit.SERVER_BIN.max_bytes} bytes for it; refused before it is read") in run.reasons()


def test_the_private_copy_refuses_a_sparse_file_swapped_in_after_hashing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sparse = tmp_path / "server"
    sparse.write_bytes(b"#!/bin/sh\n")
    os.truncate(sparse, 64 << 20)
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))  # where the private folder would be made
    with pytest.raises(NoVerdictError, match=r"is a sparse file: \d+ of its 67108864 bytes are holes"):
        privatebin.copy(sparse, {"server_bin": {"sha256": "0" * 64}})  # type: ignore[typeddict-item]
    assert _private_copies(temp) == set()


def test_reading_a_build_written_file_has_a_deadline(tmp_path: Path) -> None:
    written = tmp_path / "server"
    written.write_bytes(b"x" * (1 << 20))
    expired = filelimit.FileLimit(max_bytes=1 << 30, deadline_s=-1.0)  # already past: the first read is refused
    with pytest.raises(NoVerdictError, match=r"reading it took longer than ds4ci's deadline of -1 s \(0 bytes read\)"):
        hash_file(written, expired, "server_bin")
    assert hash_file(written, filelimit.SERVER_BIN, "server_bin")  # within the limits it hashes
