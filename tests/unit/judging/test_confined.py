"""confined: a bundle's files are read only inside it, only when regular, only up to a limit."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from ds4ci.judging import confined, judge


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    root = tmp_path / "bundle"
    (root / "requests").mkdir(parents=True)
    (root / "requests" / "a.json").write_text('{"ok": 1}')
    (tmp_path / "outside.json").write_text('{"secret": 1}')
    return root


def test_a_plain_relative_path_is_read(bundle: Path) -> None:
    assert confined.read_bytes(bundle, "requests/a.json") == b'{"ok": 1}'
    assert confined.digest(bundle, "requests/a.json") == (9, hashlib.sha256(b'{"ok": 1}').hexdigest())


@pytest.mark.parametrize("rel", ["/etc/hostname", "../outside.json", "requests/../../outside.json", "requests//a.json",
                                 "./requests/a.json", "", None, 7, ["requests", "a.json"], "requests/a.json\0"])
def test_paths_that_are_not_plain_relative_ones_are_refused_unopened(bundle: Path, rel: object) -> None:
    with pytest.raises(confined.ConfinedError, match="relative path inside the bundle"):
        confined.read_bytes(bundle, rel)


def test_a_symlink_is_never_followed_at_the_end_or_on_the_way(bundle: Path) -> None:
    (bundle / "link.json").symlink_to(bundle.parent / "outside.json")
    (bundle / "linkdir").symlink_to(bundle.parent)
    for rel in ("link.json", "linkdir/outside.json"):
        with pytest.raises(confined.ConfinedError, match="symbolic link"):
            confined.read_bytes(bundle, rel)


def test_a_fifo_a_directory_and_a_device_are_refused_without_blocking(bundle: Path) -> None:
    os.mkfifo(bundle / "fifo")
    with pytest.raises(confined.ConfinedError, match="a FIFO"):
        confined.read_bytes(bundle, "fifo")  # would block for ever with a plain open()
    with pytest.raises(confined.ConfinedError, match="a directory"):
        confined.read_bytes(bundle, "requests")
    with pytest.raises(confined.ConfinedError, match="a character device"):
        confined.read_bytes(Path("/dev"), "null")


def test_a_missing_file_and_an_oversized_one_say_so(bundle: Path) -> None:
    with pytest.raises(confined.ConfinedError, match=r"requests/b\.json is missing from the bundle"):
        confined.read_bytes(bundle, "requests/b.json")
    with pytest.raises(confined.ConfinedError, match="larger than the 4-byte limit"):
        confined.read_bytes(bundle, "requests/a.json", limit=4)


def test_judge_reads_json_through_confined(bundle: Path) -> None:
    assert judge.read_json(bundle, "requests/a.json") == {"ok": 1}
    with pytest.raises(judge.EvidenceError, match="not a plain relative path"):
        judge.read_json(bundle, "../outside.json")


@pytest.mark.parametrize(("field", "value", "message"), [
    ("swept", 5, "swept must be an array, found int"), ("overrides_after", "x", "overrides_after must be an array"),
    ("error", [], "error must be a string or null"), ("q", True, "q must be an integer or null, found bool"),
    ("stop", [], "stop must be an object"), ("log_flood", None, "log_flood must be an object"),
])
def test_lifecycle_fields_of_the_wrong_type_are_evidence_errors(tmp_path: Path, field: str, value: object, message: str) -> None:
    where = tmp_path / judge.SERVERS / "q2"
    where.mkdir(parents=True)
    (where / judge.LIFECYCLE).write_text(json.dumps({"requests": [], field: value}))
    with pytest.raises(judge.EvidenceError, match=message):
        judge.load_lifecycle(tmp_path, "q2")
