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


BUILD = {"command": "./build.sh", "cwd": "/runner/_work/e/e/subject/src", "server_bin": "/runner/_work/e/e/subject/out/srv",
         "status": "pass", "exit_code": 0, "duration_s": 1.0, "targets_built": None, "targets_total": None,
         "summary": "built", "log_tail": ""}
TRUSTED_BUILD = '[build]\ncommand = "./build.sh"\ncwd = "src"\nserver_bin = "out/srv"\n'


def built(**build: Any) -> Verification:
    found = recorded()
    assert found.recorded is not None
    found.recorded["build"] = {**BUILD, **build}  # type: ignore[typeddict-item]
    return found


def test_the_trusted_build_has_no_mismatch_wherever_the_runner_keeps_its_checkout(tmp_path: Path) -> None:
    want = trusted(tmp_path, "[gate]\nwidths = [2, 3, 4]\nrepeats = 2\n" + TRUSTED_BUILD)
    assert expectation_mismatches(built(), want) == []
    elsewhere = built(cwd="/home/r/w/src", server_bin="/home/r/w/out/srv")
    assert expectation_mismatches(elsewhere, want) == []


@pytest.mark.parametrize(("build", "key"), [
    ({"command": "cp ~/.ds4ci/key.pem /tmp && ./build.sh"}, "build.command"),
    ({"server_bin": "/runner/_work/e/e/subject/other/srv"}, "build.server_bin"),
    ({"cwd": "/runner/_work/e/e/subject"}, "build.cwd"),
    ({"cwd": "/elsewhere/src"}, "build.cwd"),
])
def test_a_build_other_than_the_trusted_one_is_named(tmp_path: Path, build: dict[str, str], key: str) -> None:
    want = trusted(tmp_path, "[gate]\nwidths = [2, 3, 4]\nrepeats = 2\n" + TRUSTED_BUILD)
    assert [m[0] for m in expectation_mismatches(built(**build), want)] == [key]


def test_a_build_the_trusted_config_does_not_ask_for_or_a_missing_one_is_named(tmp_path: Path) -> None:
    without = trusted(tmp_path, "[gate]\nwidths = [2, 3, 4]\nrepeats = 2\n")
    assert ("build", "./build.sh", None) in expectation_mismatches(built(), without)
    with_build = trusted(tmp_path, "[gate]\nwidths = [2, 3, 4]\nrepeats = 2\n" + TRUSTED_BUILD)
    assert ("build", None, "./build.sh") in expectation_mismatches(recorded(), with_build)


def test_the_server_kind_is_compared_and_a_bundle_that_recorded_none_ran_a_program(tmp_path: Path) -> None:
    program = trusted(tmp_path, "[gate]\nwidths = [2, 3, 4]\nrepeats = 2\n")
    assert ("server", "simulator", "program") in expectation_mismatches(recorded(server="simulator"), program)
    assert expectation_mismatches(recorded(), program) == []
    simulator = trusted(tmp_path, '[gate]\nwidths = [2, 3, 4]\nrepeats = 2\nserver = "simulator"\n')
    assert ("server", "program", "simulator") in expectation_mismatches(recorded(), simulator)
    assert expectation_mismatches(recorded(server="simulator"), simulator) == []
