"""What the gate seals about its runner's calibration before any record is verified: the refusals that need none.

A record that verifies, one that is tampered with and one signed by another key are the e2e's
(tests/e2e/test_calibration_citation.py, with a real ``ds4ci calibrate`` record).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ds4ci.calibrate.citing import citation
from ds4ci.errors import UsageError
from ds4ci.options import config

RUN: dict[str, Any] = {
    "runner": {"name": "h200", "role": "gate"},
    "identities": {"target": {"sha256": "a" * 64}, "draft": {"sha256": "b" * 64}, "prompts": [{"sha256": "c" * 64}]},
    "settings": {"widths": [2, 3, 4], "max_tokens": 96, "seed": 1, "repeats": 2},
}
PINS = {"target_sha256": "a" * 64, "draft_sha256": "b" * 64, "prompt_sha256s": ["c" * 64], "widths": [2, 3, 4],
        "max_tokens": 96, "seed": 1, "repeats": 2}


def claim(folder: Path, runner: str, finished: str = "2026-12-07T10:00:00Z", **pins: Any) -> Path:
    """A folder that claims to be a record (what the search reads before anything is verified)."""
    folder.mkdir(parents=True)
    (folder / "inputs.json").write_text("{}")
    (folder / "calibration.json").write_text(json.dumps({"runner": runner, "finished": finished,
                                                          "pins": {**PINS, **pins}}))
    return folder


def test_no_folder_a_relative_one_and_one_the_pull_request_writes_are_refused(tmp_path: Path) -> None:
    assert "expected an absolute path of a folder" in citation(tmp_path / "none", RUN, ["k"])["problems"][0]
    assert "expected an absolute path" in citation(Path("records"), RUN, ["k"])["problems"][0]
    (tmp_path / "checkout" / "records").mkdir(parents=True)
    found = citation(tmp_path / "checkout" / "records", RUN, ["k"], (tmp_path / "checkout",))
    assert found["record"] is None and "which pull-request code writes" in found["problems"][0]


def test_records_of_other_runners_or_other_pins_are_not_cited_and_other_runners_are_named(tmp_path: Path) -> None:
    claim(tmp_path / "a" / "record", "sm86")
    claim(tmp_path / "b" / "record", "h200", seed=2)
    found = citation(tmp_path, RUN, ["k"])
    assert found == {"folder": str(tmp_path), "runner": "h200", "record": None, "problems": [], "others": ["sm86"],
                     "calibration": None}


def test_the_latest_matching_record_is_the_one_checked_and_without_a_key_it_is_refused(tmp_path: Path) -> None:
    claim(tmp_path / "old" / "record", "h200", finished="2026-12-01T10:00:00Z")
    latest = claim(tmp_path / "new" / "record", "h200", finished="2026-12-07T10:00:00Z")
    found = citation(tmp_path, RUN, [])
    assert found["record"] == str(latest) and found["calibration"] is None
    assert found["problems"] == ["no key of runner h200 to check its signature with (the gate signs with no key and "
                                 "the trusted config names no public_key for runner h200)"]
    checked = citation(tmp_path, RUN, ["ed25519:" + "A" * 43 + "="])
    assert checked["record"] == str(latest) and checked["problems"][0].startswith("it does not verify: ")


def test_the_config_takes_only_an_absolute_folder(tmp_path: Path) -> None:
    path = tmp_path / "ds4ci.toml"
    role = '[runner]\nrole = "negative-control"\n'  # no models needed to load the file
    path.write_text(role + '[gate]\ncalibrations = "records"\n')
    with pytest.raises(UsageError, match=r"gate\.calibrations: expected an absolute path outside the checkout"):
        config.load(path, {}, check_files=False)
    path.write_text(role + f'[gate]\ncalibrations = "{tmp_path / "records"}"\n')
    assert config.load(path, {}, check_files=False).calibrations == tmp_path / "records"
    assert config.load(path, {"calibrations": Path("rel")}, check_files=False).calibrations == Path("rel").absolute()


def test_a_folder_that_holds_a_pull_request_tree_is_refused_and_its_records_are_never_read(tmp_path: Path) -> None:
    """Red team: gate.calibrations = the service's state folder, whose work/<req>/src holds the PR's head; a record
    the PR commits (finished far in the future) was picked as the latest by that claim."""
    pr = tmp_path / "work" / "req-17" / "src"
    claim(pr, "h200", finished="2099-01-01T00:00:00Z")
    found = citation(tmp_path, RUN, ["k"], (pr,))
    assert found["record"] is None and found["others"] == []
    assert found["problems"] == [f"gate.calibrations = {tmp_path} holds {pr}, which pull-request code writes: keep "
                                 "the runner's records in a folder of their own, apart from it"]


def test_the_search_skips_pull_request_trees_and_follows_no_link(tmp_path: Path) -> None:
    from ds4ci.calibrate.latest import records_under

    records = tmp_path / "records"
    honest = claim(records / "a" / "record", "h200")
    pr = claim(records / "pr", "h200", finished="2099-01-01T00:00:00Z")
    elsewhere = claim(tmp_path / "elsewhere" / "record", "h200", finished="2098-01-01T00:00:00Z")
    (records / "linked").symlink_to(elsewhere)
    lone = records / "b" / "record"
    lone.mkdir(parents=True)
    (lone / "inputs.json").write_text("{}")
    (lone / "calibration.json").symlink_to(elsewhere / "calibration.json")
    assert records_under(records, (pr,)) == [honest]
    assert records_under(records) == [honest, pr]
    assert citation(records, RUN, [])["record"] == str(pr)  # no tree named: the latest claim (still verified next)
