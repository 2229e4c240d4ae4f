"""Sealing the server's exact-differential trace file from its scratch folder: only a regular file of bounded size."""

from __future__ import annotations

import os
from pathlib import Path

from ds4ci.gate.tracefile import COLLECTED, collect


def test_a_regular_file_is_copied(tmp_path: Path) -> None:
    (tmp_path / "t.jsonl").write_bytes(b'{"a":1}\n')
    assert collect(tmp_path / "t.jsonl", tmp_path / "out.jsonl", 100) == COLLECTED
    assert (tmp_path / "out.jsonl").read_bytes() == b'{"a":1}\n'


def test_a_missing_file_is_absent(tmp_path: Path) -> None:
    assert collect(tmp_path / "none", tmp_path / "out", 100) == "absent (the server wrote no trace file)"
    assert not (tmp_path / "out").exists()


def test_a_link_a_fifo_and_an_oversized_file_are_refused(tmp_path: Path) -> None:
    (tmp_path / "big").write_bytes(b"x" * 101)
    (tmp_path / "link").symlink_to(tmp_path / "big")
    os.mkfifo(tmp_path / "fifo")  # opened without blocking: no writer needed
    assert collect(tmp_path / "link", tmp_path / "o1", 1000) == "refused: a symbolic link, not the server's own file"
    assert collect(tmp_path / "fifo", tmp_path / "o2", 1000) == "refused: not a regular file (a FIFO, device or folder)"
    assert collect(tmp_path / "big", tmp_path / "o3", 100) == "refused: 101 bytes, over the 100-byte limit for it"
    assert not any((tmp_path / name).exists() for name in ("o1", "o2", "o3"))


def test_evidence_is_never_overwritten(tmp_path: Path) -> None:
    (tmp_path / "t").write_bytes(b"new\n")
    (tmp_path / "out").write_bytes(b"old\n")
    assert collect(tmp_path / "t", tmp_path / "out", 100) == "refused: out already exists in the evidence (never overwritten)"
    assert (tmp_path / "out").read_bytes() == b"old\n"
