"""What a trusted config demands of a bundle (``verify --expect-config``, ``publish --expect-config``)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from ds4ci.errors import UsageError
from ds4ci.evidence.verify import Verification, expectation_mismatches, expectations

DATA = Path(__file__).resolve().parents[2] / "data" / "results"


def recorded(**settings: Any) -> Verification:
    doc = json.loads((DATA / "pass.json").read_text())
    doc["settings"].update(settings)
    return Verification("b", recorded=doc)


def trusted(tmp_path: Path, text: str) -> dict[str, Any]:
    doc = json.loads((DATA / "pass.json").read_text())
    (check,) = doc["checks"]
    path = tmp_path / "trusted.toml"
    path.write_text(text + f"\n[[checks]]\nname = {json.dumps(check['name'])}\ncommand = {json.dumps(check['command'])}\n")
    return expectations(path)


def test_the_same_settings_have_no_mismatch(tmp_path: Path) -> None:
    assert expectation_mismatches(recorded(), trusted(tmp_path, "[gate]\nwidths = [2, 3, 4]\nrepeats = 2\n")) == []


def test_other_widths_repeats_and_checks_are_named(tmp_path: Path) -> None:
    want = trusted(tmp_path, "[gate]\nwidths = [2, 3, 4]\nrepeats = 3\n")
    found = recorded(widths=[2])
    assert ("widths", [2], [2, 3, 4]) in expectation_mismatches(found, want)
    assert ("repeats", 2, 3) in expectation_mismatches(found, want)
    fewer = copy.deepcopy(want)
    fewer["checks"] = []
    assert [m[0] for m in expectation_mismatches(recorded(), fewer)] == ["checks", "repeats"]


def test_a_focused_rerun_is_allowed_only_where_asked_and_only_within_the_trusted_widths(tmp_path: Path) -> None:
    want = trusted(tmp_path, "[gate]\nwidths = [2, 3, 4]\n")
    focused = recorded(widths=[4], scope="focused", configured_widths=[2, 3, 4])
    assert expectation_mismatches(focused, want, focused=True) == []
    assert [m[0] for m in expectation_mismatches(focused, want)] == ["widths"]  # verify stays strict
    stray = recorded(widths=[5], scope="focused", configured_widths=[2, 3, 4])
    assert [m[0] for m in expectation_mismatches(stray, want, focused=True)] == ["widths"]


def test_a_runner_table_applies_and_decides_the_role(tmp_path: Path) -> None:
    want = trusted(tmp_path, '[gate]\nwidths = [2, 3, 4]\n[runners.gfx1151]\nwidths = [2]\nrole = "negative-control"\n')
    assert ("role", "gate", "negative-control") in expectation_mismatches(recorded(), want)


def test_malformed_tables_are_usage_errors(tmp_path: Path) -> None:
    path = tmp_path / "t.toml"
    path.write_text("runners = [1]\n")
    with pytest.raises(UsageError, match="must be tables"):
        expectations(path)
