"""``results.json`` ``arms`` from the sealed lifecycle records (``ds4ci.judging.placement``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ds4ci.judging.judge import EvidenceError
from ds4ci.judging.placement import arm_placements

KEYS = [("target-only", None), ("q2", 2), ("q3", 3)]
PLACED = {"device": "cuda:1", "started_at": "2026-12-03T08:43:27.100Z", "finished_at": "2026-12-03T08:43:28.053Z"}


def _write(root: Path, key: str, extra: dict[str, Any]) -> None:
    folder = root / "servers" / key
    folder.mkdir(parents=True)
    (folder / "lifecycle.json").write_text(json.dumps({"key": key, "requests": [], **extra}))


def test_every_arm_with_a_folder_in_order(tmp_path: Path) -> None:
    _write(tmp_path, "q2", PLACED)
    _write(tmp_path, "target-only", {**PLACED, "device": "cuda:0"})
    found = arm_placements(tmp_path, KEYS)  # q3 never got a folder: absent
    assert found == [{"key": "target-only", "q": None, **PLACED, "device": "cuda:0"}, {"key": "q2", "q": 2, **PLACED}]


def test_evidence_of_an_earlier_ds4ci_has_no_placement(tmp_path: Path) -> None:
    _write(tmp_path, "target-only", {})
    _write(tmp_path, "q2", {})
    assert arm_placements(tmp_path, KEYS) is None


@pytest.mark.parametrize(("q2", "message"), [
    ({}, r"q2/lifecycle.json: device must be a device like cuda:0, found 'None'"),
    ({**PLACED, "device": "cuda 1"}, r"device must be a device like cuda:0"),
    ({**PLACED, "started_at": 5}, r"started_at must be a UTC time, found '5'"),
    ({**PLACED, "finished_at": "yesterday"}, r"finished_at must be a UTC time"),
])
def test_a_mixed_or_malformed_record_fails_closed(tmp_path: Path, q2: dict[str, Any], message: str) -> None:
    _write(tmp_path, "target-only", PLACED)
    _write(tmp_path, "q2", q2)
    with pytest.raises(EvidenceError, match=message):
        arm_placements(tmp_path, KEYS)
